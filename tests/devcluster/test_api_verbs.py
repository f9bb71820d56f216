"""Conformance: verbs and server-filled metadata, driven through kubernetes_asyncio."""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpuworkspace_devcluster.cluster import DevCluster

NS = "gpu-workspaces"


def pod(name: str, **labels: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "notebook", "image": "quay.io/jupyter/base-notebook:2024-12-02"}]},
    }


async def make_ns(api: client.ApiClient, name: str = NS) -> None:
    await client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})


def status_of(exc: ApiException) -> dict:
    return json.loads(exc.body)


async def test_create_fills_server_metadata_and_returns_201(api: client.ApiClient) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    raw = await core.create_namespaced_pod(NS, pod("a"), _preload_content=False)
    assert raw.status == 201
    created = json.loads(await raw.read())
    meta = created["metadata"]
    assert meta["namespace"] == NS and meta["generation"] == 1
    assert len(meta["uid"]) == 36 and meta["creationTimestamp"].endswith("Z")
    assert created["status"]["phase"] == "Pending"
    assert created["spec"]["restartPolicy"] == "Always"  # defaulted like the real apiserver
    again = await core.read_namespaced_pod("a", NS)
    assert again.metadata.resource_version == meta["resourceVersion"]


async def test_resource_versions_are_cluster_wide_and_monotonic(api: client.ApiClient) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    p = await core.create_namespaced_pod(NS, pod("a"))
    cm = await core.create_namespaced_config_map(NS, {"metadata": {"name": "c"}, "data": {"k": "v"}})
    assert int(cm.metadata.resource_version) > int(p.metadata.resource_version)


async def test_generate_name(api: client.ApiClient) -> None:
    await make_ns(api)
    created = await client.CoreV1Api(api).create_namespaced_config_map(
        NS, {"metadata": {"generateName": "cfg-"}}
    )
    assert created.metadata.name.startswith("cfg-") and len(created.metadata.name) == 9


@pytest.mark.parametrize("name", ["Bad_Name", "-x", "a" * 254])
async def test_invalid_names_are_422(api: client.ApiClient, name: str) -> None:
    await make_ns(api)
    with pytest.raises(ApiException) as err:
        await client.CoreV1Api(api).create_namespaced_config_map(NS, {"metadata": {"name": name}})
    assert err.value.status == 422
    body = status_of(err.value)
    assert body["kind"] == "Status" and body["reason"] == "Invalid"
    assert "metadata.name" in body["message"]


async def test_errors_are_status_objects(api: client.ApiClient) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    with pytest.raises(ApiException) as err:
        await core.read_namespaced_pod("missing", NS)
    assert err.value.status == 404
    assert status_of(err.value) | {"details": None} == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "missing" not found',
        "reason": "NotFound",
        "code": 404,
        "details": None,
    }
    await core.create_namespaced_pod(NS, pod("a"))
    with pytest.raises(ApiException) as err:
        await core.create_namespaced_pod(NS, pod("a"))
    assert (err.value.status, status_of(err.value)["reason"]) == (409, "AlreadyExists")
    with pytest.raises(ApiException) as err:
        await core.create_namespaced_pod("nowhere", pod("a"))
    assert err.value.status == 404 and 'namespaces "nowhere" not found' in status_of(err.value)["message"]


async def test_put_with_stale_resource_version_conflicts(api: client.ApiClient) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    cm = await core.create_namespaced_config_map(NS, {"metadata": {"name": "c"}, "data": {"k": "1"}})
    cm.data = {"k": "2"}
    updated = await core.replace_namespaced_config_map("c", NS, cm)
    assert updated.data == {"k": "2"}
    cm.data = {"k": "3"}  # still carries the old resourceVersion
    with pytest.raises(ApiException) as err:
        await core.replace_namespaced_config_map("c", NS, cm)
    assert err.value.status == 409 and status_of(err.value)["reason"] == "Conflict"
    assert "the object has been modified" in status_of(err.value)["message"]


async def test_status_subresource_and_generation(api: client.ApiClient) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    await core.create_namespaced_persistent_volume_claim(
        NS,
        {
            "metadata": {"name": "home"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    )
    # A status write through the main resource is ignored ...
    patched = await core.patch_namespaced_persistent_volume_claim(
        "home", NS, {"status": {"phase": "Bound"}, "metadata": {"labels": {"a": "b"}}}
    )
    assert patched.status.phase == "Pending" and patched.metadata.labels == {"a": "b"}
    assert patched.metadata.generation == 1  # metadata changes don't bump generation
    # ... and honoured through /status, which ignores everything else.
    patched = await core.patch_namespaced_persistent_volume_claim_status(
        "home", NS, {"status": {"phase": "Bound"}, "metadata": {"labels": {"c": "d"}}}
    )
    assert patched.status.phase == "Bound" and patched.metadata.labels == {"a": "b"}


async def test_patch_types(api: client.ApiClient) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    p = pod("a")
    p["spec"]["containers"].append({"name": "sidecar", "image": "busybox:1.36"})
    await core.create_namespaced_pod(NS, p)
    # strategic merge: containers merge by name, so the sidecar survives
    patched = await core.patch_namespaced_pod(
        "a",
        NS,
        {"spec": {"containers": [{"name": "notebook", "image": "quay.io/jupyter/base-notebook:new"}]}},
    )
    assert [c.image for c in patched.spec.containers] == ["quay.io/jupyter/base-notebook:new", "busybox:1.36"]
    # json-patch
    patched = await core.patch_namespaced_pod(
        "a", NS, [{"op": "add", "path": "/metadata/labels/x", "value": "y"}]
    )
    assert patched.metadata.labels["x"] == "y"
    # merge-patch (null deletes)
    api.set_default_header("Content-Type", "application/merge-patch+json")
    try:
        patched = await core.patch_namespaced_pod(
            "a", NS, {"metadata": {"labels": {"x": None}}}, _content_type="application/merge-patch+json"
        )
    finally:
        api.default_headers.pop("Content-Type", None)
    assert "x" not in (patched.metadata.labels or {})


async def test_pod_spec_is_mostly_immutable(api: client.ApiClient) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod(NS, pod("a"))
    with pytest.raises(ApiException) as err:
        await core.patch_namespaced_pod("a", NS, {"spec": {"restartPolicy": "Never"}})
    assert err.value.status == 422 and "pod updates may not change fields" in status_of(err.value)["message"]


async def test_dry_run_writes_nothing(api: client.ApiClient) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    created = await core.create_namespaced_pod(NS, pod("a"), dry_run="All")
    assert created.metadata.uid
    with pytest.raises(ApiException) as err:
        await core.read_namespaced_pod("a", NS)
    assert err.value.status == 404


async def test_list_pagination_and_selectors(api: client.ApiClient) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    for i in range(7):
        await core.create_namespaced_pod(NS, pod(f"p{i}", app="nb" if i % 2 else "other", idx=str(i)))
    page = await core.list_namespaced_pod(NS, limit=3)
    names = [p.metadata.name for p in page.items]
    while page.metadata._continue:
        page = await core.list_namespaced_pod(NS, limit=3, _continue=page.metadata._continue)
        names += [p.metadata.name for p in page.items]
    assert names == [f"p{i}" for i in range(7)]
    odd = await core.list_namespaced_pod(NS, label_selector="app=nb,idx notin (3)")
    assert [p.metadata.name for p in odd.items] == ["p1", "p5"]
    one = await core.list_namespaced_pod(NS, field_selector="metadata.name=p4")
    assert [p.metadata.name for p in one.items] == ["p4"]
    with pytest.raises(ApiException) as err:
        await core.list_namespaced_pod(NS, field_selector="spec.bogus=1")
    assert err.value.status == 400 and "field label not supported" in status_of(err.value)["message"]


async def test_finalizers_hold_deletion(api: client.ApiClient, cluster: DevCluster) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    await core.create_namespaced_config_map(
        NS, {"metadata": {"name": "c", "finalizers": ["example.com/keep"]}}
    )
    await core.delete_namespaced_config_map("c", NS)
    held = await core.read_namespaced_config_map("c", NS)
    assert held.metadata.deletion_timestamp is not None
    await core.patch_namespaced_config_map("c", NS, {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as err:
        await core.read_namespaced_config_map("c", NS)
    assert err.value.status == 404


async def test_delete_preconditions_say_which_one_failed(api: client.ApiClient) -> None:
    """A delete whose uid or resourceVersion precondition no longer holds is a 409 naming both values.

    As ``rest.BeforeDelete`` (k8s.io/apiserver ``pkg/registry/rest/delete.go``) words it, with the
    kind as the resource; the object stays. The spawner deletes VMs and DataVolumes this way.
    """
    await make_ns(api)
    core = client.CoreV1Api(api)
    made = await core.create_namespaced_config_map(NS, {"metadata": {"name": "c"}})
    uid, version = made.metadata.uid, made.metadata.resource_version
    wrong = {"uid": "00000000-0000-0000-0000-000000000000"}
    with pytest.raises(ApiException) as err:
        await core.delete_namespaced_config_map("c", NS, body={"preconditions": wrong})
    assert err.value.status == 409
    assert status_of(err.value)["message"] == (
        'Operation cannot be fulfilled on ConfigMap "c": the UID in the precondition '
        f"(00000000-0000-0000-0000-000000000000) does not match the UID in record ({uid}). "
        "The object might have been deleted and then recreated"
    )
    await core.patch_namespaced_config_map("c", NS, {"metadata": {"labels": {"changed": "yes"}}})
    with pytest.raises(ApiException) as err:
        await core.delete_namespaced_config_map(
            "c", NS, body={"preconditions": {"uid": uid, "resourceVersion": version}}
        )
    current = await core.read_namespaced_config_map("c", NS)
    assert status_of(err.value)["message"] == (
        f'Operation cannot be fulfilled on ConfigMap "c": the ResourceVersion in the precondition ({version}) '
        f"does not match the ResourceVersion in record ({current.metadata.resource_version}). "
        "The object might have been modified"
    )
    fresh = {"uid": uid, "resourceVersion": current.metadata.resource_version}
    await core.delete_namespaced_config_map("c", NS, body={"preconditions": fresh})
    with pytest.raises(ApiException) as err:
        await core.read_namespaced_config_map("c", NS)
    assert err.value.status == 404


async def _owned_pair(core: client.CoreV1Api) -> None:
    owner = await core.create_namespaced_config_map(NS, {"metadata": {"name": "owner"}})
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner.metadata.uid,
        "blockOwnerDeletion": True,
    }
    await core.create_namespaced_secret(NS, {"metadata": {"name": "dep", "ownerReferences": [ref]}})


@pytest.mark.parametrize("policy", ["Background", "Foreground"])
async def test_owner_reference_garbage_collection(
    api: client.ApiClient, cluster: DevCluster, policy: str
) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    await _owned_pair(core)
    await core.delete_namespaced_config_map("owner", NS, propagation_policy=policy)
    await cluster.controllers.settle()
    for read in (core.read_namespaced_secret, core.read_namespaced_config_map):
        with pytest.raises(ApiException) as err:
            await read("dep" if read == core.read_namespaced_secret else "owner", NS)
        assert err.value.status == 404


async def test_orphan_propagation_keeps_dependents(api: client.ApiClient, cluster: DevCluster) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    await _owned_pair(core)
    await core.delete_namespaced_config_map("owner", NS, propagation_policy="Orphan")
    await cluster.controllers.settle()
    dep = await core.read_namespaced_secret("dep", NS)
    assert not dep.metadata.owner_references


async def test_namespace_deletion_removes_contents(api: client.ApiClient, cluster: DevCluster) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    await core.create_namespaced_config_map(NS, {"metadata": {"name": "c"}})
    raw = await core.delete_namespace(NS, _preload_content=False)
    assert raw.status == 202  # accepted, not finished: the namespace controller empties it first
    assert json.loads(await raw.read())["status"]["phase"] == "Terminating"
    await cluster.controllers.settle()
    with pytest.raises(ApiException) as err:
        await core.read_namespace(NS)
    assert err.value.status == 404


async def test_default_service_account_is_created(api: client.ApiClient, cluster: DevCluster) -> None:
    await make_ns(api)
    await cluster.controllers.settle()
    sa = await client.CoreV1Api(api).read_namespaced_service_account("default", NS)
    assert sa.metadata.namespace == NS


async def test_state_survives_restart(tmp_path) -> None:
    state = tmp_path / "state"
    async with DevCluster(state) as first:
        ns_rt = first.verbs  # create through the verbs layer directly
        from gpuworkspace_devcluster.resources import find

        first.verbs.create(find("", "v1", "namespaces"), "", {"metadata": {"name": "keep"}})
        cm = ns_rt.create(
            find("", "v1", "configmaps"), "keep", {"metadata": {"name": "c"}, "data": {"a": "1"}}
        )[0]
        rv = int(cm["metadata"]["resourceVersion"])
    async with DevCluster(state) as second:
        again = second.verbs.get(find("", "v1", "configmaps"), "keep", "c")
        assert again["data"] == {"a": "1"} and again["metadata"]["uid"] == cm["metadata"]["uid"]
        assert second.store.rv >= rv
        newer = second.verbs.create(find("", "v1", "configmaps"), "keep", {"metadata": {"name": "d"}})[0]
        assert int(newer["metadata"]["resourceVersion"]) > rv
