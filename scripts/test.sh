#!/usr/bin/env bash
# Install everything, then run the whole test suite (root-only tests are skipped when not root).
# Two passes: the tests that neither build namespaces nor time real work run in one pytest-xdist worker per CPU
# (at most 4); then the root tests and the `serial` ones (see pyproject.toml) run one at a time, so that no
# other test's load moves what they measure. Extra arguments go to both passes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
workers=$(nproc)
[ "$workers" -gt 4 ] && workers=4
status=0
.venv/bin/python -m pytest -q -ra -n "$workers" -m "not root and not serial" "$@" || status=$?
[ "$status" -eq 5 ] && status=0  # 5: nothing selected (e.g. only root tests asked for)
second=0
.venv/bin/python -m pytest -q -ra -m "root or serial" "$@" || second=$?
[ "$second" -eq 5 ] && second=0
[ "$status" -ne 0 ] && exit "$status"
exit "$second"
