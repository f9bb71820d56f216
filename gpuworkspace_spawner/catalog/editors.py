"""Which editors a profile's image declares, which the profile offers, and the refusal when they differ.

Pure. The image contract (``docs/reference/image-contract.md``) says what an image must contain for each
editor; the catalog only knows what the image *declares*:

- a container profile declares in its image section: ``image: {reference: repo@sha256:..., editors:
  [jupyterlab, code-server]}``; the short form ``image: repo@sha256:...`` declares JupyterLab only
  (every workspace image runs ``jupyterhub-singleuser``, which serves JupyterLab);
- a VM profile declares next to its golden image: ``vm.dataSource.editors`` (default: JupyterLab only).

A profile offers the editors of its ``ide`` field; without one (or without ``ide.choices``) it offers
exactly what its image declares. An offered editor the image does not declare is refused at load
(``check_editors``), so the spawn form never offers a choice that cannot start.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, cast

from .model import IDES, Ide

Finding = tuple[str, str]
DEFAULT_EDITORS: tuple[Ide, ...] = ("jupyterlab",)
CONTRACT = "docs/reference/image-contract.md"
_NEEDS: dict[str, str] = {
    "jupyterlab": "jupyterhub-singleuser and JupyterLab",
    "code-server": "code-server and jupyter-server-proxy (jupyter-vscode-proxy)",
}


def image_reference(image: object) -> object:
    """The reference of a container profile's image section: the short form's string, or ``reference``."""
    return image.get("reference") if isinstance(image, Mapping) else image


def _ordered(names: object) -> tuple[Ide, ...]:
    listed = names if isinstance(names, list) else []
    return tuple(name for name in IDES if name in listed)


def editors_field(spec: Mapping[str, Any]) -> str:
    """Where the profile's image declares its editors (for messages), whether or not it is written."""
    return "spec.vm.dataSource.editors" if spec.get("runtime") == "vm" else "spec.image.editors"


def declared_editors(spec: Mapping[str, Any]) -> tuple[Ide, ...]:
    """The editors the profile's image declares, in ``IDES`` order (``DEFAULT_EDITORS`` when not written)."""
    vm = spec.get("runtime") == "vm"
    section = (spec.get("vm") or {}).get("dataSource") if vm else spec.get("image")
    if isinstance(section, Mapping) and "editors" in section:
        return _ordered(section["editors"])
    return DEFAULT_EDITORS


def offered_editors(spec: Mapping[str, Any]) -> tuple[tuple[Ide, ...], str]:
    """The editors the profile offers and the field that offers them (``spec.ide`` or ``spec.ide.choices``).

    Without ``ide`` (or ``ide.choices``) the profile offers what its image declares.
    """
    ide = spec.get("ide")
    if isinstance(ide, str):
        return (cast(Ide, ide),), "spec.ide"
    if isinstance(ide, Mapping) and "choices" in ide:
        return tuple(cast(list[Ide], ide["choices"])), "spec.ide.choices"
    return declared_editors(spec), editors_field(spec)


def check_editors(spec: Mapping[str, Any], settings: object = None) -> Iterator[Finding]:
    """Every offered editor must be declared by the image (the catalog's ``CHECKS`` signature)."""
    declared = declared_editors(spec)
    offered, field = offered_editors(spec)
    where = editors_field(spec)
    for index, editor in enumerate(offered):
        if editor in declared:
            continue
        at = f"{field}[{index}]" if field == "spec.ide.choices" else field
        yield (
            at,
            f"offers {editor!r}, but the image does not declare it ({where}: [{', '.join(declared)}]); an image "
            f"that contains {_NEEDS.get(editor, editor)} may declare it (see {CONTRACT}), else remove "
            f"{editor!r} here",
        )
