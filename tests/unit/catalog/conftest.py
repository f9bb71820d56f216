"""Builders for catalog documents: a valid base profile, changed one dotted path at a time."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

DIGEST = "0" * 63 + "1"
IMAGE = f"quay.io/jupyter/base-notebook@sha256:{DIGEST}"
DELETE = object()


def catalog_doc(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"version": "2026.1.0", "nodePools": {"cpu": {}, "gpu": {}}}
    body.update(spec)
    return {
        "apiVersion": "gpuworkspace.dev/v1alpha1",
        "kind": "WorkspaceCatalog",
        "metadata": {"name": "test"},
        "spec": body,
    }


def profile_doc(name: str = "cpu", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "displayName": name.upper(),
        "image": IMAGE,
        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}},
        "placement": {"nodePool": "cpu", "gpuMode": "none"},
    }
    body.update(spec)
    return {
        "apiVersion": "gpuworkspace.dev/v1alpha1",
        "kind": "WorkspaceProfile",
        "metadata": {"name": name},
        "spec": body,
    }


def gpu_doc(
    name: str = "gpu", resource: str = "nvidia.com/gpu", mode: str = "exclusive", **spec: Any
) -> dict[str, Any]:
    resources = {
        "requests": {"cpu": "4", "memory": "16Gi", resource: "1"},
        "limits": {"cpu": "8", "memory": "32Gi", resource: "1"},
    }
    return profile_doc(name, resources=resources, placement={"nodePool": "gpu", "gpuMode": mode}, **spec)


def with_path(doc: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """A copy of ``doc`` with ``dotted`` (``spec.placement.gpuMode``) set to value, or removed for DELETE.

    A segment in brackets (``spec.resources.limits.[nvidia.com/gpu]``) is one key containing dots.
    """
    result = copy.deepcopy(doc)
    keys = [k.strip("[]") for k in _split(dotted)]
    target = result
    for key in keys[:-1]:
        target = target.setdefault(key, {})
    if value is DELETE:
        target.pop(keys[-1], None)
    else:
        target[keys[-1]] = value
    return result


def _split(dotted: str) -> list[str]:
    parts: list[str] = []
    current = ""
    depth = 0
    for char in dotted:
        if char == "." and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += {"[": 1, "]": -1}.get(char, 0)
        current += char
    parts.append(current)
    return parts


def write_yaml(path: Path, *docs: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


@pytest.fixture
def catalog_dir(tmp_path: Path) -> Path:
    """A valid directory catalog: catalog.yaml (node pools cpu, gpu) and profiles.yaml (cpu, gpu)."""
    root = tmp_path / "catalog"
    write_yaml(root / "catalog.yaml", catalog_doc())
    write_yaml(root / "profiles.yaml", profile_doc("cpu", default=True), gpu_doc("gpu"))
    return root
