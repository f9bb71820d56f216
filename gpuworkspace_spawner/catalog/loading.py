"""Load a catalog: read the files, parse YAML, validate every document, check, build the model.

Every problem in every file is collected before anything is raised, so an operator fixes a catalog
in one round. ``load_catalog`` is the only entry most callers need; ``parse_catalog`` exists for
``CatalogSource``, which reads the files itself to skip content it has already judged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .building import build_node_pools, build_profile
from .checks import CatalogSettings, profile_findings
from .errors import CatalogError, CatalogProblem
from .files import CatalogFiles, read_files
from .jobprofiles import (
    JOB_PROFILE_KIND,
    JobProfile,
    build_job_profile,
    job_profile_findings,
    writable_team_directories,
)
from .model import CATALOG_KIND, PROFILE_KIND, Catalog, NodePool, WorkspaceProfile
from .network import NetworkSettings, build_network, network_findings
from .parsing import Document, parse_documents
from .validation import schema_problems

KINDS = (PROFILE_KIND, CATALOG_KIND, JOB_PROFILE_KIND)


@dataclass
class _CatalogDoc:
    version: str | None = None
    settings: CatalogSettings = field(default_factory=CatalogSettings)
    pools: dict[str, NodePool] = field(default_factory=dict)
    network: NetworkSettings = field(default_factory=NetworkSettings)
    valid: bool = True  # False: the WorkspaceCatalog document has problems, so build no profile


def load_catalog(path: str | os.PathLike[str]) -> Catalog:
    """Read and validate the catalog at ``path`` (a YAML file or a directory of them).

    Raises CatalogError listing every problem found, each naming the file, profile and field.
    """
    return parse_catalog(read_files(path), os.fspath(path))


def _name(body: Mapping[str, Any]) -> str | None:
    metadata = body.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) else None


def _kind_problem(doc: Document) -> CatalogProblem | None:
    kind = doc.body.get("kind")
    if kind in KINDS:
        return None
    expected = f"expected {PROFILE_KIND}, {JOB_PROFILE_KIND} or {CATALOG_KIND}"
    message = (
        "required field is missing; " + expected
        if kind is None
        else f"{kind!r} is not a known kind; {expected}"
    )
    return CatalogProblem(doc.file, _name(doc.body), "kind", message)


def _catalog_doc(docs: list[Document], problems: list[CatalogProblem]) -> _CatalogDoc:
    if not docs:
        return _CatalogDoc()
    first, *others = docs
    for other in others:
        message = f"only one {CATALOG_KIND} document is allowed; the first is in {first.file}"
        problems.append(CatalogProblem(other.file, None, "kind", message))
    found = schema_problems(CATALOG_KIND, first.body, first.file, None)
    problems.extend(found)
    spec = first.body.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    pools = spec.get("nodePools")
    pool_names = frozenset(pools) if isinstance(pools, dict) else frozenset()
    tags = spec.get("allowImageTags")
    settings = CatalogSettings(
        allow_image_tags=tags is True, node_pools=pool_names, network_profiles=_network_profile_names(spec)
    )
    if not found:
        found = [
            CatalogProblem(first.file, None, where, message) for where, message in network_findings(spec)
        ]
        problems.extend(found)
    if found:
        return _CatalogDoc(settings=settings, valid=False)
    pools = build_node_pools(spec)
    return _CatalogDoc(version=spec["version"], settings=settings, pools=pools, network=build_network(spec))


def _network_profile_names(spec: Mapping[str, Any]) -> frozenset[str]:
    network = spec.get("network")
    profiles = network.get("profiles") if isinstance(network, dict) else None
    return frozenset(profiles) if isinstance(profiles, dict) else frozenset()


def _profile(doc: Document, catalog: _CatalogDoc, problems: list[CatalogProblem]) -> WorkspaceProfile | None:
    name = _name(doc.body)
    found = schema_problems(PROFILE_KIND, doc.body, doc.file, name)
    spec = doc.body.get("spec")
    if isinstance(spec, dict):
        findings = profile_findings(spec, catalog.settings, frozenset(p.field for p in found))
        found += [CatalogProblem(doc.file, name, where, message) for where, message in findings]
    problems.extend(found)
    if found or not catalog.valid:
        return None
    return build_profile(doc.body, catalog.pools, doc.file)


def _job_profile(
    doc: Document, catalog: _CatalogDoc, profiles: list[WorkspaceProfile], problems: list[CatalogProblem]
) -> JobProfile | None:
    name = _name(doc.body)
    found = schema_problems(JOB_PROFILE_KIND, doc.body, doc.file, name)
    teams = writable_team_directories(tuple(profiles))
    spec = doc.body.get("spec")
    if not found and isinstance(spec, dict):
        findings = job_profile_findings(spec, catalog.settings, teams)
        found += [CatalogProblem(doc.file, name, where, message) for where, message in findings]
    problems.extend(found)
    if found or not catalog.valid:
        return None
    return build_job_profile(doc.body, teams, doc.file)


def _where(doc: Document) -> str:
    return f"{doc.file} (document {doc.index + 1})"


def _duplicates(docs: list[Document]) -> list[CatalogProblem]:
    problems = []
    first_by_name: dict[str, Document] = {}
    first_default: Document | None = None
    for doc in docs:
        name = _name(doc.body)
        if name is None:
            continue
        if name in first_by_name:
            message = f"duplicate profile name {name!r}; also defined in {_where(first_by_name[name])}"
            problems.append(CatalogProblem(doc.file, name, "metadata.name", message))
        else:
            first_by_name[name] = doc
        spec = doc.body.get("spec")
        if isinstance(spec, dict) and spec.get("default") is True:
            if first_default is not None:
                message = f"only one profile may be the default; {_name(first_default.body)!r} in {_where(first_default)} is too"
                problems.append(CatalogProblem(doc.file, name, "spec.default", message))
            else:
                first_default = doc
    return problems


def parse_catalog(files: CatalogFiles, root: str) -> Catalog:
    """Validate already-read catalog files (``root`` names the catalog in messages)."""
    problems: list[CatalogProblem] = []
    documents = [doc for file in files.files for doc in parse_documents(file, problems)]
    typed = []
    for doc in documents:
        kind_problem = _kind_problem(doc)
        if kind_problem is not None:
            problems.append(kind_problem)
        else:
            typed.append(doc)
    catalog = _catalog_doc([d for d in typed if d.body["kind"] == CATALOG_KIND], problems)
    profile_docs = [d for d in typed if d.body["kind"] == PROFILE_KIND]
    profiles = [p for doc in profile_docs if (p := _profile(doc, catalog, problems)) is not None]
    problems.extend(_duplicates(profile_docs))
    job_docs = [d for d in typed if d.body["kind"] == JOB_PROFILE_KIND]
    jobs = [j for doc in job_docs if (j := _job_profile(doc, catalog, profiles, problems)) is not None]
    problems.extend(_duplicates(job_docs))
    if not profile_docs:
        problems.append(CatalogProblem(root, None, "", f"the catalog has no {PROFILE_KIND} documents"))
    if problems:
        order = {file.name: index for index, file in enumerate(files.files)}
        raise CatalogError(sorted(problems, key=lambda p: order.get(p.file, -1)))
    return Catalog(
        version=catalog.version or f"sha-{files.digest[:12]}",
        profiles=tuple(profiles),
        sources=tuple(file.name for file in files.files),
        allow_image_tags=catalog.settings.allow_image_tags,
        network=catalog.network,
        job_profiles=tuple(jobs),
    )
