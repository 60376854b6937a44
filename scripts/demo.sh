#!/usr/bin/env bash
# The default demo: install, bring up the 8-host star testbed, sweep all-reduce / all-gather / all-to-all,
# print the nccl-tests tables, tear the testbed down.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/genie bench --topology topologies/star-8.yaml \
    --collective all_reduce,all_gather,all_to_all -b 1K -e 16M -f 4 -n 10 -w 3 "$@"
