"""The catalog package's public surface, locked (STYLE.md §9)."""

from __future__ import annotations

from gpuworkspace_spawner import catalog


def test_public_names() -> None:
    assert sorted(catalog.__all__) == [
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
    for name in catalog.__all__:
        assert getattr(catalog, name) is not None
