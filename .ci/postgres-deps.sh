#!/usr/bin/env bash
# PostgreSQL server binaries for tests/test_postgres_study.py, installed idempotently from
# Debian's packages (apt). The test starts (initdb + pg_ctl, a Unix socket in a temporary
# directory) and stops a throwaway server of its own; under CI (`CI` set, as .ci/run sets
# it) it fails when it cannot, so a machine without these binaries fails CI rather than
# skipping the test.
set -euo pipefail

if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q postgresql
fi
ls /usr/lib/postgresql/*/bin/pg_ctl
