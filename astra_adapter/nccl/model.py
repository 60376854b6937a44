"""The time of one NCCL call on a cluster (pure): NCCL's choice from its own tuner on the cluster's nominal
hardware, timed with fitted parameters.

A call is a collective on ``ranks`` GPUs spread over ``nodes`` nodes. For the collectives NCCL's tuner times
(all-reduce, all-gather, reduce-scatter, broadcast, reduce), the algorithm, protocol and channels are what the
tuner picks on the nominal system (:func:`astra_adapter.nccl.hardware.tuner_system`): what NCCL really runs does
not depend on how fast the hardware turned out to be; the tuner is the one of the NCCL release the cluster's
outputs name (:mod:`astra_adapter.nccl.versions`). The time is then NCCL's own formula for that choice on the
*fitted* system, with NCCL 2.23's constants whatever the release (:data:`TIMING_VERSION`):

    time = launch_us + latency_scale x latency(algorithm, protocol) + transfer + min(transfer, fill)
    transfer = bytes / (1000 x algbw x channels used / channels)

where the fitted system's channels carry the fitted bus bandwidths: ``intra_busbw_gb_s`` (what a GPU's
intra-node links deliver to a ring: NVLink/NVSwitch or PCIe), ``nvls_busbw_gb_s`` (NVLink SHARP), ``nic_gb_s``
(what one NIC delivers; a node's rings share its NICs) - and LL/LL128 run at NCCL's protocol factors times
``ll_efficiency``/``ll128_efficiency``. Between nodes a ring runs at the narrower of its NVLink and its node's
NICs (NCCL's tuner reads the intra-node bandwidth for two nodes; the wire does not). A call smaller than its
channels' thresholds runs on fewer channels (NCCL's cut, :func:`~astra_adapter.nccl.tuning.channels_used`),
at that share of the bandwidth; inside a node Ring/LL's cut channels each write one LL line per thread per
step, so its transfer takes their share while its fill stays at LL's full rate (:func:`cut_with_fill`; Tree/LL,
NVLS and LL between nodes: no cut); the pipeline's first ``fill`` microseconds of transfer move at half the
rate, ``fill`` being ``fill_us`` times the call's GPUs per node over 8 (the prior was read on 8; a ring through 4
GPUs of a node fills in fewer steps): a fixed time, not a fixed number of bytes - a connection's FIFO refills
step by step as the receiver frees it (:func:`_with_fill`), so its fill lasts a few steps' round trips whatever
the link's rate, and a slow network fills in fewer bytes than NVLink.

A ring broadcast or reduce is the pipelined chain NCCL runs (:mod:`astra_adapter.nccl.chain`): NCCL's base latency
(back to back, a chain's calls overlap along it), the transfer with the fill above, and a whole FIFO step held on
each network hop of the chain, whatever the protocol - without ``launch_us``: NCCL's tuner has no launch term (its
``baseLat`` is a call's whole fixed cost), and what the all-reduce fit puts into ``launch_us`` beyond NCCL's table
is the synchronising tree's and ring's, which a chain back to back does not pay (ABCI: 4 B broadcast 7.3-7.8 us on
1-16 nodes, Ring/LL's ``baseLat`` 6.6; the all-reduce fits ~10 us of launch).

Alltoall and sendrecv are NCCL send/receive operations, not in the tuner: a rank's bytes to peers in its node
move over its intra-node links while those to other nodes share its node's NICs, at the same fitted rates,
after one Ring/Simple step's latency per batch of peers in flight, their pipeline filling through one hop rather
than a node's ring. Between nodes a peer runs on the channels NCCL gives a network peer, each 14 GB/s of the
NICs' nominal rate (:mod:`astra_adapter.nccl.p2p`): a sendrecv's one neighbour across a node boundary gets
that share of its GPU's NICs. On a PCIe node a GPU's one PCIe link carries both: its peers' bytes inside the
node and those to the NICs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import lru_cache

from genie.core.collective import Collective

from astra_adapter.nccl.chain import STEP_DATA_BYTES, chain_fill_us, chain_latency_us, is_chain, \
    network_hop_us_per_byte, slice_bytes
from astra_adapter.nccl.hardware import Cluster, tuner_system
from astra_adapter.nccl.trees import tree_pattern
from astra_adapter.nccl.p2p import NetPeerPlan, channels_per_net_peer_setting, net_peer_plan, network_batches
from astra_adapter.nccl.versions import DEFAULT_VERSION, constants
from astra_adapter.nccl.tuning import TUNED, HwKind, NcclAlgorithm, NcclChoice, \
    NcclProtocol, TreeLevels, TunerEntry, TunerSystem, call_bandwidth_gb_s, call_latency_us, channels_used, choose, \
    table_entry, tuner_table

P2P = (Collective.ALL_TO_ALL, Collective.SEND_RECV)
MODELLED = TUNED + P2P
_RING, _SIMPLE = 1, 2  # NCCL's indices of Ring and Simple in its latency tables
LAUNCH_US = 1.0  # a call's cost outside NCCL's latency tables (the kernel launch), before fitting
#: the pipeline's fill time of a ring through 8 GPUs of a node before fitting: an empirical prior, read off the
#: DGX H100 sweep's NVLS range as 1 MiB a channel (16 channels, 16.8 MB at NVLS's 267 GB/s all-reduce rate: 63 us)
#: and kept as that time (benchmarks/README.md shows how the held-out errors move with it)
FILL_US = 63.0
#: the release whose cost model times a call, whatever release chose it: NCCL's developers re-measured the same
#: kernels over the releases (ring LL's share of the link went from 1/4-1/3 to 1/2 in 2.21 with the LL line
#: format unchanged: 8 bytes of data and 8 of flags in each 16), so the newest constants are the better clock
TIMING_VERSION = DEFAULT_VERSION


@dataclass(frozen=True)
class NcclParams:
    """The fitted parameters (see the module doc); GB/s are 1e9 bytes per second."""

    intra_busbw_gb_s: float
    nvls_busbw_gb_s: float
    nic_gb_s: float
    latency_scale: float = 1.0
    launch_us: float = LAUNCH_US
    launch_per_gpu_us: float = LAUNCH_US  # a host thread's cost per GPU it launches a call on (see host_bound_us)
    ll_efficiency: float = 1.0
    ll128_efficiency: float = 1.0
    fill_us: float = 0.0

    def values(self) -> tuple[float, ...]:
        return tuple(getattr(self, f.name) for f in fields(self))

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


def nominal_params(cluster: Cluster) -> NcclParams:
    """What the hardware description promises: NCCL's own search result inside a node, the NIC's line rate."""
    one_node = tuner_system(cluster, nodes=1)
    nvls = one_node.nvls_graph_channels * one_node.nvls_bw_gb_s
    return NcclParams(intra_busbw_gb_s=one_node.channels * one_node.bw_intra_gb_s if cluster.gpus_per_node > 1
                      else cluster.nic_gb_s, nvls_busbw_gb_s=nvls, nic_gb_s=cluster.nic_gb_s,
                      fill_us=FILL_US)


@dataclass(frozen=True, order=True)
class Call:
    """One collective call: ``size_bytes`` as nccl-tests counts it (genie.collectives.busbw)."""

    collective: Collective
    ranks: int
    nodes: int
    size_bytes: int
    #: the GPUs one host thread launches the call on in turn (nccl-tests -g N; 1: a process per GPU, as in training)
    gpus_per_thread: int = 1

    @property
    def ranks_per_node(self) -> int:
        return self.ranks // self.nodes


@dataclass(frozen=True)
class Prediction:
    call: Call
    time_us: float
    choice: NcclChoice | None  # None: a send/receive operation
    how: str  # the choice, or how the send/receive operation was timed


@lru_cache(maxsize=65536)
def _plan(cluster: Cluster, call: Call) -> tuple[TunerSystem, NcclChoice, TunerEntry, float, int]:
    """What does not depend on the fitted parameters: the nominal system, NCCL's choice, its table entry, the
    share of the bandwidth the call's channels have and how many channels it runs on."""
    system = tuner_system(cluster, nodes=call.nodes, ranks_per_node=call.ranks_per_node)
    choice, entry = choose(system, call.collective, call.size_bytes, tuner_table(system, call.collective))
    used = channels_used(system, entry.algorithm, entry.protocol, call.size_bytes)
    full = entry.algorithm in (NcclAlgorithm.NVLS, NcclAlgorithm.NVLS_TREE)
    share = 1.0 if full else used / system.comm_channels
    return system, choice, entry, share, used


def fitted_system(nominal: TunerSystem, cluster: Cluster, params: NcclParams) -> TunerSystem:
    """The nominal system with the fitted bandwidths on its channels, timed by NCCL's current cost model
    (:data:`TIMING_VERSION`): an older release's constants decide what it runs, not how long that takes; its
    tree as deep as NCCL builds it (:class:`~astra_adapter.nccl.tuning.TreeLevels`), not as the tuner counts, with
    each node's GPU chain hung on it as the release's search does (:func:`~astra_adapter.nccl.trees.tree_pattern`)."""
    intra = params.intra_busbw_gb_s / nominal.channels
    tree_intra = 0.0
    if nominal.nodes > 1:
        inter = params.nic_gb_s * cluster.nics_reached(nominal.ranks_per_node) / nominal.channels
        if nominal.tree_bw_intra_gb_s > 0:
            # the tree's links inside a node carry what its search raised them to, over the network's share
            tree_intra = min(intra, inter * nominal.tree_bw_intra_gb_s / nominal.bw_inter_gb_s)
        # a ring through nodes of several GPUs crosses NVLink and NICs alike; with one GPU a node, only NICs
        intra = inter = min(intra, inter) if nominal.ranks_per_node > 1 else inter
    else:
        inter = intra
    nvls_bw = params.nvls_busbw_gb_s / nominal.nvls_graph_channels if nominal.nvls_graph_channels else 0.0
    pattern = tree_pattern(nominal.version, nominal.compute_capability, nominal.ranks_per_node, nominal.nodes)
    return replace(nominal, bw_intra_gb_s=intra, bw_inter_gb_s=inter, nvls_bw_gb_s=nvls_bw, version=TIMING_VERSION,
                   tree_levels=TreeLevels.BUILT, tree_bw_intra_gb_s=tree_intra, tree_pattern=pattern)


@lru_cache(maxsize=4096)
def _net_plan(cluster: Cluster, call: Call) -> NetPeerPlan:
    """A send/receive operation's layout across nodes on the nominal system (astra_adapter.nccl.p2p)."""
    system = tuner_system(cluster, nodes=call.nodes, ranks_per_node=call.ranks_per_node)
    setting = channels_per_net_peer_setting(cluster.nccl_env, source=cluster.name)
    return net_peer_plan(system.version, ranks=call.ranks, comm_channels=system.comm_channels,
                         gpu_nics=_gpu_nics(cluster), nic_gb_s=cluster.nic_gb_s, setting=setting)


def _gpu_nics(cluster: Cluster) -> int:
    """The NICs one GPU reaches on its own (NCCL's local NICs): its share of the node's, at least one."""
    return max(1, cluster.nics // max(1, cluster.gpus_per_node))


def net_peer_share(cluster: Cluster, call: Call) -> float:
    """The share of a GPU's NICs a send/receive operation's network peers drive (1 inside a node): a sendrecv's
    one neighbour across a node boundary on its channels; an alltoall's peers on other nodes on the channels of
    their bases, one base per other node's schedule group of 8 (astra_adapter.nccl.p2p)."""
    if call.nodes == 1 or call.collective not in P2P:
        return 1.0
    plan = _net_plan(cluster, call)
    if call.collective is Collective.SEND_RECV:
        return plan.peers_nic_share(1)
    # an alltoall's peers on one other node share a base's channels (astra_adapter.nccl.p2p.network_batches)
    batches = network_batches(tuner_system(cluster, nodes=call.nodes, ranks_per_node=call.ranks_per_node).version,
                              nodes=call.nodes, ranks_per_node=call.ranks_per_node,
                              remote_peers=call.ranks - call.ranks_per_node)
    return plan.channels_nic_share(batches * plan.channels_per_peer)


def _p2p_time_us(cluster: Cluster, params: NcclParams, call: Call) -> tuple[float, str]:
    n, ppn, nodes = call.ranks, call.ranks_per_node, call.nodes
    hw = HwKind.NET if nodes > 1 else cluster.intra_kind
    tables = constants(TIMING_VERSION)
    step = tables.base_lat_us[_RING][_SIMPLE] + tables.hw_lat_us[hw.value][_RING][_SIMPLE]
    intra_gb_s = params.intra_busbw_gb_s
    if nodes == 1:
        plan, batches = None, 1
    else:
        plan = _net_plan(cluster, call)
        # one step's latency per batch of peers: a channel runs its batches one after another
        batches = plan.batches(n - 1 if call.collective is Collective.ALL_TO_ALL else 1)
    latency = params.launch_us + params.latency_scale * step * batches
    if call.collective is Collective.SEND_RECV:
        # rank r sends to r+1: across nodes one GPU of a node sends to the next node, on its own NICs and the
        # channels NCCL gives a network peer; the call waits for that pair
        if plan is not None:
            path_gb_s = params.nic_gb_s * _gpu_nics(cluster) * net_peer_share(cluster, call)
            if ppn > 1:
                path_gb_s = min(path_gb_s, intra_gb_s)
            return (latency + _with_fill(call.size_bytes / (1000.0 * path_gb_s), call, params),
                    f"p2p over the NIC, {plan.channels_per_peer} channel(s) per peer")
        return (latency + _with_fill(call.size_bytes / (1000.0 * intra_gb_s), call, params),
                f"p2p over {cluster.intra_kind.value}")
    nic_share = params.nic_gb_s * cluster.nics_reached(ppn) / ppn if plan is not None else 0.0
    if plan is not None:
        # the remote peers in flight at once, each at its channels' rate
        nic_share = min(nic_share, params.nic_gb_s * _gpu_nics(cluster) * net_peer_share(cluster, call))
    local = call.size_bytes * (ppn - 1) / n
    remote = call.size_bytes * (n - ppn) / n
    through_pcie = local + remote if cluster.intra_kind is HwKind.PCI else local
    t_local = through_pcie / (1000.0 * intra_gb_s) if through_pcie else 0.0
    t_remote = remote / (1000.0 * nic_share) if remote else 0.0
    how = "p2p, the NICs' share" if t_remote > t_local else f"p2p over {cluster.intra_kind.value}"
    if batches > 1:
        how += f", {batches} batches of peers"
    return latency + _with_fill(max(t_local, t_remote), call, params), how


def predict(cluster: Cluster, params: NcclParams, call: Call) -> Prediction:
    """The time of ``call`` (see the module doc)."""
    if call.collective in P2P:
        time_us, how = _p2p_time_us(cluster, params, call)
        return Prediction(call, host_bound_us(params, call, time_us), None, how)
    nominal, choice, entry, share, used = _plan(cluster, call)
    fitted = fitted_system(nominal, cluster, params)
    fitted_entry = table_entry(fitted, call.collective, entry.algorithm, entry.protocol)
    efficiency = {NcclProtocol.LL: params.ll_efficiency, NcclProtocol.LL128: params.ll128_efficiency}.get(
        entry.protocol, 1.0)
    # NCCL's formula (its tree correction and ring plateau included) on the fitted entry, latency scaled
    latency = params.latency_scale * call_latency_us(fitted, call.collective, fitted_entry, call.size_bytes)
    transfer = call.size_bytes / (1000.0 * efficiency * call_bandwidth_gb_s(call.collective, fitted_entry,
                                                                            call.size_bytes))
    moved = cut_with_fill(transfer, share, entry, call, params)
    if is_chain(call.collective, entry.algorithm):
        time_us = _chain_us(fitted, cluster, params, call, entry, moved, used)
    elif entry.algorithm is NcclAlgorithm.TREE and call.nodes > 1:
        time_us = params.launch_us + latency + _tree_us(cluster, params, call, entry, moved, used) \
            + tree_ll_write_us(nominal, fitted_entry, efficiency, call, used)
    else:
        time_us = params.launch_us + latency + moved
    return Prediction(call, host_bound_us(params, call, time_us), choice, choice.describe())


def host_bound_us(params: NcclParams, call: Call, gpu_us: float) -> float:
    """A call one host thread launches on several GPUs in turn (nccl-tests -g N): the thread enqueues each GPU's
    kernel inside one ncclGroupStart/End, and nccl-tests times a loop of such calls queued back to back, so the
    GPUs' work of one call overlaps the host's launches of the next: a call takes the longer of the host's
    ``gpus_per_thread`` x ``launch_per_gpu_us`` and the GPUs' own time (``gpu_us``, its launch included), not
    their sum. One GPU per thread (a process per GPU, as training runs): ``gpu_us``."""
    if call.gpus_per_thread <= 1:
        return gpu_us
    return max(call.gpus_per_thread * params.launch_per_gpu_us, gpu_us)


def _chain_us(fitted: TunerSystem, cluster: Cluster, params: NcclParams, call: Call, entry: TunerEntry,
              moved_us: float, channels: int) -> float:
    """A ring broadcast or reduce (astra_adapter.nccl.chain), its whole time (no ``launch_us``, see the module
    doc): NCCL's base latency, what one rank spends on a call back to back (its tuner's hops, or nRanks steps
    where the channels differ, overlap the next call; the chunks are timed here), the transfer at the chain's
    bandwidth with the general pipeline fill, and the chain's fill between nodes: a slice on every network hop
    but the slowest, for its wire bytes at a channel's share of the NICs' fitted rate."""
    latency = params.latency_scale * chain_latency_us(fitted, entry.protocol)
    if call.size_bytes <= 0:
        return latency + moved_us
    fill = 0.0
    if call.nodes > 1:
        # a network hop holds a slice for the NIC's time on its wire bytes; a hop inside a node in proportion
        nics = cluster.nics_reached(call.ranks_per_node)
        inter = params.nic_gb_s * nics
        intra = params.intra_busbw_gb_s if call.ranks_per_node > 1 else float("inf")
        network = network_hop_us_per_byte(entry.protocol, inter, nics, channels)
        fill = chain_fill_us(entry.protocol, call.size_bytes, channels, call.nodes, network * inter / intra,
                             network)
    return latency + moved_us + fill


def ll_write_us_per_byte(nominal: TunerSystem, fitted_entry: TunerEntry, efficiency: float) -> float:
    """One channel's time per data byte to write an LL slice for the network: the LL entry's fitted bus
    bandwidth (its algorithm bandwidth over NCCL's bus-to-algorithm ratio, 1/2 for a tree: up and down) shared
    by the communicator's channels. NCCL keeps a network connection's LL send buffer in host memory whatever
    GPUDirect allows (src/transport/net.cc, sendProxySetup: every protocol's buffer on the GPU with GDR but LL's;
    2.8 .. 2.29), and its proxy sends a step only once every line of it carries the step's flag (sendProxyProgress),
    so a slice crosses a network hop only after the GPU has written all of it, at LL's rate."""
    return nominal.comm_channels / (2000.0 * efficiency * fitted_entry.algbw_gb_s)


def tree_ll_write_us(nominal: TunerSystem, fitted_entry: TunerEntry, efficiency: float, call: Call,
                     channels: int) -> float:
    """What a Tree/LL call between nodes waits, beyond the wire, for the GPU's writes of its slices into the
    host-memory LL buffers (:func:`ll_write_us_per_byte`): a slice's write on each of the tree's 2 x depth network
    hops but one up and one down, which the transfer counts (it is the call's bytes at LL's bus bandwidth, up and
    down once); none on 2 nodes. 0 for any other call."""
    if fitted_entry.algorithm is not NcclAlgorithm.TREE or fitted_entry.protocol is not NcclProtocol.LL \
            or call.nodes <= 1 or call.size_bytes <= 0:
        return 0.0
    hops = 2 * TreeLevels.BUILT.depth(call.nodes) - 2
    piece = slice_bytes(NcclProtocol.LL, call.size_bytes, channels)
    return hops * piece * ll_write_us_per_byte(nominal, fitted_entry, efficiency)


def _tree_us(cluster: Cluster, params: NcclParams, call: Call, entry: TunerEntry, moved_us: float,
             channels: int) -> float:
    """A tree all-reduce between nodes: a chain up the tree NCCL built and a chain down it
    (:class:`~astra_adapter.nccl.tuning.TreeLevels`: ceil(log2 nodes) levels). Its transfer has the general
    pipeline fill inside a node; between nodes each network hop holds a whole slice, as in a chain
    (:mod:`astra_adapter.nccl.chain`: the proxy sends a step once the GPU has written all of it; a tree's slice is
    one FIFO step, ``sliceSteps`` = 1 for every algorithm but the ring, src/enqueue.cc), on every one of the
    2 x depth network hops but the slowest, which the transfer counts. Tree/LL128 runs smaller chunks
    (:func:`tree_ll128_chunk_bytes`); Tree/Simple a whole 512 KiB step (NCCL 2.20 dropped the depth-based cut of
    2.8 .. 2.19). A Tree/LL slice is held on those hops for the GPU's write of it into the host-memory send
    buffer as well (:func:`tree_ll_write_us`, added by :func:`predict`)."""
    nics = cluster.nics_reached(call.ranks_per_node)
    network = network_hop_us_per_byte(entry.protocol, params.nic_gb_s * nics, nics, channels)
    hops = 2 * TreeLevels.BUILT.depth(call.nodes) - 1
    piece = slice_bytes(entry.protocol, call.size_bytes, channels)
    if entry.protocol is NcclProtocol.LL128:
        piece = min(piece, tree_ll128_chunk_bytes(call.size_bytes, channels, call.nodes, call.ranks_per_node))
    return moved_us + hops * piece * network


def tree_ll128_chunk_bytes(size_bytes: int, channels: int, nodes: int, ranks_per_node: int) -> float:
    """NCCL's chunk of a Tree/LL128 call (src/enqueue.cc, 2.12 .. 2.23; not in 2.8): LL128's step,
    halved while the call has fewer than 64 x its tree steps / ppn chunks a channel (not below 128 KiB), then
    16 x (not below 32 KiB); its tree steps 1 + log2i(nodes) + ppn / 10."""
    chunk = STEP_DATA_BYTES[NcclProtocol.LL128]
    steps = 1 + (nodes.bit_length() - 1) + 0.1 * ranks_per_node
    while size_bytes / (channels * chunk) < steps * 64 / ranks_per_node and chunk > 131072:
        chunk //= 2
    while size_bytes / (channels * chunk) < steps * 16 / ranks_per_node and chunk > 32768:
        chunk //= 2
    return float(chunk)


def cut_with_fill(transfer_us: float, share: float, entry: TunerEntry, call: Call, params: NcclParams) -> float:
    """A call's transfer (``transfer_us`` on all its communicator's channels) on the ``share`` of them NCCL runs
    it on, with the pipeline's fill (:func:`_with_fill`).

    Ring/LL inside a node: NCCL cuts a small call's channels while it has fewer than 8 B x nRanks per thread
    (src/enqueue.cc with the ring LL threshold of src/graph/tuning.cc), so each channel it keeps writes about one
    LL line per thread per ring step into the next GPU whatever the size: the transfer takes the kept channels'
    share of LL's rate (8 A100s measured 36 us at 32 KiB on one channel, 40-48 us at 64-256 KiB on 2-8, where
    LL's full rate gives 22-30), while the fill - the call's own bytes through the pipeline - stays at LL's
    full rate, as NCCL's tuner times it. Not cut: Tree/LL (its threshold has no nRanks: its channels are cut
    only below a few KiB), NVLS, and LL between nodes, whose steps the network proxy forwards (their time is
    the network's per step, not the lines a channel writes; the corpus's multi-node sweeps fit no better with
    the cut, see docs/nccl-model.md)."""
    if entry.protocol is NcclProtocol.LL:
        fill_us = _with_fill(transfer_us, call, params) - transfer_us
        cut = entry.algorithm is NcclAlgorithm.RING and call.nodes == 1
        return (transfer_us / share if cut else transfer_us) + fill_us
    return _with_fill(transfer_us / share, call, params)


def _with_fill(transfer_us: float, call: Call, params: NcclParams) -> float:
    """The transfer with the pipeline's fill and drain: its first ``fill_us`` x hops / 8 microseconds move at half
    the rate (all of a shorter transfer). A ring's pipeline fills through the GPUs of a node (hops: the call's GPUs
    per node; the prior was read on 8), a send/receive operation's through one hop, sender to receiver: NCCL runs
    each peer's bytes on its own connection, not through a ring (src/enqueue.cc, addP2pToPlan).

    A time, not a number of bytes: a connection's FIFO has ``NCCL_STEPS`` = 8 slots, and a sender reuses a slot
    only once the receiver has consumed its step and posted its head back (2.8.4:
    src/collectives/device/primitives.h; 2.23.4, 2.29.2: src/device/prims_simple.h), so the first steps of a
    call run at the pace of that round trip, not of the link, for a time that does not grow with the link's
    rate: the same fill holds fewer bytes on a 10 GB/s network than on 300 GB/s of NVLink (the bytes form, a
    fixed count a channel, charged ABCI's InfiniBand A100 nodes 8 MiB at half rate; see docs/nccl-model.md)."""

    if call.size_bytes <= 0:
        return transfer_us
    hops = 1 if call.collective in P2P else call.ranks_per_node
    return transfer_us + min(transfer_us, params.fill_us * hops / 8)


def fill_factor(transfer_us: float, call: Call, params: NcclParams) -> float:
    """What the pipeline's fill multiplies a transfer of ``transfer_us`` by (:func:`_with_fill`; 1 for none)."""
    return _with_fill(transfer_us, call, params) / transfer_us if transfer_us > 0 else 1.0
