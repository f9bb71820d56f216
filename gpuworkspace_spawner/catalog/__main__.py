"""Check a catalog: ``python -m gpuworkspace_spawner.catalog PATH`` prints ``ok: ...`` or every problem.

Exit status 0 when valid, 1 when not, 2 for a usage error. ``--schema KIND`` prints the JSON Schema
of a document kind (WorkspaceProfile or WorkspaceCatalog), for editors that validate YAML.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from .errors import CatalogError
from .loading import load_catalog
from .schema import SCHEMAS


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpuworkspace_spawner.catalog",
        description="Validate a workspace catalog (a YAML file or a directory of *.yaml files).",
    )
    parser.add_argument("path", nargs="?", help="the catalog file or directory")
    parser.add_argument("--schema", choices=sorted(SCHEMAS), help="print the JSON Schema of a document kind")
    args = parser.parse_args(argv)
    if args.schema:
        print(json.dumps(SCHEMAS[args.schema], indent=2))
        return 0
    if not args.path:
        parser.error("a catalog path is required")
    try:
        catalog = load_catalog(args.path)
    except CatalogError as exc:
        print(exc, file=sys.stderr)
        return 1
    count = len(catalog.profiles)
    print(f"ok: {count} profile{'s' if count != 1 else ''}, version {catalog.version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
