#!/usr/bin/env bash
# Build the workspace's JupyterLab extension (jupyterlab-extension/, TypeScript) into the Python package
# as a prebuilt extension: gpuworkspace_spawner/labextension/jupyter-data/labextensions/@gpuworkspace/
# jupyterlab-status. Run by scripts/bootstrap.sh (step 5); needs Node >= 20 and JupyterLab in $VENV.
#
#   1. `npm ci` in jupyterlab-extension/ when its package.json / package-lock.json changed
#      (stamp: jupyterlab-extension/node_modules/.bootstrap-stamp);
#   2. tsc, then @jupyterlab/builder's build-labextension against $VENV's JupyterLab (its staging/
#      package.json holds the versions of the packages JupyterLab shares with extensions), when the
#      sources, the lock or that JupyterLab changed (stamp: jupyterlab-extension/lib/.bootstrap-stamp).
#
# Prints one line per thing it did (bootstrap.sh's summary); nothing when everything is up to date.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV="${VENV:-$(pwd)/.venv}"
ext="jupyterlab-extension"
out="gpuworkspace_spawner/labextension/jupyter-data/labextensions/@gpuworkspace/jupyterlab-status"

want_npm="$(cat "$ext/package.json" "$ext/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$ext/node_modules/.bootstrap-stamp" 2>/dev/null || true)" != "$want_npm" ]; then
    echo "bootstrap: npm ci ($ext)" >&2
    (cd "$ext" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    printf '%s\n' "$want_npm" >"$ext/node_modules/.bootstrap-stamp"
    echo "npm installed $ext's build tools"
fi

staging="$(compgen -G "$VENV/lib/python3*/site-packages/jupyterlab/staging" | head -n 1 || true)"
if [ -z "$staging" ]; then
    echo "bootstrap: warning: no JupyterLab in $VENV; the JupyterLab extension is not built" >&2
    exit 0
fi
want="$(cat "$ext/package-lock.json" "$ext/tsconfig.json" "$ext"/src/*.ts "$staging/package.json" |
    sha256sum | cut -d' ' -f1)"
if [ "$(cat "$ext/lib/.bootstrap-stamp" 2>/dev/null || true)" != "$want" ] || ! [ -f "$out/package.json" ]; then
    echo "bootstrap: building the JupyterLab extension ($ext)" >&2
    rm -rf "$out" "$ext/lib" "$ext/tsconfig.tsbuildinfo"
    (cd "$ext" && node_modules/.bin/tsc && node_modules/.bin/build-labextension --core-path "$staging" . >/dev/null)
    printf '%s\n' "$want" >"$ext/lib/.bootstrap-stamp"
    echo "built the JupyterLab extension into $out"
fi
