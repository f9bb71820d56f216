"""Pure parts of a pod's identity: the ServiceAccount admission plugin, bound tokens, emptyDir eviction.

No cluster is started: the admission plugin is a function over a pod, the token issuer works on an
in-memory Store, the eviction decision takes measured usage.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from gpuworkspace_devcluster import saadmission
from gpuworkspace_devcluster.errors import ApiError
from gpuworkspace_devcluster.resources import find
from gpuworkspace_devcluster.satokens import TokenIssuer
from gpuworkspace_devcluster.sim import eviction
from gpuworkspace_devcluster.store import Store
from gpuworkspace_devcluster.verbs import Verbs

Obj = dict[str, Any]
PODS, SAS, NAMESPACES = (
    find("", "v1", "pods"),
    find("", "v1", "serviceaccounts"),
    find("", "v1", "namespaces"),
)
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def pod(**spec: Any) -> Obj:
    return {
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "a", "image": "busybox"}], **spec},
    }


def accounts(**by_name: Obj) -> saadmission.Lookup:
    return lambda ns, name: by_name.get(name)


# -------------------------------------------------------------------------------------------- admission
def test_admission_defaults_the_account_and_mounts_the_token_everywhere() -> None:
    body = pod(initContainers=[{"name": "init", "image": "busybox"}])
    saadmission.admit_pod("ns", body, accounts(default={}), random.Random(1))
    spec = body["spec"]
    assert spec["serviceAccountName"] == "default"
    [volume] = spec["volumes"]
    assert (
        volume["name"].startswith("kube-api-access-") and len(volume["name"]) == len("kube-api-access-") + 5
    )
    assert volume["projected"] == saadmission.token_volume_source()
    sources = volume["projected"]["sources"]
    assert sources[0] == {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}
    assert sources[1]["configMap"]["name"] == "kube-root-ca.crt"
    assert sources[2]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"] == "metadata.namespace"
    mount = {"name": volume["name"], "readOnly": True, "mountPath": SA_DIR}
    assert spec["containers"][0]["volumeMounts"] == [mount]
    assert spec["initContainers"][0]["volumeMounts"] == [mount]


@pytest.mark.parametrize(
    ("pod_says", "account_says", "mounted"),
    [
        pytest.param(None, None, True, id="default-true"),
        pytest.param(False, None, False, id="pod-false"),
        pytest.param(None, False, False, id="account-false"),
        pytest.param(True, False, True, id="pod-wins-over-account"),
        pytest.param(False, True, False, id="pod-false-wins"),
    ],
)
def test_should_automount_pod_first_then_the_account(
    pod_says: bool | None, account_says: bool | None, mounted: bool
) -> None:
    body = pod(**({} if pod_says is None else {"automountServiceAccountToken": pod_says}))
    account = {} if account_says is None else {"automountServiceAccountToken": account_says}
    saadmission.admit_pod("ns", body, accounts(default=account), random.Random(1))
    assert bool(body["spec"].get("volumes")) is mounted


def test_a_container_with_its_own_mount_there_is_left_alone_and_an_existing_volume_is_reused() -> None:
    own = {"name": "mine", "mountPath": SA_DIR}
    body = pod(
        containers=[
            {"name": "a", "image": "busybox", "volumeMounts": [own]},
            {"name": "b", "image": "busybox"},
        ],
        volumes=[
            {"name": "kube-api-access-abcde", "projected": {"sources": []}},
            {"name": "mine", "emptyDir": {}},
        ],
    )
    saadmission.admit_pod("ns", body, accounts(default={}), random.Random(1))
    containers = body["spec"]["containers"]
    assert containers[0]["volumeMounts"] == [own]
    assert containers[1]["volumeMounts"] == [
        {"name": "kube-api-access-abcde", "readOnly": True, "mountPath": SA_DIR}
    ]
    assert [v["name"] for v in body["spec"]["volumes"]] == ["kube-api-access-abcde", "mine"]


def test_a_missing_account_is_refused_as_the_plugin_refuses_it_and_mirror_pods_are_not_touched() -> None:
    with pytest.raises(ApiError) as refused:
        saadmission.admit_pod("ns", pod(serviceAccountName="ghost"), accounts(default={}), random.Random(1))
    assert refused.value.code == 403
    assert refused.value.message == (
        'pods "p" is forbidden: error looking up service account ns/ghost: serviceaccount "ghost" not found'
    )
    mirror = pod()
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "x"}
    saadmission.admit_pod("ns", mirror, accounts(), random.Random(1))
    assert "serviceAccountName" not in mirror["spec"]


def test_the_accounts_image_pull_secrets_are_copied_when_the_pod_has_none() -> None:
    account = {"imagePullSecrets": [{"name": "registry"}]}
    body = pod()
    saadmission.admit_pod("ns", body, accounts(default=account), random.Random(1))
    assert body["spec"]["imagePullSecrets"] == [{"name": "registry"}]
    own = pod(imagePullSecrets=[{"name": "mine"}])
    saadmission.admit_pod("ns", own, accounts(default=account), random.Random(1))
    assert own["spec"]["imagePullSecrets"] == [{"name": "mine"}]


def test_the_api_creates_the_default_account_the_controller_would_have_made() -> None:
    verbs = Verbs(Store())
    verbs.create(NAMESPACES, "", {"metadata": {"name": "fresh"}})  # type: ignore[arg-type]
    created, _ = verbs.create(PODS, "fresh", pod())  # type: ignore[arg-type]
    assert created["spec"]["serviceAccountName"] == "default"
    assert verbs.store.get(SAS, "fresh", "default") is not None  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------- tokens
class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def issuer_and_store() -> tuple[TokenIssuer, Store, Clock, Verbs]:
    clock = Clock()
    verbs = Verbs(Store())
    verbs.create(NAMESPACES, "", {"metadata": {"name": "ns"}})  # type: ignore[arg-type]
    verbs.create(SAS, "ns", {"metadata": {"name": "default"}})  # type: ignore[arg-type]
    verbs.create(SAS, "ns", {"metadata": {"name": "robot"}})  # type: ignore[arg-type]
    verbs.create(PODS, "ns", pod(serviceAccountName="robot"))  # type: ignore[arg-type]
    return TokenIssuer(b"k" * 32, clock), verbs.store, clock, verbs


def test_a_bound_token_carries_the_real_claims_and_expires() -> None:
    issuer, store, clock, _ = issuer_and_store()
    answer = issuer.request(store, "ns", "robot", {"spec": {"boundObjectRef": {"kind": "Pod", "name": "p"}}})
    token = answer["status"]["token"]
    claims = issuer._claims(token)
    assert claims is not None
    assert claims["sub"] == "system:serviceaccount:ns:robot"
    assert claims["kubernetes.io"]["pod"]["name"] == "p"
    assert claims["exp"] - claims["iat"] == 3600
    user = issuer.authenticate(store, token)
    assert user is not None and user.name == "system:serviceaccount:ns:robot"
    assert user.groups == ("system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated")
    clock.now += 3600 + 61  # past exp and the minute of leeway
    assert issuer.authenticate(store, token) is None


def test_the_admission_plugins_3607_seconds_get_a_year_with_warnafter() -> None:
    issuer, store, _, _ = issuer_and_store()
    answer = issuer.request(store, "ns", "robot", {"spec": {"expirationSeconds": 3607}})
    claims = issuer._claims(answer["status"]["token"])
    assert claims is not None
    assert claims["exp"] - claims["iat"] == 365 * 24 * 3600
    assert claims["kubernetes.io"]["warnafter"] == claims["iat"] + 3607


def test_a_tampered_or_foreign_token_and_a_recreated_account_are_refused() -> None:
    issuer, store, _, verbs = issuer_and_store()
    token = issuer.request(store, "ns", "robot", {"spec": {}})["status"]["token"]
    head, body, sig = token.split(".")
    assert issuer.authenticate(store, f"{head}.{body}.{sig[::-1]}") is None
    assert TokenIssuer(b"o" * 32).authenticate(store, token) is None
    assert issuer.authenticate(store, "not-a-jwt") is None
    verbs.delete(SAS, "ns", "robot", {})  # type: ignore[arg-type]
    verbs.create(SAS, "ns", {"metadata": {"name": "robot"}})  # type: ignore[arg-type]
    assert issuer.authenticate(store, token) is None  # another uid: another account


def test_a_bound_object_with_another_uid_is_a_conflict() -> None:
    issuer, store, _, _ = issuer_and_store()
    body = {"spec": {"boundObjectRef": {"kind": "Pod", "name": "p", "uid": "0000"}}}
    with pytest.raises(ApiError) as refused:
        issuer.request(store, "ns", "robot", body)
    assert refused.value.code == 409 and "does not match the UID in record" in refused.value.message
    with pytest.raises(ApiError) as unknown:
        issuer.request(store, "ns", "robot", {"spec": {"boundObjectRef": {"kind": "Node", "name": "n"}}})
    assert unknown.value.code == 422 and "spec.boundObjectRef.kind" in unknown.value.message


# --------------------------------------------------------------------------------------------- eviction
@pytest.mark.parametrize(
    ("volume", "used", "message"),
    [
        pytest.param(
            {"sizeLimit": "1Mi"}, 2 << 20, 'Usage of EmptyDir volume "v" exceeds the limit "1Mi". ', id="over"
        ),
        pytest.param({"sizeLimit": "1Mi"}, 1 << 20, None, id="at-the-limit"),
        pytest.param({}, 1 << 30, None, id="no-limit"),
        pytest.param({"medium": "Memory", "sizeLimit": "1Mi"}, 2 << 20, None, id="tmpfs-is-sized"),
    ],
)
def test_emptydir_limit_eviction(volume: Obj, used: int, message: str | None) -> None:
    body = pod(volumes=[{"name": "v", "emptyDir": volume}])
    assert eviction.decide_emptydir_eviction(body, {"v": used}) == message
