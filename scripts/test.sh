#!/usr/bin/env bash
# Install everything, then run the whole test suite (root-only tests are skipped when not root).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
exec .venv/bin/python -m pytest -q -ra "$@"
