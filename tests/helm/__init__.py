"""Helm values and extra manifests (helm-values/): what the tests of this package share.

Nothing here needs a cluster or the helm binary: values are merged the way Helm merges them and
validated against the chart's schema; manifests are validated against the Kubernetes schemas.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from gpuworkspace_devcluster.openapi import find_shared_schemas

REPO = Path(__file__).resolve().parents[2]
HELM = REPO / "helm-values"
MANIFESTS = HELM / "extra-manifests"
BASE = HELM / "values.yaml"
OVERLAYS = sorted(HELM.glob("values-*.yaml"))
SHARED = find_shared_schemas()
SKIP_NO_SHARED = "../shared/schemas is absent: the z2jh chart schema and defaults are unavailable"

RELEASE_NAMESPACE = "jhub"
WORKSPACE_NAMESPACE = "gpu-workspaces"
CATALOG_LABEL = "gpuworkspace.dev/catalog"


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def manifest_files() -> list[Path]:
    return sorted(MANIFESTS.rglob("*.yaml"))


def manifests() -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every object of every file under extra-manifests/, with its file."""
    for path in manifest_files():
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                yield path, doc


def deployments() -> dict[str, dict[str, Any]]:
    """The container of each Deployment of extra-manifests/ (a service's own pod), by Deployment name."""
    return {
        doc["metadata"]["name"]: doc["spec"]["template"]["spec"]["containers"][0]
        for _, doc in manifests()
        if doc["kind"] == "Deployment"
    }


def merge_user_values(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """Two ``-f`` files as Helm combines them: maps merged, anything else (lists too) replaced; a null
    is kept, so that it deletes the key when coalesced with the chart's defaults."""
    out = copy.deepcopy(dict(base))
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_user_values(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _without_nulls(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return copy.deepcopy(value)


def coalesce(defaults: Mapping[str, Any], user: Mapping[str, Any]) -> dict[str, Any]:
    """User values over the chart's defaults, as Helm coalesces them: maps merged recursively, lists
    and scalars replaced, a user null deletes the key."""
    out = copy.deepcopy(dict(defaults))
    for key, value in user.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = coalesce(out[key], value)
        else:
            out[key] = _without_nulls(value)
    return out


def user_values(*paths: Path) -> dict[str, Any]:
    """The user values of ``helm -f a -f b ...`` (before the chart's defaults)."""
    merged: dict[str, Any] = {}
    for path in paths:
        merged = merge_user_values(merged, load_yaml(path) or {})
    return merged


def combinations() -> list[tuple[str, tuple[Path, ...]]]:
    """values.yaml alone, with each overlay, and with all overlays: (test id, files)."""
    combos = [("values", (BASE,))]
    combos += [(f"values+{p.stem}", (BASE, p)) for p in OVERLAYS]
    if len(OVERLAYS) > 1:
        combos.append(("values+" + "+".join(p.stem for p in OVERLAYS), (BASE, *OVERLAYS)))
    return combos
