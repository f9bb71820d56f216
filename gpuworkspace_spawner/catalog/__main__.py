"""Check a catalog: ``python -m gpuworkspace_spawner.catalog PATH`` prints ``ok: ...`` or every problem.

Exit status 0 when valid, 1 when not, 2 for a usage error. ``--schema KIND`` prints the JSON Schema
of a document kind (WorkspaceProfile or WorkspaceCatalog), for editors that validate YAML.
``--network-policies`` prints the workspace namespace's NetworkPolicies built from the catalog's
network profiles (the file shipped as helm-values/extra-manifests/50-networkpolicies.yaml).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from gpuworkspace_spawner.manifests.networkpolicy import PolicyScope, render_network_policies

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
    parser.add_argument(
        "--network-policies",
        action="store_true",
        help="print the NetworkPolicies of the catalog's network profiles",
    )
    parser.add_argument("--namespace", default="gpu-workspaces", help="the workspace namespace")
    parser.add_argument("--hub-namespace", default="jhub", help="the namespace of the hub and proxy")
    parser.add_argument("--release", default="jhub", help="the z2jh Helm release name")
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
    if args.network_policies:
        scope = PolicyScope(namespace=args.namespace, hub_namespace=args.hub_namespace, release=args.release)
        print(render_network_policies(catalog.network, scope), end="")
        return 0
    count = len(catalog.profiles)
    print(f"ok: {count} profile{'s' if count != 1 else ''}, version {catalog.version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
