"""A trace's iteration time with a real cluster's NCCL calibration (pure): every communication op timed by the
NCCL model - the algorithm, protocol and channels NCCL's tuner picks for its collective, its group's ranks and
the nodes they span, at the calibration's fitted bandwidths - and the trace played under the replay's rules
(:mod:`astra_adapter.timeline`).

The target topology may differ from the calibrated cluster in its node count (a what-if at scale: the same
nodes, more of them) and in its link speeds: a link class's fitted bandwidth is scaled by the target's nominal
rate over the calibrated one (faster NICs deliver the calibrated share of their faster line). Its nodes must
have the calibrated GPU count. Ranks map to the topology's hosts in order (node by node, GPU by GPU).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, replace

from genie.core.errors import InputError
from genie.core.topology import Topology
from genie.core.trace import Trace

from astra_adapter.measurements import CommOp
from astra_adapter.nccl.hardware import Cluster, cluster_from_topology, node_of_hosts
from astra_adapter.nccl.model import MODELLED, Call, NcclParams, Prediction, predict
from astra_adapter.timeline import play_trace_by_group
from astra_adapter.workload_estimate import EstimateMode, TraceEstimate

CHOICE_COLUMNS = ("collective", "ranks", "nodes", "size_bytes", "ops", "nccl_choice", "time_us")


@dataclass(frozen=True)
class OpChoice:
    """What the model assumed for every op of one kind: NCCL's choice and the time."""

    prediction: Prediction
    ops: int

    def describe(self) -> str:
        c = self.prediction.call
        return (f"{c.collective.value:<15} {c.ranks:>4} ranks on {c.nodes:>3} node(s) {c.size_bytes:>13} B  "
                f"x{self.ops:<5} {self.prediction.how:<24} {self.prediction.time_us:>12.2f} us")


@dataclass(frozen=True)
class NcclEstimate:
    estimate: TraceEstimate
    cluster: Cluster
    choices: tuple[OpChoice, ...]


def retarget(calibrated: Cluster, params: NcclParams, target: Topology, *,
             source: str) -> tuple[Cluster, NcclParams, tuple[str, ...]]:
    """The calibrated cluster's nodes on ``target`` (its node count, NICs and link speeds), the fitted bandwidths
    scaled by the target's nominal rates over the calibrated ones; notes naming each scaling."""
    nodes = cluster_from_topology(target, gpu=calibrated.gpu, interconnect=calibrated.interconnect, source=source)
    if nodes.gpus_per_node != calibrated.gpus_per_node:
        raise InputError(f"the calibration is of nodes with {calibrated.gpus_per_node} GPUs; {target.name} has "
                         f"{nodes.gpus_per_node} per node", source=source, path="nodes")

    def ratio(new: float, old: float) -> float:
        return new / old if old > 0 and new > 0 else 1.0

    intra = ratio(nodes.intra_gb_s, calibrated.intra_gb_s)
    scaled = replace(params, intra_busbw_gb_s=params.intra_busbw_gb_s * intra,
                     nvls_busbw_gb_s=params.nvls_busbw_gb_s * intra,
                     nic_gb_s=params.nic_gb_s * ratio(nodes.nic_gb_s, calibrated.nic_gb_s))
    notes = tuple(f"{what} scaled x{r:.3g} from the calibration ({target.name}: {new:.4g} GB/s, calibrated: {old:.4g})"
                  for what, r, new, old in (("intra-node bandwidth", intra, nodes.intra_gb_s, calibrated.intra_gb_s),
                                            ("NIC bandwidth", ratio(nodes.nic_gb_s, calibrated.nic_gb_s),
                                             nodes.nic_gb_s, calibrated.nic_gb_s))
                  if abs(r - 1.0) > 1e-6)
    return replace(calibrated, name=nodes.name, nodes=nodes.nodes, nics=nodes.nics or calibrated.nics,
                   nic_gb_s=nodes.nic_gb_s or calibrated.nic_gb_s, intra_gb_s=nodes.intra_gb_s or
                   calibrated.intra_gb_s), scaled, notes


def estimate_nccl(trace: Trace, target: Topology, calibrated: Cluster, params: NcclParams, *,
                  source: str) -> NcclEstimate:
    cluster, fitted, scaling = retarget(calibrated, params, target, source=source)
    hosts = target.rank_hosts()
    if trace.num_ranks > len(hosts):
        raise InputError(f"the trace has {trace.num_ranks} ranks but {target.name} has {len(hosts)} GPUs",
                         source=source, path="topology")
    node_of = node_of_hosts(target)
    rank_node = [node_of.get(h, h) for h in hosts]  # a plain host is a node of its own
    seen: dict[Call, list] = {}
    uneven: set[CommOp] = set()

    def time_ns(op: CommOp, members: tuple[int, ...]) -> float:
        if op.collective not in MODELLED:
            raise InputError(f"genie's NCCL model does not time {op.collective.value} (the trace has "
                             f"{op.describe()})", path="trace")
        nodes = len({rank_node[r] for r in members})
        if op.split_bytes:
            uneven.add(op)
        call = Call(op.collective, op.ranks, nodes, op.size_bytes)
        entry = seen.get(call)
        if entry is None:
            entry = seen[call] = [predict(cluster, fitted, call), 0]
        entry[1] += 1
        return entry[0].time_us * 1000.0

    timeline = play_trace_by_group(trace, time_ns)
    choices = tuple(OpChoice(p, n) for _, (p, n) in sorted(seen.items()))
    notes = (f"NCCL model calibrated on {calibrated.name} ({calibrated.gpu}), on {cluster.name}: {cluster.nodes} "
             f"node(s) x {cluster.gpus_per_node} GPUs", *scaling)
    if uneven:
        notes += (f"{len(uneven)} uneven all-to-all(s) timed as NCCL's even all-to-all of their busiest member "
                  "(the model knows one size per call): the busiest member's time, an upper bound",)
    return NcclEstimate(TraceEstimate(EstimateMode.NCCL, timeline.ranks, notes=notes), cluster, choices)


def choices_csv(choices: tuple[OpChoice, ...]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CHOICE_COLUMNS)
    for c in choices:
        call = c.prediction.call
        writer.writerow((call.collective.value, call.ranks, call.nodes, call.size_bytes, c.ops, c.prediction.how,
                         round(c.prediction.time_us, 3)))
    return out.getvalue()


def format_choices(choices: tuple[OpChoice, ...]) -> str:
    lines = ["# per op kind: NCCL's algorithm/protocol x channels and the time assumed"]
    lines += [f"  {c.describe()}" for c in choices]
    return "\n".join(lines)
