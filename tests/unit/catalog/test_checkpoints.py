"""``spec.storage.checkpoints`` and the /workspace, /checkpoints conventions: loaded into the model, and
every mistake reported with its file, profile and field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuworkspace_spawner.catalog import CatalogError, load_catalog
from gpuworkspace_spawner.catalog.model import Checkpoints

from .conftest import catalog_doc, profile_doc, write_yaml

TEAM = {"name": "ml", "claimName": "team-ml-cephfs", "mountPath": "/teams/ml", "readOnly": False}
VM = {
    "dataSource": {"name": "ubuntu", "namespace": "vm-images"},
    "cpu": {"cores": 2},
    "memory": {"guest": "4Gi"},
}


def _storage(**extra: Any) -> dict[str, Any]:
    return {"home": {"size": "10Gi"}, "teamDirectories": [TEAM], **extra}


@pytest.mark.parametrize(
    ("checkpoints", "expected"),
    [
        pytest.param(
            {"teamDirectory": "ml", "subPath": "checkpoints"},
            Checkpoints(team_directory="ml", sub_path="checkpoints"),
            id="team-directory",
        ),
        pytest.param(
            {"objectStore": {"url": "s3://ckpt/team-ml/", "endpoint": "https://rgw.example.org"}},
            Checkpoints(
                object_store_url="s3://ckpt/team-ml/", object_store_endpoint="https://rgw.example.org"
            ),
            id="object-store",
        ),
    ],
)
def test_a_valid_target_reaches_the_model(tmp_path: Path, checkpoints: Any, expected: Checkpoints) -> None:
    doc = profile_doc("p", storage=_storage(checkpoints=checkpoints))
    profile = load_catalog(write_yaml(tmp_path / "c.yaml", catalog_doc(), doc)).profiles[0]
    assert profile.storage.checkpoints == expected


def test_without_a_target_there_is_none(tmp_path: Path) -> None:
    profile = load_catalog(write_yaml(tmp_path / "c.yaml", catalog_doc(), profile_doc("p"))).profiles[0]
    assert profile.storage.checkpoints is None


@pytest.mark.parametrize(
    ("storage", "field", "words"),
    [
        pytest.param(_storage(checkpoints={}), "spec.storage.checkpoints", "exactly one target", id="none"),
        pytest.param(
            _storage(checkpoints={"teamDirectory": "ml", "objectStore": {"url": "s3://b/"}}),
            "spec.storage.checkpoints",
            "exactly one target",
            id="both",
        ),
        pytest.param(
            _storage(checkpoints={"teamDirectory": "vision"}),
            "spec.storage.checkpoints.teamDirectory",
            "'vision' is not in spec.storage.teamDirectories (its names: 'ml')",
            id="unknown-team",
        ),
        pytest.param(
            {"teamDirectories": [{**TEAM, "readOnly": True}], "checkpoints": {"teamDirectory": "ml"}},
            "spec.storage.checkpoints.teamDirectory",
            "is read-only; set its readOnly: false",
            id="read-only-team",
        ),
        pytest.param(
            _storage(checkpoints={"teamDirectory": "ml", "subPath": "../other-team"}),
            "spec.storage.checkpoints.subPath",
            "'..'",
            id="subpath-escape",
        ),
        pytest.param(
            _storage(checkpoints={"objectStore": {"url": "s3://b/"}, "subPath": "x"}),
            "spec.storage.checkpoints.subPath",
            "put it in objectStore.url",
            id="subpath-with-store",
        ),
        pytest.param(
            _storage(checkpoints={"objectStore": {"url": "https://bucket/x"}}),
            "spec.storage.checkpoints.objectStore.url",
            "is not an object-store prefix",
            id="store-not-a-bucket-url",
        ),
        pytest.param(
            _storage(checkpoints={"objectStore": {"url": "s3://b/", "endpoint": "rgw:7480"}}),
            "spec.storage.checkpoints.objectStore.endpoint",
            "is not an http(s) endpoint URL",
            id="endpoint-not-a-url",
        ),
        pytest.param(
            _storage(checkpoints={"objectStore": {"endpoint": "https://rgw"}}),
            "spec.storage.checkpoints.objectStore.url",
            "required field is missing",
            id="store-without-url",
        ),
        pytest.param(
            {"teamDirectories": [{**TEAM, "mountPath": "/checkpoints"}]},
            "spec.storage.teamDirectories[0].mountPath",
            "which every workspace gets by convention",
            id="team-at-checkpoints",
        ),
        pytest.param(
            {"scratch": {"mountPath": "/workspace/tmp"}},
            "spec.storage.scratch.mountPath",
            "is /workspace",
            id="scratch-inside-workspace",
        ),
    ],
)
def test_mistakes_name_the_field(tmp_path: Path, storage: Any, field: str, words: str) -> None:
    file = write_yaml(
        tmp_path / "c.yaml", catalog_doc(), profile_doc("fine"), profile_doc("bad", storage=storage)
    )
    with pytest.raises(CatalogError) as caught:
        load_catalog(file)
    found = caught.value.problems
    assert any(p.field == field and words in p.message and p.profile == "bad" for p in found), found
    assert all(p.file == str(file) for p in found)


def test_a_vm_takes_an_object_store_but_no_team_directory(tmp_path: Path) -> None:
    def vm(checkpoints: Any) -> dict[str, Any]:
        doc = profile_doc("vm", runtime="vm", vm=VM, storage={"checkpoints": checkpoints})
        del doc["spec"]["image"]
        doc["spec"].get("storage", {}).pop("home", None)
        return doc

    ok = load_catalog(
        write_yaml(tmp_path / "ok.yaml", catalog_doc(), vm({"objectStore": {"url": "s3://b/vm/"}}))
    )
    assert ok.profiles[0].storage.checkpoints == Checkpoints(object_store_url="s3://b/vm/")
    with pytest.raises(CatalogError) as caught:
        load_catalog(write_yaml(tmp_path / "bad.yaml", catalog_doc(), vm({"teamDirectory": "ml"})))
    assert any(
        p.field == "spec.storage.checkpoints.teamDirectory" and "objectStore instead" in p.message
        for p in caught.value.problems
    ), caught.value.problems
