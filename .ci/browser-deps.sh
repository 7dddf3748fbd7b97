#!/usr/bin/env bash
# Browser dependencies of tests/test_report_browser.py, installed idempotently:
# Debian's chromium (apt) and the playwright Python package (pip, into the active
# environment; skipped with --system-only). playwright's own browser download (`playwright install`) is NOT used:
# the test launches /usr/bin/chromium through `executable_path`.
set -euo pipefail

if [ ! -x /usr/bin/chromium ]; then
    export DEBIAN_FRONTEND=noninteractive
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q chromium
fi

if [ "${1:-}" = "--system-only" ]; then   # .ci/run: playwright comes with the test extras
    /usr/bin/chromium --version 2>/dev/null
    exit 0
fi

PYTHON="${PYTHON:-python}"
if ! "$PYTHON" -c "import playwright.sync_api" >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q playwright
fi

/usr/bin/chromium --version 2>/dev/null
"$PYTHON" -c "import playwright; from importlib.metadata import version; print('playwright', version('playwright'))"
