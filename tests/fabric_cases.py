"""Shared small cases of the fabric model's tests: a 3-tier fabric of 16 hosts and an uneven MoE job on it."""

from __future__ import annotations

from genie.workloads.generators import TrainingConfig, expert_parallel
from genie.workloads.presets import device_preset, model_preset

from benchmarks.fabric_accuracy import three_tier


def fabric():
    return three_tier(hosts_per_leaf=4, leaves_per_pod=2, pods=2, aggs_per_pod=2, cores=2, ranks_per_host=1)


def moe(seed: int, layers: int = 2):
    """MoE EP8 x DP16 with skewed routing (seeded): every rank's all-to-alls differ."""
    model = model_preset("mixtral-8x7b").with_overrides(num_layers=layers)
    return expert_parallel(model, device_preset("a100"), ep=8, dp=16,
                           config=TrainingConfig(routing_skew=1.0, routing_seed=seed))
