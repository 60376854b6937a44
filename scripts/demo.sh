#!/usr/bin/env bash
# The default demo, genie's main job end to end: install, then `genie experiment` on the 8-host star
# (topologies/star-8.yaml, 1 Gbit/s): bring the testbed up, sweep the collectives the TP+DP GPT-3 trace uses,
# calibrate the network model, estimate the iteration time (measured and calibrated modes), replay the whole
# trace, compare estimate and replay (accuracy.csv), tear the testbed down. About 1-2 minutes.
# Other experiments: experiments/*.yaml; nccl-tests-style sweeps: genie bench (README "Using genie").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/genie experiment experiments/tp2dp4-gpt3-star8.yaml "$@"
