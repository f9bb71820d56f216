"""Import kubernetes_asyncio without executing its generated package ``__init__`` files.

``kubernetes_asyncio``'s ``__init__`` files import every API class and every model, ~900 modules and
~55 MiB of RSS, before a caller touches any of them. A service that lists and watches a few kinds as
plain dicts (``_preload_content=False``, ``Watch(return_type="object")``) uses a handful.
:func:`install` registers ``kubernetes_asyncio``, ``.client``, ``.client.api`` and ``.client.models``
as lazy packages: each name their ``__init__`` would export (``client.CoreV1Api``,
``client.Configuration``, ``models.V1Pod``, ...) is imported on first use, from the name → module map
read (parsed, not executed) from that ``__init__``'s source. Submodules import as usual.

It must run before anything imports kubernetes_asyncio (the attribution service's ``__main__`` calls
it first); once the real package is imported it does nothing. The behaviour of every name is the
real one; only when its module is imported changes.
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

LAZY_PACKAGES = (
    "kubernetes_asyncio",
    "kubernetes_asyncio.client",
    "kubernetes_asyncio.client.api",
    "kubernetes_asyncio.client.models",
)


def exports(source: str) -> tuple[dict[str, tuple[str, str | None]], dict[str, Any]]:
    """An ``__init__``'s top-level imports as ``name -> (module, attribute or None for the module)``,
    and its constant assignments (``__version__``, ``__all__``)."""
    names: dict[str, tuple[str, str | None]] = {}
    constants: dict[str, Any] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "__future__":
                continue
            for alias in node.names:
                names[alias.asname or alias.name] = (node.module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = (alias.name, None)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                try:
                    constants[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    continue
    return names, constants


class LazyPackage(types.ModuleType):
    """A package whose exported names are imported when first read."""

    _lazy_names: dict[str, tuple[str, str | None]]

    def __getattr__(self, name: str) -> Any:
        target = self.__dict__.get("_lazy_names", {}).get(name)
        if target is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        module_name, attribute = target
        module = importlib.import_module(module_name)
        value = module if attribute is None else getattr(module, attribute)
        setattr(self, name, value)
        return value

    def __dir__(self) -> list[str]:
        return sorted({*self.__dict__, *self.__dict__.get("_lazy_names", {})})


def _lazy_package(name: str) -> LazyPackage:
    parent, _, _ = name.rpartition(".")
    path = sys.modules[parent].__path__ if parent else None
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is None or spec.origin is None or spec.submodule_search_locations is None:
        raise ImportError(f"lean_imports: {name} is not an installed package")
    with open(spec.origin, encoding="utf-8") as f:
        names, constants = exports(f.read())
    module = LazyPackage(name)
    module.__dict__.update(constants)
    module.__file__, module.__spec__, module.__loader__ = spec.origin, spec, spec.loader
    module.__path__ = list(spec.submodule_search_locations)
    module.__package__ = name
    module._lazy_names = names
    return module


def install() -> bool:
    """Register the lazy packages; False (nothing done) when kubernetes_asyncio is already imported."""
    if any(name in sys.modules for name in LAZY_PACKAGES):
        return False
    for name in LAZY_PACKAGES:
        module = _lazy_package(name)
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)
    return True
