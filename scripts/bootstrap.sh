#!/usr/bin/env bash
# Set up everything `make test` and `make demo` need, on a fresh Debian machine or an old one.
#
#   1. Debian packages (chromium for the browser tests, python3-venv, nodejs/npm) when missing;
#      `apt-get update` only when something has to be installed. Needs root (or password-less
#      sudo); otherwise prints what to install and carries on.
#   2. .venv with Python >= 3.11, created when missing.
#   3. `pip install -e .[test,docs,lint,scheduler] -e ./devcluster` (the spawner and the devcluster, its
#      own distribution) when either's setup.cfg / pyproject.toml changed since the last successful
#      install or either is missing from .venv (stamp: .venv/.bootstrap-stamp); then rfc3987-syntax
#      is removed again (below: it costs every Python process 1.2 s of CPU at start).
#   4. configurable-http-proxy into ./node_modules with `npm ci` from the committed
#      package-lock.json, when it changed (stamp: node_modules/.bootstrap-stamp).
#   5. the workspace's JupyterLab extension: npm ci in jupyterlab-extension/ and a build with
#      @jupyterlab/builder into the Python package, when its sources or JupyterLab changed.
#
# Idempotent: a second run with nothing changed does no installs and takes well under a second.
# Environment: PYTHON=/path/to/python3.x picks the interpreter for a new venv;
# GPUWS_SKIP_APT=1 skips step 1.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$(pwd)"
VENV="$ROOT/.venv"
EXTRAS="test,docs,lint,scheduler"
APT_PACKAGES_WANTED=(chromium)
did=()

say() { printf 'bootstrap: %s\n' "$*"; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo -n "$@"
    else
        return 127
    fi
}

can_be_root() {
    [ "$(id -u)" -eq 0 ] || { command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; }
}

deb_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'
}

# A Python that can create a venv (Debian's python3 needs python3-venv for ensurepip).
python_ok() {
    "$1" -c 'import sys, venv, ensurepip; sys.exit(0 if sys.version_info >= (3, 11) else 1)' >/dev/null 2>&1
}

venv_ok() {
    [ -x "$VENV/bin/python" ] &&
        "$VENV/bin/python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null
}

find_python() {
    local candidate
    for candidate in "${PYTHON:-}" python3.11 python3.12 python3.13 python3; do
        [ -n "$candidate" ] || continue
        if command -v "$candidate" >/dev/null 2>&1 && python_ok "$candidate"; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

node_major() {
    node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0
}

# --- 1. Debian packages -------------------------------------------------------------------------
apt_missing=()
if [ "${GPUWS_SKIP_APT:-0}" != 1 ] && command -v dpkg-query >/dev/null 2>&1; then
    for pkg in "${APT_PACKAGES_WANTED[@]}"; do
        deb_installed "$pkg" || apt_missing+=("$pkg")
    done
    if ! venv_ok && ! find_python >/dev/null; then
        apt_missing+=(python3 python3-venv)
    fi
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        apt_missing+=(nodejs npm)
    fi
fi
if [ "${#apt_missing[@]}" -gt 0 ]; then
    if can_be_root; then
        export DEBIAN_FRONTEND=noninteractive
        apt_install() {
            as_root apt-get install -y -q --no-install-recommends "${apt_missing[@]}" >/dev/null
        }
        # Refresh the package lists only if they are absent or the install cannot find a package.
        if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null || ! apt_install 2>/dev/null; then
            say "apt-get update"
            as_root apt-get update -q >/dev/null
            apt_install
        fi
        did+=("apt-get installed: ${apt_missing[*]}")
    else
        say "not root and no password-less sudo: skipping Debian packages."
        say "  install them yourself: sudo apt-get install ${apt_missing[*]}"
        say "  (chromium is only needed by the browser tests; they skip without it)"
    fi
fi

# --- 2. virtualenv ------------------------------------------------------------------------------
if ! venv_ok; then
    if ! py="$(find_python)"; then
        say "error: no Python >= 3.11 with the venv module found (set PYTHON=/path/to/python3.11)" >&2
        exit 1
    fi
    rm -rf "$VENV"
    "$py" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    did+=("created .venv with $("$VENV/bin/python" --version)")
fi

# --- 3. the package with all extras and the devcluster, both editable ---------------------------
stamp_py="$VENV/.bootstrap-stamp"
want_py="$(cat setup.cfg pyproject.toml devcluster/setup.cfg devcluster/pyproject.toml | sha256sum |
    cut -d' ' -f1) $ROOT [$EXTRAS] +devcluster"
if [ "$(cat "$stamp_py" 2>/dev/null || true)" != "$want_py" ] ||
    ! compgen -G "$VENV/lib/python3*/site-packages/gpuworkspace_spawner-*.dist-info" >/dev/null ||
    ! compgen -G "$VENV/lib/python3*/site-packages/gpuworkspace_devcluster-*.dist-info" >/dev/null; then
    say "pip install -e .[$EXTRAS] -e ./devcluster"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[$EXTRAS]" -e ./devcluster
    printf '%s\n' "$want_py" >"$stamp_py"
    did+=("pip installed -e .[$EXTRAS] -e ./devcluster")
fi

# rfc3987-syntax (pulled in by jupyter-events' jsonschema[format-nongpl]) builds ~35 Earley parsers
# when jsonschema is imported: about 1.2 s of CPU in every process that imports it, which is every
# single-user server, the hub, each hub service and the devcluster (python-jsonschema/jsonschema#1428,
# opendatahub-io/notebooks#3532). Only jsonschema's "iri" and "iri-reference" format checks use it, and
# no schema installed here names those formats; without it, jsonschema leaves them unchecked.
if compgen -G "$VENV/lib/python3*/site-packages/rfc3987_syntax-*.dist-info" >/dev/null; then
    "$VENV/bin/python" -m pip uninstall -q -y rfc3987-syntax
    did+=("removed rfc3987-syntax (1.2 s of CPU at every jsonschema import)")
fi

# --- 4. configurable-http-proxy (npm) -----------------------------------------------------------
stamp_npm="node_modules/.bootstrap-stamp"
if command -v npm >/dev/null 2>&1; then
    if [ "$(node_major)" -lt 20 ]; then
        say "warning: node $(node --version 2>/dev/null) is too old for configurable-http-proxy 5 (needs >= 20);"
        say "  the demo and the end-to-end tests will not find a proxy"
    else
        want_npm="$(cat package.json package-lock.json | sha256sum | cut -d' ' -f1)"
        if [ "$(cat "$stamp_npm" 2>/dev/null || true)" != "$want_npm" ] ||
            ! [ -x node_modules/.bin/configurable-http-proxy ]; then
            say "npm ci (configurable-http-proxy)"
            npm ci --no-audit --no-fund --loglevel=error >/dev/null
            printf '%s\n' "$want_npm" >"$stamp_npm"
            did+=("npm installed configurable-http-proxy $(node_modules/.bin/configurable-http-proxy --version)")
        fi
    fi
else
    say "warning: npm not found; skipping configurable-http-proxy (install nodejs and npm)"
fi

# --- 5. the workspace's JupyterLab extension (TypeScript), prebuilt into the Python package -------
if command -v npm >/dev/null 2>&1 && [ "$(node_major)" -ge 20 ]; then
    built="$(VENV="$VENV" bash scripts/build-labextension.sh)"  # fails bootstrap when the build fails
    while IFS= read -r line; do [ -z "$line" ] || did+=("$line"); done <<<"$built"
fi

# --- summary ------------------------------------------------------------------------------------
if [ "${#did[@]}" -eq 0 ]; then
    say "up to date (nothing to do)"
else
    for line in "${did[@]}"; do say "done: $line"; done
fi
