"""The fabric model with NCCL's choices (pure): with a real cluster's NCCL calibration (``genie calibrate``), every
op runs the flows of the algorithm NCCL's tuner picks for it, at its protocol's latency and bandwidth, on its
channels - routed on the topology graph and sharing links at max-min fair rates with every other op in flight
(:mod:`astra_adapter.fabric.flows`).

Per op (a collective on its members, the nodes they span, its size), :func:`astra_adapter.nccl.model.predict`
gives NCCL's choice - what the NCCL-mode estimator assumes, so ``--explain`` prints the same whichever runs - and
:func:`op_plan` turns it into flows:

- **algorithm -> flow pattern**: the steps of genie's schedule of that algorithm
  (:func:`genie.collectives.sends.step_sends`): Ring -> ``ring``, Tree -> ``double_binary_tree`` (NCCL's two
  binary trees, pipelined in :data:`TREE_CHUNKS` pieces), PAT -> ``pat``. NVLS, NVLSTree and CollNet have no
  flow pattern of their own in genie (the switch reduces): they borrow the ring's flows, their bytes scaled so
  that those flows reach their fitted bandwidth. Alltoall and sendrecv (NCCL's send/receive operations, not in
  the tuner) run their own schedules (direct, p2p; nccl-tests' sendrecv on more than two ranks the ring shift).
- **channels -> rails**: between nodes, a call on ``c`` channels runs ``min(c, NICs its GPUs reach)`` channel
  rings, each with its share of the bytes; ring ``k`` enters and leaves every node at the GPU of its rail
  (:func:`channel_orders`: a ring through the node's GPUs, every other node's in reverse so that the hop
  between two nodes joins the same rail on both), so the channels spread over the NICs as NCCL's do (channel
  ``k`` on NIC ``k mod nics``). Inside a node every channel crosses the same NVLink/NVSwitch links: one ring
  carries them.
- **protocol -> latency and bandwidth**: the op's latency is NCCL's for the (algorithm, protocol) on the fitted
  system (``launch_us + latency_scale x latency``, as the NCCL model, and a Tree/LL call's waits for the GPU's
  writes of its slices into host memory, :func:`astra_adapter.nccl.model.tree_ll_write_us`), spread evenly over
  the steps, the launch on the first; its bytes are scaled by the protocol's share of the algorithm's Simple
  bandwidth on the fitted system in NCCL's table (:func:`astra_adapter.nccl.tuning.table_entry`: LL carries
  half its bytes as flags, LL128 120 of 128 - 0.92 on a ring -, both under NCCL's per-channel caps; Simple 1),
  times the fitted ``ll_efficiency``/``ll128_efficiency``, the share of the channels a small call runs on beyond what
  the rails already express, NCCL's tree correction and the pipeline's fill - all as the NCCL model applies them.
  Route delays are not added (NCCL's latency already counts the hops).
- **links**: NVLink/NVSwitch links deliver the fitted ``intra_busbw_gb_s``, NIC links the fitted ``nic_gb_s``
  (:func:`fitted_capacity`), the links between switches their nominal rate.

On an uncongested topology an op alone takes the NCCL model's time (tests/test_fabric_nccl.py; docs/astra.md,
"With a real cluster's NCCL calibration", gives the measured agreement); where ops share links - concurrent
process groups, a rail short, an oversubscribed spine - the flows contend where the NCCL model cannot tell.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from genie.core.collective import Algorithm, Collective
from genie.core.errors import InputError
from genie.core.schedule import CollectiveOp
from genie.core.sizes import dtype_bytes_for
from genie.core.topology import LinkRole
from genie.collectives.sends import SendStep, step_sends

from astra_adapter.fabric.flows import WIRE_BYTES_PER_PAYLOAD_BYTE, FlowEngine, StepFlows
from astra_adapter.fabric.network import FabricNetwork, LinkClass
from astra_adapter.measurements import CommOp
from astra_adapter.nccl.hardware import Cluster, node_of_hosts
from astra_adapter.nccl.model import MODELLED, P2P, Call, NcclParams, Prediction, _plan, cut_with_fill, \
    fill_factor, fitted_system, net_peer_share, predict, tree_ll_write_us
from astra_adapter.nccl.tuning import NcclAlgorithm, NcclProtocol, call_bandwidth_gb_s, call_latency_us, table_entry

#: NCCL's algorithm -> the genie schedule whose flows it runs (the others: the ring's, see the module doc)
FLOW_PATTERN = {NcclAlgorithm.RING: Algorithm.RING, NcclAlgorithm.TREE: Algorithm.DOUBLE_BINARY_TREE,
                NcclAlgorithm.PAT: Algorithm.PAT}
TREE_CHUNKS = 8  # the pieces a tree pipelines each half of its buffer in (NCCL pipelines its chunks)
PIPELINE_CHUNKS = 8  # the pieces a broadcast's or reduce's chain pipelines its buffer in
_ROOTED = (Collective.BROADCAST, Collective.REDUCE)
_P2P_PATTERN = {Collective.ALL_TO_ALL: Algorithm.DIRECT, Collective.SEND_RECV: Algorithm.P2P}


@dataclass(frozen=True)
class OpPlan:
    """How one op runs on the fabric: NCCL's choice, the schedule it runs, the channel rings between nodes,
    the factor its payload bytes are scaled by, and its latency (ns)."""

    prediction: Prediction
    pattern: Algorithm
    channel_rings: int
    bytes_factor: float
    latency_ns: float
    launch_ns: float

    def describe(self) -> str:
        rails = f", {self.channel_rings} channel rings on rails" if self.channel_rings > 1 else ""
        return f"{self.prediction.how}: {self.pattern.value} flows{rails}, bytes x{self.bytes_factor:.3f}"


def channel_orders(members: tuple[int, ...], rank_node: list, rings: int) -> tuple[tuple[int, ...], ...]:
    """The members' order in each of ``rings`` channel rings: node by node (in the members' order of nodes),
    ring ``k`` entering and leaving every node at the GPU in position ``k x m / rings`` of the node's ``m``
    members (its rail; with fewer rings than GPUs, one GPU of each NIC's share),
    the GPUs of every other node in reverse so that consecutive nodes meet on one rail."""
    by_node: dict = {}
    for r in members:
        by_node.setdefault(rank_node[r], []).append(r)
    local = [sorted(rs) for rs in by_node.values()]
    if len(local) < 2:
        return (members,)
    orders = []
    for k in range(max(rings, 1)):  # one ring too meets rail to rail (else a cross-rail hop rides ECMP)
        order: list[int] = []
        for j, gpus in enumerate(local):
            m = len(gpus)
            start = (k * m) // rings % m  # spread over the node's GPUs (and so its NICs) evenly
            if j % 2 == 0:  # enters at position k, leaves at k - 1
                order += [gpus[(start + i) % m] for i in range(m)]
            else:  # enters at k - 1, leaves at k
                order += [gpus[(start - 1 - i) % m] for i in range(m)]
        orders.append(tuple(order))
    return tuple(orders)


def _rails(cluster: Cluster, call: Call, channels: int) -> int:
    if call.nodes < 2:
        return 1
    return max(1, min(channels, cluster.nics_reached(call.ranks_per_node)))


def _inter_busbw(cluster: Cluster, params: NcclParams, call: Call, rails: int) -> float:
    """The bus bandwidth a ring through the call's nodes gets on ``rails`` NICs a node (GB/s)."""
    nic = params.nic_gb_s * rails
    return min(params.intra_busbw_gb_s, nic) if call.ranks_per_node > 1 else nic


def op_plan(cluster: Cluster, params: NcclParams, call: Call) -> OpPlan:
    """NCCL's choice for ``call`` and how the fabric runs it (see the module doc)."""
    prediction = predict(cluster, params, call)
    choice = prediction.choice
    if choice is None:  # a send/receive operation: Simple, its latency the NCCL model's for no bytes
        empty_us = predict(cluster, params, replace(call, size_bytes=0)).time_us
        latency_us = empty_us - params.launch_us
        # the NCCL model's fill factor on its transfer (the time without the fill, less that of no bytes)
        fill = fill_factor(predict(cluster, replace(params, fill_us=0.0), call).time_us - empty_us, call, params)
        pattern = Algorithm.RING if call.collective is Collective.SEND_RECV and call.ranks > 2 else \
            _P2P_PATTERN[call.collective]  # nccl-tests' sendrecv: every rank to the next at once
        # a network peer runs on its few channels: the share of its NICs they drive scales its bytes
        return OpPlan(prediction, pattern, 1, fill / net_peer_share(cluster, call) / WIRE_BYTES_PER_PAYLOAD_BYTE,
                      latency_us * 1000.0, params.launch_us * 1000.0)
    nominal, _, entry, share, used = _plan(cluster, call)  # the nominal system, its entry, channel share, channels
    fitted = fitted_system(nominal, cluster, params)
    pattern_algorithm = choice.algorithm if choice.algorithm in FLOW_PATTERN else NcclAlgorithm.RING
    pattern = FLOW_PATTERN[pattern_algorithm]
    # the bandwidth NCCL's model gives the choice, and what the pattern's flows get on the fitted links
    chosen = table_entry(fitted, call.collective, entry.algorithm, entry.protocol)
    efficiency = {NcclProtocol.LL: params.ll_efficiency, NcclProtocol.LL128: params.ll128_efficiency}.get(
        entry.protocol, 1.0)
    model_bw = efficiency * call_bandwidth_gb_s(call.collective, chosen, call.size_bytes)
    transfer_us = call.size_bytes / (1000.0 * model_bw)  # the NCCL model's channel cut and fill, per unit of it
    fill = cut_with_fill(transfer_us, share, entry, call, params) / transfer_us if transfer_us > 0 else \
        cut_with_fill(1.0, share, entry, call, params)
    # the pattern's flows run at the links' rates: not at the tree search's raised speed inside a node on 2 nodes,
    # which only NCCL's model of the choice carries (model_bw)
    reference = table_entry(replace(fitted, tree_bw_intra_gb_s=0.0), call.collective, pattern_algorithm,
                            NcclProtocol.SIMPLE).algbw_gb_s
    rails = _rails(cluster, call, used)
    if call.nodes > 1:  # the rails the channel rings take already narrow the NICs' share: not twice
        reference *= _inter_busbw(cluster, params, call, rails) / _inter_busbw(
            cluster, params, call, cluster.nics_reached(call.ranks_per_node))
        if pattern_algorithm is not choice.algorithm and call.ranks_per_node > 1:
            # a borrowed ring: what its flows really get (the GPU whose channel leaves the node sends on its
            # NIC, not its NVLink: the NVLink carries (ppn - 1) / ppn of the ring's bytes)
            ppn = call.ranks_per_node
            nic = params.nic_gb_s * rails
            reference *= min(params.intra_busbw_gb_s * ppn / (ppn - 1), nic) / min(params.intra_busbw_gb_s, nic)
    latency_us = params.latency_scale * call_latency_us(fitted, call.collective, chosen, call.size_bytes)
    # a Tree/LL slice's writes into the host-memory LL buffers, one per network hop: the GPU's, not the links'
    latency_us += tree_ll_write_us(nominal, chosen, efficiency, call, used)
    if call.collective in _ROOTED:  # NCCL's model counts the chain's fill (its fill term): the flows' is not added
        fill *= PIPELINE_CHUNKS / (call.ranks + PIPELINE_CHUNKS - 2)
    return OpPlan(prediction, pattern, rails if pattern is not Algorithm.PAT else 1,
                  reference / model_bw * fill / WIRE_BYTES_PER_PAYLOAD_BYTE, latency_us * 1000.0,
                  params.launch_us * 1000.0)


def fitted_capacity(network: FabricNetwork, cluster: Cluster, params: NcclParams) -> np.ndarray:
    """Each resource's capacity (bytes per ns = GB/s): a multi-GPU node's NVLink/NVSwitch links the fitted
    intra-node bus bandwidth, its NIC links (network links of the node's GPUs or switch, as
    :func:`astra_adapter.nccl.hardware.cluster_from_topology` counts them; a plain host's links) the fitted NIC
    bandwidth, every other link its nominal rate."""
    topology = network.topology
    node_of = node_of_hosts(topology)
    members = set(node_of) | set(node_of.values()) if node_of else {h.name for h in topology.hosts}
    nic_links = {(link.a, link.b) for link in topology.links
                 if link.role is LinkRole.NETWORK and (link.a in members or link.b in members)}
    capacity = []
    for r in network.resources:
        if r.link_class is LinkClass.INTRA_NODE and params.intra_busbw_gb_s > 0:
            capacity.append(params.intra_busbw_gb_s)
        elif ((r.a, r.b) in nic_links or (r.b, r.a) in nic_links) and params.nic_gb_s > 0:
            capacity.append(params.nic_gb_s)
        else:
            capacity.append(r.rate_bps / 8e9)
    return np.array(capacity)


class NcclFlowEngine(FlowEngine):
    """The flow engine with every op planned by NCCL's choice for it (:func:`op_plan`); ``plans`` records the
    plan of every kind of op it ran and how many times (for ``--explain`` and ``nccl_choices.csv``)."""

    def __init__(self, network: FabricNetwork, cluster: Cluster, params: NcclParams,
                 rank_node: list | None = None) -> None:
        super().__init__(network)
        self.capacity = fitted_capacity(network, cluster, params)
        self.cluster = cluster
        self.nccl = params
        self.rank_node = rank_node if rank_node is not None else list(range(network.world_size))
        self.plans: dict[Call, list] = {}  # call -> [OpPlan, ops]
        self._steps: dict[tuple, tuple[SendStep, ...]] = {}

    def call_of(self, op: CommOp, members: tuple[int, ...]) -> Call:
        return Call(op.collective, len(members), len({self.rank_node[r] for r in members}), op.size_bytes)

    def plan(self, op: CommOp, members: tuple[int, ...], channel: int | None = None) -> tuple[StepFlows, ...]:
        call = self.call_of(op, members)
        entry = self.plans.get(call)
        if entry is None:
            if op.collective not in MODELLED:
                raise InputError(f"genie's NCCL model does not time {op.collective.value} (the trace has "
                                 f"{op.describe()})", path="trace")
            entry = self.plans[call] = [op_plan(self.cluster, self.nccl, call), 0]
        entry[1] += 1
        return super().plan(op, members, channel)

    def _sends(self, op: CommOp, members: tuple[int, ...], pattern: Algorithm, chunks: int) -> tuple[SendStep, ...]:
        key = (op.collective, pattern, op.size_bytes, members, chunks, op.split_bytes)
        hit = self._steps.get(key)
        if hit is None:
            if op.split_bytes or op.collective in P2P:
                hit = self.sends.of(replace(op, algorithm=pattern), members)
            else:
                hit = step_sends(CollectiveOp(collective=op.collective, size_bytes=op.size_bytes, group=members,
                                              algorithm=pattern, root=members[0], chunks=chunks,
                                              dtype_bytes=dtype_bytes_for(op.size_bytes)))
            hit = self._steps[key] = hit
        return hit

    def _build(self, op: CommOp, members: tuple[int, ...], channel: int | None) -> tuple[StepFlows, ...]:
        plan = self.plans[self.call_of(op, members)][0]
        chunks = TREE_CHUNKS if plan.pattern is Algorithm.DOUBLE_BINARY_TREE else \
            PIPELINE_CHUNKS if op.collective in _ROOTED else 1
        orders = channel_orders(members, self.rank_node, plan.channel_rings) \
            if plan.pattern in (Algorithm.RING, Algorithm.DOUBLE_BINARY_TREE) else (members,)
        rings = [self._sends(op, order, plan.pattern, chunks) for order in orders]
        n_steps = max(len(r) for r in rings) if rings else 0
        step_latency = plan.latency_ns / n_steps if n_steps else 0.0
        scale = plan.bytes_factor / len(orders)
        out, seen, paths = [], {}, {}
        for i in range(n_steps):
            parts = [r[i] for r in rings if i < len(r)]
            src = np.concatenate([p.src for p in parts])
            dst = np.concatenate([p.dst for p in parts])
            sizes = np.concatenate([p.size_bytes for p in parts]).astype(float) * scale
            pair = (src.tobytes(), dst.tobytes())  # a ring's steps all have the same pairs
            routes = paths.get(pair)
            if routes is None:
                routes = paths[pair] = np.array([self.network.route(a, b, channel)
                                                 for a, b in zip(src.tolist(), dst.tolist())], dtype=np.int64)
            latency = step_latency + (plan.launch_ns if i == 0 else 0.0)
            key = (pair, sizes.tobytes(), latency)  # one object per distinct step: the engine memoises rates on it
            step = seen.get(key)
            if step is None:
                step = seen[key] = StepFlows(routes, src, dst, sizes, latency)
            out.append(step)
        if not out and (plan.latency_ns or plan.launch_ns):  # nothing to move: the latency alone
            empty = np.zeros(0, dtype=np.int64)
            out.append(StepFlows(empty, empty, empty, np.zeros(0), plan.latency_ns + plan.launch_ns))
        return tuple(out)
