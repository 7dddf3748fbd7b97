#!/usr/bin/env bash
# The other ways a user installs provisioner (issue #16), in one scratch venv:
#   1. a wheel (`pip wheel --no-deps .`) installed in a clean venv holds every data file
#      of the checkout and answers `provision --goal cost --rps 70 --design splitwise-hh`;
#   2. the run wrote the JIT cache to PROVISIONER_JIT_CACHE, nothing into site-packages;
#   3. `pip install -U .` upgrades in place and `provision catalog` still works;
#   4. `pip uninstall -y provisioner` leaves none of the package directories behind.
# Dependencies come from pip's cache (no --no-deps install: the venv starts empty).
# Usage: .ci/install-checks.sh   (from anywhere; about 2-4 min, mostly one kernel compile)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PACKAGES=(provisioner perfmodels workloads reports hardware_catalog)
SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/provisioner-install-checks.XXXXXX")"
trap 'rm -rf "$SCRATCH"' EXIT
fail() { echo "install-checks: FAIL: $*" >&2; exit 1; }

python3.11 -m venv "$SCRATCH/venv"
PY="$SCRATCH/venv/bin/python"
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
export PROVISIONER_JIT_CACHE="$SCRATCH/jit"
cd "$SCRATCH"   # never import the checkout by accident
# Build from a copy of the checkout's files (tracked and new, not ignored): setuptools
# writes build/ into the source tree, and a stale build/lib there can leak into a wheel.
SRC="$SCRATCH/src"
mkdir -p "$SRC"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$SRC")

echo "::: wheel: build, install in a clean venv"
"$PY" -m pip wheel -q --no-deps "$SRC" -w "$SCRATCH/wheel"
"$PY" -m pip install -q "$SCRATCH"/wheel/provisioner-*.whl

echo "::: wheel: every data file of the checkout is installed"
missing=0
for pkg in "${PACKAGES[@]}"; do
    while IFS= read -r rel; do
        [[ -f "$SITE/$rel" ]] || { echo "  missing from the wheel: $rel" >&2; missing=1; }
    done < <(cd "$SRC" && find "$pkg" -type f ! -name '*.py' ! -name '*.pyc' ! -path '*/__pycache__/*')
done
[[ $missing == 0 ]] || fail "data files missing: add them to [tool.setuptools.package-data] in pyproject.toml"

echo "::: wheel: provision --goal cost --rps 70 --design splitwise-hh"
"$SCRATCH/venv/bin/provision" --goal cost --rps 70 --design splitwise-hh --json > answer.json
"$PY" -c 'import json, sys; r = json.load(open("answer.json")); assert r["winner"], r' \
    || fail "no winner in the wheel install's answer"

echo "::: the JIT cache is in PROVISIONER_JIT_CACHE, not in site-packages"
[ -n "$(find "$PROVISIONER_JIT_CACHE" -name "*.nbi" | head -1)" ] || fail "no kernel cache in $PROVISIONER_JIT_CACHE"
stray="$(find "$SITE" \( -name '*.nbi' -o -name '*.nbc' \) | head -3)"
[[ -z "$stray" ]] || fail "numba cache files in site-packages: $stray"

echo "::: upgrade in place: pip install -U ."
"$PY" -m pip install -q -U "$SRC"
"$SCRATCH/venv/bin/provision" catalog >/dev/null || fail "provision catalog after pip install -U ."

echo "::: uninstall leaves no package directory"
"$PY" -m pip uninstall -q -y provisioner
for pkg in "${PACKAGES[@]}"; do
    [[ ! -e "$SITE/$pkg" ]] || fail "pip uninstall left $SITE/$pkg: $(find "$SITE/$pkg" | head -5 | tr '\n' ' ')"
done
echo "::: install checks OK"
