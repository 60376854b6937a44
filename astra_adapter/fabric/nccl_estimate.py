"""``genie estimate --mode fabric --calibration DIR`` with a real cluster's NCCL calibration: the trace played on
the fabric model with NCCL's choices per op (:mod:`astra_adapter.fabric.nccl_flows`), on the target topology
(pure). The calibration is carried to the target as the NCCL-mode estimator carries it
(:func:`astra_adapter.nccl.estimate.retarget`: its node count, its link speeds); ranks map to the topology's
hosts in order."""

from __future__ import annotations

from genie.core.errors import InputError
from genie.core.topology import Topology
from genie.core.trace import Trace

from astra_adapter.fabric.network import FabricNetwork
from astra_adapter.fabric.nccl_flows import NcclFlowEngine, OpPlan
from astra_adapter.fabric.player import play_on_fabric
from astra_adapter.nccl.estimate import NcclEstimate, OpChoice, retarget
from astra_adapter.nccl.hardware import Cluster, node_of_hosts
from astra_adapter.nccl.model import NcclParams
from astra_adapter.workload_estimate import EstimateMode, TraceEstimate


def estimate_fabric_nccl(trace: Trace, target: Topology, calibrated: Cluster, params: NcclParams, *,
                         source: str) -> tuple[NcclEstimate, tuple[OpPlan, ...]]:
    """The trace on ``target``'s fabric with NCCL's choices; the estimate (mode fabric) with the choices per op
    kind (as the NCCL-mode estimator reports them: its model's time of the op alone) and the fabric's plans."""
    cluster, fitted, scaling = retarget(calibrated, params, target, source=source)
    network = FabricNetwork(target, source=source)
    if trace.num_ranks != network.world_size:
        raise InputError(f"the trace has {trace.num_ranks} ranks but topology {target.name} runs "
                         f"{network.world_size}", source=source, path="hosts")
    network.check_connected()
    node_of = node_of_hosts(target)
    rank_node = [node_of.get(h, h) for h in network.rank_hosts]  # a plain host is a node of its own
    engine = NcclFlowEngine(network, cluster, fitted, rank_node)
    timeline = play_on_fabric(trace, engine)
    kinds = sorted(engine.plans.items())
    choices = tuple(OpChoice(plan.prediction, ops) for _, (plan, ops) in kinds)
    plans = tuple(plan for _, (plan, _) in kinds)
    links = (f"NVLink at the fitted {fitted.intra_busbw_gb_s:.4g} GB/s, " if cluster.gpus_per_node > 1 else "") + \
        f"NICs at the fitted {fitted.nic_gb_s:.4g} GB/s"
    notes = (f"fabric model with NCCL's choices, calibrated on {calibrated.name} ({calibrated.gpu}), on "
             f"{target.name}: {cluster.nodes} node(s) x {cluster.gpus_per_node} GPUs, "
             f"{len(network.resources)} link directions ({links}), "
             f"{'ECMP as the expected share' if network.multipath else 'no ECMP'}", *scaling)
    return NcclEstimate(TraceEstimate(EstimateMode.FABRIC, timeline.ranks, notes=notes), cluster, choices), plans
