"""NCCL's tuner, as a cost model (pure): which algorithm and protocol NCCL picks for a collective of a size, with
how many channels, and the time its own model gives.

The constants and rules are facts carried over from NCCL's ``src/graph/tuning.cc`` and ``src/enqueue.cc``: 2.23's
by default, and per release where the system names one (:mod:`astra_adapter.nccl.versions`; docs/nccl-model.md
lists them with their history); the code is genie's. In NCCL's model an (algorithm,
protocol) pair has a latency and an algorithm bandwidth; the time of ``n`` bytes is
``latency + n / (1000 x bandwidth)`` us (GB/s), and the tuner takes the pair with the smallest time, ties to the
lower algorithm, then the lower protocol (Tree < Ring < CollNetDirect < CollNetChain < NVLS < NVLSTree < PAT;
LL < LL128 < Simple). The bandwidth comes from the topology search's graph for the algorithm (channels x
bandwidth per channel, intra-node or inter-node), refined per protocol (LL carries half its bytes as flags, LL128
~15/16, per-channel caps per GPU generation), and converted from bus to algorithm bandwidth. The latency is a
base per (algorithm, protocol) plus per-step hardware latencies (NVLink, PCI or network) times the algorithm's
steps. Send/receive-based operations (alltoall, sendrecv) are not in the tuner: :mod:`astra_adapter.nccl.model`
times them.

A :class:`TunerSystem` is what NCCL's topology search would find on a cluster (nodes, ranks per node, the GPU's
compute capability, the intra-node link, channels and their bandwidths, NVLS and CollNet support); it comes from
a topology and the GPUs' names (:mod:`astra_adapter.nccl.hardware`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from genie.core.collective import Collective

from astra_adapter.nccl.trees import TreePattern, tree_way_us
from astra_adapter.nccl.versions import DEFAULT_VERSION, NcclVersion, TunerConstants, constants


class NcclAlgorithm(Enum):
    """NCCL's algorithms, in its order (the tuner's tie-break), by the names NCCL prints."""

    TREE = "Tree"
    RING = "Ring"
    COLLNET_DIRECT = "CollNetDirect"
    COLLNET_CHAIN = "CollNetChain"
    NVLS = "NVLS"
    NVLS_TREE = "NVLSTree"
    PAT = "PAT"


class NcclProtocol(Enum):
    LL = "LL"
    LL128 = "LL128"
    SIMPLE = "Simple"


@dataclass(frozen=True)
class NcclEnv:
    """What the environment lets NCCL's tuner choose. ``algorithms``: per collective (None: every collective)
    the algorithms allowed; ``protocols``: the protocols allowed (None: all); ``nvls``: False when
    ``NCCL_NVLS_ENABLE=0`` (parsed by ``astra_adapter.nccl.env``)."""

    algorithms: tuple[tuple[Collective | None, frozenset[NcclAlgorithm]], ...] = ()
    protocols: frozenset[NcclProtocol] | None = None
    nvls: bool = True

    def allows(self, collective: Collective, algorithm: NcclAlgorithm, protocol: NcclProtocol) -> bool:
        if self.protocols is not None and protocol not in self.protocols:
            return False
        if not self.nvls and algorithm in (NcclAlgorithm.NVLS, NcclAlgorithm.NVLS_TREE):
            return False
        scoped = dict(self.algorithms)
        allowed = scoped.get(collective, scoped.get(None))
        return allowed is None or algorithm in allowed


class HwKind(Enum):
    """The hardware a step crosses in NCCL's latency tables."""

    NVLINK = "nvlink"
    PCI = "pci"
    NET = "net"


ALGORITHMS = tuple(NcclAlgorithm)
PROTOCOLS = tuple(NcclProtocol)
_A = {a: i for i, a in enumerate(ALGORITHMS)}
_P = {p: i for i, p in enumerate(PROTOCOLS)}

#: the collectives NCCL's tuner times (the others are send/receive based)
TUNED = (Collective.BROADCAST, Collective.REDUCE, Collective.ALL_GATHER, Collective.REDUCE_SCATTER,
         Collective.ALL_REDUCE)

# ---- NCCL 2.23's constants (src/graph/tuning.cc), [algorithm][protocol] in the orders above, us; other releases:
# astra_adapter.nccl.versions
_DEFAULT = constants(DEFAULT_VERSION)
BASE_LAT_US = _DEFAULT.base_lat_us
HW_LAT_US = {kind: _DEFAULT.hw_lat_us[kind.value] for kind in HwKind}
# ncclTopoGetAlgoTime's tree correction, [protocol][floor(log2(bytes / 64))] for 64 B .. 256 MiB
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
)
# threads and per-thread byte thresholds below which a call runs on fewer channels (src/include/device.h, comm.h)
MAX_THREADS = {NcclProtocol.LL: 512, NcclProtocol.LL128: 640, NcclProtocol.SIMPLE: 512}
THREAD_THRESHOLD = {NcclProtocol.LL: 8, NcclProtocol.LL128: 8, NcclProtocol.SIMPLE: 64}
PCI_BW_GB_S = 12.0  # NCCL's PCI_BW: a ring slower than this runs Simple on 256 threads
MAX_CHANNELS = 32
NET_OVERHEAD_US = {False: 1.0, True: 2.0}  # per inter-node ring step: x86 Intel (or other) / AMD


class TreeLevels(Enum):
    """The depth of NCCL's inter-node tree over ``nodes`` nodes. NCCL's tuner counts log2i(nodes) levels (the
    floor, src/graph/tuning.cc); the double binary tree NCCL builds (src/graph/trees.cc, ncclGetBtree: rank 0 is
    the root with a single child at the highest power of two below the node count, each level halving the bit)
    is ceil(log2(nodes)) deep: 10 levels on 540 nodes where the tuner counts 9. The choice is the tuner's; the
    time of the call runs through the tree NCCL built."""

    TUNER = "tuner"
    BUILT = "built"

    def depth(self, nodes: int) -> int:
        if nodes <= 1:
            return 0
        return _log2i(nodes) if self is TreeLevels.TUNER else (nodes - 1).bit_length()


@dataclass(frozen=True)
class TunerSystem:
    """What NCCL's topology search finds on a cluster, as its tuner reads it.

    ``channels`` and ``bw_intra_gb_s``/``bw_inter_gb_s`` are the ring/tree graph's channel count and bandwidth
    per channel inside a node and between nodes; ``comm_channels`` the communicator's channels after NCCL
    duplicates them (what small calls are cut down from); ``nvls_channels`` NVLS's. ``gpu_direct`` says the
    NIC path allows LL128 (NCCL: the graph's inter-node path no farther than PXB, or PXN on Hopper)."""

    nodes: int
    ranks_per_node: int
    compute_capability: int
    intra: HwKind
    channels: int
    bw_intra_gb_s: float
    bw_inter_gb_s: float
    comm_channels: int
    nvls: bool = False
    nvls_channels: int = 16
    nvls_graph_channels: int = 0
    nvls_bw_gb_s: float = 0.0
    collnet: bool = False
    amd_cpu: bool = False
    gpu_direct: bool = True
    #: the ring graph's channels keep one GPU order (NCCL's sameChannels; astra_adapter.nccl.chain)
    same_channels: bool = True
    #: the tree graph's bandwidth per channel inside a node where its search raised it above the network's
    #: (2 nodes: NCCL's tuner reads it, astra_adapter.nccl.hardware.tree_intra_speed); 0: the ring graph's
    tree_bw_intra_gb_s: float = 0.0
    version: NcclVersion = DEFAULT_VERSION
    env: NcclEnv = NcclEnv()
    #: how deep the inter-node tree is taken: as NCCL's tuner counts it (what it picks by), or as NCCL builds it
    #: (what a call then takes)
    tree_levels: TreeLevels = TreeLevels.TUNER
    #: how the built tree enters a node (:func:`tree_pattern`, of the release that built it); timing only
    tree_pattern: TreePattern = TreePattern.TREE

    @property
    def constants(self) -> TunerConstants:
        """The tuner's constants in the system's NCCL release."""
        return constants(self.version)

    @property
    def ranks(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def generation(self) -> int:
        """NCCL's compCapIndex: 0 Volta, 1 Ampere, 2 Hopper, 3 Blackwell (as the release reads it)."""
        return self.constants.generation(self.compute_capability)

    @property
    def node_index(self) -> int:
        return min(self.nodes, 3) - 1


@dataclass(frozen=True)
class TunerEntry:
    """One (algorithm, protocol) of NCCL's tables for a collective: algorithm bandwidth (GB/s) and latency (us)."""

    algorithm: NcclAlgorithm
    protocol: NcclProtocol
    algbw_gb_s: float
    latency_us: float


@dataclass(frozen=True)
class NcclChoice:
    """What NCCL runs for one call: algorithm, protocol, channels (after the small-call cut) and the time of
    NCCL's own model (us)."""

    algorithm: NcclAlgorithm
    protocol: NcclProtocol
    channels: int
    tuner_us: float

    def describe(self) -> str:
        return f"{self.algorithm.value}/{self.protocol.value} x{self.channels}ch"


def steps(collective: Collective, ranks: int) -> int:
    """The ring's steps: 2(n-1) for all-reduce, n-1 for all-gather and reduce-scatter, n otherwise."""
    if collective is Collective.ALL_REDUCE:
        return 2 * (ranks - 1)
    if collective in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER):
        return ranks - 1
    return ranks


def inter_steps(collective: Collective, nodes: int, version: NcclVersion = DEFAULT_VERSION) -> int:
    """The ring's steps at network latency: 2(nodes-1) for all-reduce (2 x nodes in NCCL 2.12 .. 2.22), nodes-1
    otherwise."""
    if nodes == 1:
        return 0
    if collective is Collective.ALL_REDUCE:
        return 2 * nodes if constants(version).ar_inter_steps_2n else 2 * (nodes - 1)
    return nodes - 1


def _log2i(n: int) -> int:
    return n.bit_length() - 1 if n > 0 else -1


def enabled(system: TunerSystem, collective: Collective, algorithm: NcclAlgorithm, protocol: NcclProtocol) -> bool:
    """NCCL's skip rules and default enable masks, then what the environment allows (NCCL_ALGO, NCCL_PROTO,
    NCCL_NVLS_ENABLE)."""
    if not system.env.allows(collective, algorithm, protocol):
        return False
    a = algorithm
    c = system.constants
    if (a is NcclAlgorithm.NVLS and not c.has_nvls) or (a is NcclAlgorithm.NVLS_TREE and not c.has_nvls_tree) \
            or (a is NcclAlgorithm.PAT and not c.has_pat):
        return False  # not in this release
    if collective in (Collective.BROADCAST, Collective.REDUCE) and a is not NcclAlgorithm.RING:
        return False
    if collective in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER) and a not in (
            NcclAlgorithm.RING, NcclAlgorithm.PAT, NcclAlgorithm.NVLS, NcclAlgorithm.COLLNET_DIRECT):
        return False
    if collective is Collective.ALL_REDUCE and a is NcclAlgorithm.PAT:
        return False
    if a in (NcclAlgorithm.NVLS, NcclAlgorithm.NVLS_TREE, NcclAlgorithm.PAT, NcclAlgorithm.COLLNET_DIRECT,
             NcclAlgorithm.COLLNET_CHAIN) and protocol is not NcclProtocol.SIMPLE:
        return False
    if a is NcclAlgorithm.PAT and not (system.ranks_per_node == 1 and system.nodes > 1):
        return False  # ncclPatEnable: one GPU per node
    if a in (NcclAlgorithm.NVLS, NcclAlgorithm.NVLS_TREE):
        if not system.nvls or (a is NcclAlgorithm.NVLS_TREE and system.nodes == 1):
            return False
        if a is NcclAlgorithm.NVLS and system.nodes > 1 and (
                not system.collnet or collective is not Collective.ALL_REDUCE):
            return False
    if a in (NcclAlgorithm.COLLNET_DIRECT, NcclAlgorithm.COLLNET_CHAIN) and not system.collnet:
        return False
    if protocol is NcclProtocol.LL128:
        if not (system.intra is HwKind.NVLINK and c.ll128_arch_enabled(system.compute_capability)
                and (system.nodes == 1 or system.gpu_direct)):
            return False
    return True


def _busbw(system: TunerSystem, collective: Collective, a: NcclAlgorithm, p: NcclProtocol) -> float:
    s = system
    c = s.constants
    g, ni = s.generation, s.node_index
    ppn = s.ranks_per_node
    collnet = a in (NcclAlgorithm.COLLNET_DIRECT, NcclAlgorithm.COLLNET_CHAIN)
    bw = s.bw_intra_gb_s if (s.nodes <= 2 or collnet) else s.bw_inter_gb_s
    if a is NcclAlgorithm.TREE and s.nodes <= 2 and s.tree_bw_intra_gb_s > 0:
        bw = s.tree_bw_intra_gb_s
    channels = s.channels
    if a in (NcclAlgorithm.NVLS, NcclAlgorithm.NVLS_TREE):  # NVLS's own graph: its channels, its speed
        channels = s.nvls_graph_channels
        inter = s.bw_inter_gb_s if a is NcclAlgorithm.NVLS or s.nodes <= 2 else s.bw_inter_gb_s / 2
        bw = s.nvls_bw_gb_s if s.nodes == 1 else min(s.nvls_bw_gb_s, inter)
    busbw = channels * bw
    if c.a100_cap_gb_s is not None and s.compute_capability == 80:
        busbw = min(busbw, c.a100_cap_gb_s)
    ll_max = c.ll_max_bws[g if s.nodes == 1 else (1 if s.amd_cpu else 0)][ni]
    if a is NcclAlgorithm.RING and p is NcclProtocol.LL:
        if c.ring_ll_half:
            share = 0.5
        else:
            share = 0.25 if (s.nodes > 1 or collective in (Collective.ALL_REDUCE, Collective.REDUCE)) else 1 / 3
        busbw = min(ll_max, busbw * share)
    if a is NcclAlgorithm.RING and p is NcclProtocol.LL128:
        busbw = min(busbw * (c.ring_ll128_one_gpu_factor if ppn < 2 else 0.92),
                    s.channels * c.ll128_cap_per_channel(collective, c.per_ch_max_ring_ll128_bws, g, ni))
    if a is NcclAlgorithm.TREE and collective is Collective.ALL_REDUCE:
        busbw = min(busbw * 0.92, s.channels * c.per_ch_max_tree_bws[g][ni])
    if a is NcclAlgorithm.TREE and p is NcclProtocol.LL:
        busbw = min(busbw / 3.8, ll_max)
    if a is NcclAlgorithm.TREE and p is NcclProtocol.LL128:
        busbw = min(busbw * (7.0 / 9.0 if s.nodes == 1 else c.tree_ll128_inter_factor),
                    s.channels * c.ll128_cap_per_channel(collective, c.per_ch_max_tree_ll128_bws, g, ni))
    if a is NcclAlgorithm.PAT:
        busbw *= c.pat_factor
    if a is NcclAlgorithm.COLLNET_DIRECT:
        if collective in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER):
            w = (ppn - 1) / 7
            busbw = ppn * bw * (w * 0.85 + (1 - w) * 0.95)
        else:
            factor = ppn / s.channels
            factor -= (factor - 1) / 2
            busbw /= factor
            if s.compute_capability >= 90:
                busbw *= 0.85
    return busbw


def _ratio(collective: Collective, a: NcclAlgorithm, ranks: int) -> float:
    """Bus bandwidth to algorithm bandwidth (1: none, for the non-ring all-gather and reduce-scatter)."""
    if a is not NcclAlgorithm.RING and collective in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER):
        return 1.0
    if a is NcclAlgorithm.RING:
        return ranks / steps(collective, ranks)
    if a in (NcclAlgorithm.NVLS, NcclAlgorithm.NVLS_TREE):
        return 5.0 / 6.0
    return 0.5


def _latency(system: TunerSystem, collective: Collective, a: NcclAlgorithm, p: NcclProtocol) -> float:
    s = system
    c = s.constants
    ai, pi = _A[a], _P[p]
    hw_lat = c.hw_lat_us
    intra_lat = hw_lat[s.intra.value][ai][pi]
    tree_net = s.ranks_per_node == 1 and c.one_gpu_net_lat_from_tree
    inter_lat = hw_lat["net"][_A[NcclAlgorithm.TREE] if tree_net else ai][pi]
    lat = c.base_lat_us[ai][pi]
    n, nodes, ppn = s.ranks, s.nodes, s.ranks_per_node
    if nodes > 1 and p is NcclProtocol.LL:
        intra_lat *= c.multinode_ll_intra_factor
    hw = s.intra if nodes == 1 else HwKind.NET
    if a is NcclAlgorithm.RING:
        if collective in (Collective.BROADCAST, Collective.REDUCE):
            if s.same_channels:
                return lat + hw_lat[hw.value][ai][pi]
            # nsteps = nRanks steps, Simple's at the tree's latency (NCCL's stand-in for its chunks)
            step = hw_lat[hw.value][_A[NcclAlgorithm.TREE] if p is NcclProtocol.SIMPLE else ai][pi]
            return lat + n * step
        overhead = 0.0 if nodes == 1 or not c.ring_net_overhead else NET_OVERHEAD_US[s.amd_cpu] * (3 if p is NcclProtocol.SIMPLE else 1)
        intra_lat = max(intra_lat, overhead)
        k, ki = steps(collective, n), inter_steps(collective, nodes, s.version)
        return lat + (k - ki) * intra_lat + ki * inter_lat
    if a is NcclAlgorithm.TREE:
        if s.tree_levels is TreeLevels.BUILT:
            way = tree_way_us(nodes, intra_lat, inter_lat, s.tree_pattern)
            return lat + 2 * ((ppn - 1) * intra_lat + way)
        return lat + 2 * ((ppn - 1) * intra_lat + s.tree_levels.depth(nodes) * inter_lat)
    if a is NcclAlgorithm.COLLNET_DIRECT:
        return lat + 2 * (min(1, ppn - 1) * intra_lat + (ppn - 1) * 0.4) + inter_lat
    if a is NcclAlgorithm.COLLNET_CHAIN:
        return lat + 2 * (ppn - 1) * intra_lat + inter_lat
    if a is NcclAlgorithm.NVLS:
        return intra_lat + (inter_lat if nodes > 1 else 0.0)
    if a is NcclAlgorithm.NVLS_TREE:
        return lat + intra_lat + 2 * s.tree_levels.depth(nodes) * inter_lat
    return 8 + _log2i(nodes) * (inter_lat / 3.5) + n * 2.8  # PAT


def table_entry(system: TunerSystem, collective: Collective, algorithm: NcclAlgorithm,
                protocol: NcclProtocol) -> TunerEntry:
    """NCCL's algorithm bandwidth and latency of one (algorithm, protocol) for ``collective`` (not checked for
    being enabled)."""
    algbw = _busbw(system, collective, algorithm, protocol) * _ratio(collective, algorithm, system.ranks)
    return TunerEntry(algorithm, protocol, algbw, _latency(system, collective, algorithm, protocol))


def tuner_table(system: TunerSystem, collective: Collective) -> tuple[TunerEntry, ...]:
    """NCCL's bandwidth and latency for every (algorithm, protocol) it would consider for ``collective``."""
    if collective not in TUNED:
        raise ValueError(f"NCCL's tuner does not time {collective.value}")
    entries = (table_entry(system, collective, a, p) for a in ALGORITHMS for p in PROTOCOLS
               if enabled(system, collective, a, p))
    return tuple(e for e in entries if e.algbw_gb_s > 0)


def call_latency_us(system: TunerSystem, collective: Collective, entry: TunerEntry, size_bytes: int) -> float:
    """The latency term of ncclTopoGetAlgoTime: the entry's, times the ring's "plateau" factor where it applies
    (the release's threshold and factor)."""
    c = system.constants
    if (entry.algorithm is NcclAlgorithm.RING and entry.protocol is NcclProtocol.SIMPLE and system.nodes > 1
            and collective is Collective.ALL_REDUCE
            and (size_bytes >= system.ranks / 16.0 * 65536 if c.plateau_by_ranks
                 else size_bytes // (system.comm_channels * system.ranks) >= 64)):
        return entry.latency_us * c.plateau_factor(system.compute_capability)
    return entry.latency_us


def call_bandwidth_gb_s(collective: Collective, entry: TunerEntry, size_bytes: int) -> float:
    """The bandwidth term of ncclTopoGetAlgoTime: the entry's, with the tree correction where it applies."""
    log_size = _log2i(size_bytes >> 6)
    if entry.algorithm is NcclAlgorithm.TREE and collective is Collective.ALL_REDUCE and 0 <= log_size < 23:
        return entry.algbw_gb_s * TREE_CORRECTION[_P[entry.protocol]][log_size]
    return entry.algbw_gb_s


def tuner_time_us(system: TunerSystem, collective: Collective, entry: TunerEntry, size_bytes: int) -> float:
    """ncclTopoGetAlgoTime for one call (no aggregation)."""
    return (call_latency_us(system, collective, entry, size_bytes)
            + size_bytes / (1000.0 * call_bandwidth_gb_s(collective, entry, size_bytes)))


def channels_used(system: TunerSystem, algorithm: NcclAlgorithm, protocol: NcclProtocol, size_bytes: int) -> int:
    """The channels a call of ``size_bytes`` runs on: NCCL cuts a small call's channels until each thread has
    its threshold of bytes (NVLS: its own fixed count)."""
    if algorithm in (NcclAlgorithm.NVLS, NcclAlgorithm.NVLS_TREE):
        return system.nvls_channels
    nc = system.comm_channels
    nt = MAX_THREADS[protocol]
    if protocol is NcclProtocol.SIMPLE and algorithm is NcclAlgorithm.RING and \
            system.bw_intra_gb_s * system.channels <= PCI_BW_GB_S:
        nt = 256
    threshold = THREAD_THRESHOLD[protocol] * (system.ranks if (algorithm is NcclAlgorithm.RING
                                                              and protocol is NcclProtocol.LL) else 1)
    while size_bytes < nc * nt * threshold and nc >= 2:
        nc -= 1
    return nc


def choose(system: TunerSystem, collective: Collective, size_bytes: int,
           table: tuple[TunerEntry, ...] | None = None) -> tuple[NcclChoice, TunerEntry]:
    """The (algorithm, protocol) NCCL's tuner picks for one call of ``size_bytes`` (its ``nBytes``: the whole
    buffer; for all-gather and reduce-scatter the gathered one), and the table entry it came from."""
    entries = table if table is not None else tuner_table(system, collective)
    if not entries:
        raise ValueError(f"no NCCL algorithm for {collective.value} on this system")
    best = min(entries, key=lambda e: (tuner_time_us(system, collective, e, size_bytes), _A[e.algorithm],
                                       _P[e.protocol]))
    return (NcclChoice(best.algorithm, best.protocol, channels_used(system, best.algorithm, best.protocol,
                                                                    size_bytes),
                       tuner_time_us(system, collective, best, size_bytes)), best)
