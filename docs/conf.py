"""Sphinx configuration for the gpuworkspace-spawner docs (Sphinx + MyST)."""

from __future__ import annotations

import importlib.util

import gpuworkspace_spawner

project = "gpuworkspace-spawner"
author = "gpuworkspace-spawner contributors"
copyright = "2026, gpuworkspace-spawner contributors"
release = gpuworkspace_spawner.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "autodoc_traits",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "deflist", "fieldlist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"

# furo comes with the docs extra; fall back to Sphinx's built-in theme where it is missing.
html_theme = "furo" if importlib.util.find_spec("furo") else "alabaster"
html_title = "gpuworkspace-spawner"
