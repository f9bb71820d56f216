"""A catalog that follows its files: reload on change, keep the last good catalog when a change is bad.

``current()`` is meant to be called on every spawn and every options form, so the unchanged case is
only a few ``stat`` calls. When the files change (names, inodes, sizes or mtimes; a ConfigMap update
swaps inodes) the content is read; content already judged (the catalog in use, or the last broken
one) is not parsed again, so a broken catalog is reported once, not on every call.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .errors import CatalogError
from .files import Fingerprint, fingerprint, read_files
from .loading import parse_catalog
from .model import Catalog


class CatalogSource:
    """The catalog at ``path``, reloaded when its files change.

    The constructor loads the catalog and raises CatalogError when it is invalid (the hub should
    refuse to start). Later, an invalid change keeps the last good catalog: ``on_reload_error`` is
    called once per broken content, ``reload_failures`` counts those, and ``last_error`` holds the
    latest error until a good catalog is loaded. ``on_reload`` is called with each new good catalog.
    Not thread-safe; JupyterHub calls it from its one event loop.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        on_reload_error: Callable[[CatalogError], None] | None = None,
        on_reload: Callable[[Catalog], None] | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.on_reload_error = on_reload_error
        self.on_reload = on_reload
        self.reload_failures = 0
        self.last_error: CatalogError | None = None
        self._fingerprint: Fingerprint = ()
        self._digest = ""
        self._failed_digest: str | None = None
        self._catalog = self.reload()

    def current(self) -> Catalog:
        """The catalog to use now: reloaded if the files changed and the new content is valid."""
        seen: Fingerprint = fingerprint(self.path)
        if seen == self._fingerprint:
            return self._catalog
        self._fingerprint = seen
        try:
            files = read_files(self.path)
        except CatalogError as exc:
            self._failed(exc, digest=None)
            return self._catalog
        if files.digest == self._digest:
            # touched, re-mounted, or a bad change reverted: the content in use, so nothing is wrong now
            self._failed_digest, self.last_error = None, None
            return self._catalog
        if files.digest == self._failed_digest:
            return self._catalog  # the broken content we already reported
        try:
            catalog = parse_catalog(files, self.path)
        except CatalogError as exc:
            self._failed(exc, digest=files.digest)
            return self._catalog
        self._catalog, self._digest = catalog, files.digest
        self._failed_digest, self.last_error = None, None
        if self.on_reload is not None:
            self.on_reload(catalog)
        return catalog

    def reload(self) -> Catalog:
        """Load the files now, whatever their fingerprint; raises CatalogError and changes nothing if invalid."""
        seen = fingerprint(self.path)
        files = read_files(self.path)
        catalog = parse_catalog(files, self.path)
        self._fingerprint, self._catalog, self._digest = seen, catalog, files.digest
        self._failed_digest, self.last_error = None, None
        return catalog

    def _failed(self, error: CatalogError, *, digest: str | None) -> None:
        self._failed_digest = digest
        self.reload_failures += 1
        self.last_error = error
        if self.on_reload_error is not None:
            self.on_reload_error(error)
