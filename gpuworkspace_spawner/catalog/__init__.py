"""The versioned WorkspaceProfile catalog: model, loader and validation; no I/O beyond reading files.

Public API::

    catalog = load_catalog("hub_config/catalog")  # raises CatalogError listing every problem
    source = CatalogSource(path, on_reload_error=log)  # reloads on change, keeps the last good one
    entries = build_profile_list(catalog, user, groups)  # KubeSpawner profile_list
    selection = resolve_user_options(catalog, options, user=user, groups=groups)  # or OptionsError
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .errors import (
        CatalogError as CatalogError,
    )
    from .errors import (
        CatalogProblem as CatalogProblem,
    )
    from .errors import (
        OptionsError as OptionsError,
    )
    from .loading import load_catalog as load_catalog
    from .model import Catalog as Catalog
    from .model import WorkspaceProfile as WorkspaceProfile
    from .options import Selection as Selection
    from .options import resolve_user_options as resolve_user_options
    from .rendering import build_profile_list as build_profile_list
    from .rendering import describe_gpu_mode as describe_gpu_mode
    from .source import CatalogSource as CatalogSource
    from .units import format_duration as format_duration
    from .units import parse_duration as parse_duration

# Imported on first use (PEP 562): a process that needs only ``catalog.units`` (the attribution
# service) does not import the loader's jsonschema, whose URI grammar alone costs ~12 MiB and 0.8 s.
_EXPORTS = {
    "Catalog": "model",
    "CatalogError": "errors",
    "CatalogProblem": "errors",
    "CatalogSource": "source",
    "OptionsError": "errors",
    "Selection": "options",
    "WorkspaceProfile": "model",
    "build_profile_list": "rendering",
    "describe_gpu_mode": "rendering",
    "format_duration": "units",
    "load_catalog": "loading",
    "parse_duration": "units",
    "resolve_user_options": "options",
}
__all__ = [
    "Catalog",
    "CatalogError",
    "CatalogProblem",
    "CatalogSource",
    "OptionsError",
    "Selection",
    "WorkspaceProfile",
    "build_profile_list",
    "describe_gpu_mode",
    "format_duration",
    "load_catalog",
    "parse_duration",
    "resolve_user_options",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
