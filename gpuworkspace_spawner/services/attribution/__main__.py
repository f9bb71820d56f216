"""``python -m gpuworkspace_spawner.services.attribution`` (and ``gpuworkspace-attribution``): the service,
with kubernetes_asyncio imported lazily (:mod:`..lean_imports`: ~55 MiB less RSS)."""

from __future__ import annotations

from collections.abc import Sequence

from .. import lean_imports


def main(argv: Sequence[str] | None = None) -> int:
    lean_imports.install()  # before anything imports kubernetes_asyncio
    from .app import main as app_main  # noqa: PLC0415 - after install()

    return app_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
