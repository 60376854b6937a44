"""`--time-dilation auto`: measure what this host sustains, then choose the factor
(`genie.testbed.dilation_rules.choose_dilation`).

The probe is a scratch testbed built by the same planner and shapers as the real one: a star of up to
`PROBE_HOSTS` hosts whose links are shaped far above anything the host can carry (so the shaping machinery —
HTB, and the link emulator's wire and delay stages when the real testbed will have them — is in the path
without limiting it), with as many ranks as the topology has (up to `PROBE_RANKS`: the per-step software time
grows with the ranks sharing the CPUs). Through the ordinary bench path it measures
* the software time of one step: a ring all-gather of tiny messages on all ranks, its median iteration divided
  by its steps (no wire time to speak of at the probe's rates: what is left is the host);
* the aggregate rate: a ring all-gather of large messages with one rank per host (every host sending at once),
  its bus bandwidth times the hosts;
* the link emulator's median release lateness, from its own statistics.
It takes 10-40 s; the probe testbed is torn down whatever happens.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Optional

from genie.core.collective import Algorithm, Collective
from genie.core.dilation import TimeDilation
from genie.core.schedule import CollectiveOp
from genie.core.sizes import DEFAULT_DTYPE_BYTES
from genie.core.testbed import LinkModel
from genie.core.topology import LinkShape, Topology

PROBE_HOSTS = 8
PROBE_RANKS = 256
PROBE_RATE_BPS = 100 * 10**9  # far above what a 2-core host carries: the machinery is in the path, not the limit
PROBE_DELAY_US = 1.0  # puts the link emulator in the path when the real testbed will delay its links
STEP_BYTES = 64  # per rank, per step of the software probe
BULK_BYTES = 8 << 20  # per rank of the throughput probe
STEP_ITERATIONS, BULK_ITERATIONS = 20, 3


def probe_topology(topology: Topology, links: LinkModel) -> Topology:
    """The scratch star the probe runs on (see the module docstring)."""
    from genie.topology.builders import star

    hosts = min(PROBE_HOSTS, len(topology.hosts))
    ranks = min(PROBE_RANKS, topology.world_size)
    emulated = any(link.shape.needs_delay_emulation for link in topology.links) or links is LinkModel.WIRE
    mtu = max((link.shape.mtu_bytes for link in topology.links), default=1500)
    shape = LinkShape(rate_bps=PROBE_RATE_BPS, delay_us=PROBE_DELAY_US if emulated else 0.0, mtu_bytes=mtu)
    return star(max(2, hosts), shape=shape, ranks_per_host=math.ceil(ranks / max(2, hosts)), name="probe")


def measure_host(topology: Topology, links: LinkModel):
    """This host's `HostFigures` for a testbed of `topology` with `links` (needs root: a scratch testbed)."""
    from genie.services.bench import GroupCase, run_cases
    from genie.services.target import placements_for
    from genie.testbed import service
    from genie.testbed.dilation_rules import HostFigures
    from genie.testbed.emulators import stats_path

    scratch = probe_topology(topology, links)
    ranks = min(PROBE_RANKS, topology.world_size, scratch.world_size)
    with service.temporary_testbed(scratch, links=links) as info:
        placements = placements_for(info, ranks)
        first_per_host = list({p.host: p for p in reversed(placements)}.values())[::-1]
        world = tuple(p.rank for p in placements)
        small = CollectiveOp(Collective.ALL_GATHER, STEP_BYTES * len(world), world, Algorithm.RING,
                             dtype_bytes=DEFAULT_DTYPE_BYTES)
        outcome = run_cases([GroupCase((small,), 3, STEP_ITERATIONS)], placements,
                            on_pids=lambda pids: service.register_pids(info.name, pids))
        step_us = outcome.stats[0].time_median_us / (len(world) - 1)
        hosts = [p.rank for p in first_per_host]
        bulk = CollectiveOp(Collective.ALL_GATHER, BULK_BYTES * len(hosts), tuple(range(len(hosts))),
                            Algorithm.RING, dtype_bytes=DEFAULT_DTYPE_BYTES)
        outcome = run_cases([GroupCase((bulk,), 1, BULK_ITERATIONS)],
                            [dataclasses.replace(p, rank=i) for i, p in enumerate(first_per_host)],
                            on_pids=lambda pids: service.register_pids(info.name, pids))
        stats = outcome.stats[0]
        # a ring all-gather's bus bandwidth is what each host sends per second, all of them at once
        aggregate_bps = stats.busbw_GBps * 8e9 * len(hosts)
        lateness = [_emulator_late_us(stats_path(info.name, ns)) for ns in {h.netns for h in info.hosts}]
        known = [late for late in lateness if late is not None]
    return HostFigures(ranks, step_us, aggregate_bps, max(known) if known else None)


def _emulator_late_us(path) -> Optional[float]:
    try:
        value = json.loads(path.read_text()).get("late_median_us")
    except (OSError, ValueError):
        return None
    return None if value is None else max(0.0, float(value))


def auto_dilation(topology: Topology, *, links: LinkModel, source: str | None = None,
                  reference_bytes: int | None = None) -> TimeDilation:
    """Measure this host for `topology` and choose the factor for a run whose smallest message is
    `reference_bytes` (None: not known, 1 KiB); InputError when the topology cannot hold it."""
    from genie.testbed.dilation_rules import REFERENCE_MESSAGE_BYTES, choose_dilation

    return choose_dilation(topology, measure_host(topology, links), source=source,
                           reference_bytes=reference_bytes or REFERENCE_MESSAGE_BYTES)
