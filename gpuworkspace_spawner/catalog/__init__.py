"""The versioned WorkspaceProfile catalog: model, loader and validation; no I/O beyond reading files.

Public API::

    catalog = load_catalog("hub_config/catalog")  # raises CatalogError listing every problem
    source = CatalogSource(path, on_reload_error=log)  # reloads on change, keeps the last good one
    entries = build_profile_list(catalog, user, groups)  # KubeSpawner profile_list
    selection = resolve_user_options(catalog, options, user=user, groups=groups)  # or OptionsError
"""

from .errors import CatalogError, CatalogProblem, OptionsError
from .loading import load_catalog
from .model import Catalog, WorkspaceProfile
from .options import Selection, resolve_user_options
from .rendering import build_profile_list, describe_gpu_mode
from .source import CatalogSource
from .units import format_duration, parse_duration

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
