"""Random job mixes on a 4:1 oversubscribed leaf-spine, drawn the same way by the tests that compare a fast fabric
engine with the reference (tests/test_fabric_flat_engine.py, tests/test_fabric_chain_engine.py)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from genie.core.topology import LinkShape
from genie.core.trace import Trace
from genie.topology.builders import leaf_spine
from genie.workloads.generators.options import GeneratorOptions, generate_from_options
from genie.workloads.mix import merge_jobs

from astra_adapter.fabric.network import FabricNetwork

MIX_TOPOLOGY = leaf_spine(4, 4, 2, shape=LinkShape(rate_bps=1_000_000_000),
                          fabric_shape=LinkShape(rate_bps=500_000_000))  # 4:1 oversubscribed: queues stand
MIX_BASE = {"model": "gpt3-125m", "layers": 1, "seq": 128, "batch": 1}
MIX_JOBS = [{**MIX_BASE, "dp": 4}, {**MIX_BASE, "tp": 2, "dp": 2}, {**MIX_BASE, "tp": 4},
            {**MIX_BASE, "dp": 4, "ep": 4, "experts": 4, "top_k": 2, "moe_every": 1}]


def random_mixes(rng: np.random.Generator, count: int = 3
                 ) -> Iterator[tuple[Trace, float, float, FabricNetwork]]:
    """`count` mixes of 2-4 of MIX_JOBS at random host slots and start offsets, each repeated twice: (the merged
    trace, a flow contention, a message overhead in ns, the network with or without an ECMP hash seed)."""
    traces = [generate_from_options(GeneratorOptions.parse(options)) for options in MIX_JOBS]
    for _ in range(count):
        pick = rng.choice(len(traces), size=int(rng.integers(2, 5)), replace=False).tolist()
        hosts, slots = rng.permutation(16).tolist(), []
        for j in pick:
            slots.append(tuple(hosts[:traces[j].num_ranks]))
            hosts = hosts[traces[j].num_ranks:]
        merged, _ = merge_jobs([traces[j] for j in pick], [f"job{j}" for j in pick], slots, [2] * len(pick),
                               [int(rng.integers(0, 3)) * 1_000_000 for _ in pick], world=16)
        contention = float(rng.choice([0.0, 0.006]))
        overhead_ns = float(rng.choice([0.0, 3000.0]))
        network = FabricNetwork(MIX_TOPOLOGY, hash_seed=int(rng.integers(0, 3)) if rng.random() < 0.5 else None)
        yield merged, contention, overhead_ns, network
