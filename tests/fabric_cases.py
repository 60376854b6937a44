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


def dumbbell():
    """h0, h1 on sw0 and h2, h3 on sw1 (1 Gbit/s host links), sw0 - sw1 at 500 Mbit/s; no delays."""
    from astra_adapter.fabric.network import FabricNetwork
    from genie.topology.reader import load_topology
    return FabricNetwork(load_topology(
        "name: d\ndefaults: {bandwidth: 1gbit}\nhosts: [{name: h0}, {name: h1}, {name: h2}, {name: h3}]\n"
        "switches: [{name: sw0}, {name: sw1}]\nlinks:\n  - {endpoints: [h0, sw0]}\n  - {endpoints: [h1, sw0]}\n"
        "  - {endpoints: [h2, sw1]}\n  - {endpoints: [h3, sw1]}\n  - {endpoints: [sw0, sw1], bandwidth: 500mbit}\n"))


def advance_to(engine, end_ns: float) -> None:
    """Move a fabric `engine` on, event by event, to `end_ns` (0 the start)."""
    t = 0.0
    while t < end_ns:
        dt = min(engine.horizon_ns(), end_ns - t)
        engine.advance(dt)
        t += dt
