"""A GPU cluster as NCCL sees it (pure): a genie topology with multi-GPU ``nodes`` plus what the topology file
does not say (the GPU model, whether the node's GPUs meet on NVSwitches, NVLink bridges or PCIe), and the
graph NCCL's topology search would find on it - the :class:`~astra_adapter.nccl.tuning.TunerSystem` its tuner
reads.

The search is followed in its outline (docs/nccl-model.md, NCCL 2.23 ``src/graph/search.cc``): a channel
carries ``speed`` GB/s on every link it crosses; speeds are tried from NCCL's per-generation arrays, the first that
fits the GPU's link (one node) or its NIC (several nodes), then slower ones while they are at least half of it,
keeping the most channels x speed; a fast result is split into twice the channels at half the speed; the
communicator runs twice the graph's channels. NVLS's graph has a channel per GPU at the speed its NVSwitch link
holds with the head GPU's double load.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from enum import Enum

from genie.collectives.tuner import RING_MAX_CHANNELS as _RING_MAX_CHANNELS, SPEEDS_INTER_GBPS as _SPEEDS_INTER
from genie.collectives.tuner import search_channels as _search  # one rule: NCCL's ring search
from genie.core.errors import InputError, parse_enum_value
from genie.core.topology import LinkRole, Topology

from astra_adapter.nccl.chain import same_channels
from astra_adapter.nccl.env import parse_env
from astra_adapter.nccl.tuning import MAX_CHANNELS, HwKind, TunerSystem
from astra_adapter.nccl.versions import default_version, parse_version


class Interconnect(Enum):
    """How the GPUs of one node reach each other."""

    NVSWITCH = "nvswitch"  # NVLink through NVSwitches (DGX/HGX): NVLS on Hopper and later
    NVLINK = "nvlink"  # NVLink point to point or bridges, no NVSwitch
    PCIE = "pcie"  # PCIe (and the CPUs' links) only

    @classmethod
    def parse(cls, text: str, *, source: str | None = None, path: str | None = None) -> "Interconnect":
        return parse_enum_value(cls, text, "interconnect", source=source, path=path)


class NicPath(Enum):
    """The PCIe path from a node's GPU to its nearest NIC, in the words of ``nvidia-smi topo -m`` (nearest
    first). NCCL's topology search settles on the nearest path type that carries its graph (``typeInter``), and
    its tuner enables LL128 between nodes only where that is no farther than PXB (src/graph/tuning.cc, every
    release since 2.8; Hopper's PXN, a hop through a peer GPU's NVLink to a PXB NIC, counts as PXB here)."""

    PIX = "pix"  # at most one PCIe bridge
    PXB = "pxb"  # several PCIe bridges, no host bridge (a PCIe switch shared by GPU and NIC)
    PHB = "phb"  # through the CPU's PCIe host bridge
    NODE = "node"  # between host bridges of one NUMA node
    SYS = "sys"  # across the CPUs' SMP interconnect

    @property
    def ll128_between_nodes(self) -> bool:
        return self in (NicPath.PIX, NicPath.PXB)

    @classmethod
    def parse(cls, text: str, *, source: str | None = None, path: str | None = None) -> "NicPath":
        return parse_enum_value(cls, text, "GPU-NIC path", source=source, path=path,
                                note=", as nvidia-smi topo -m prints it")


class CpuVendor(Enum):
    """The node's CPU vendor: NCCL's tuner charges an inter-node ring step 2 us of network overhead on AMD CPUs,
    1 us on others, and caps LL's bandwidth between nodes per vendor (src/graph/tuning.cc)."""

    INTEL = "intel"
    AMD = "amd"
    ARM = "arm"

    @classmethod
    def parse(cls, text: str, *, source: str | None = None, path: str | None = None) -> "CpuVendor":
        return parse_enum_value(cls, text, "CPU vendor", source=source, path=path)


#: GPU names (as nccl-tests' `# Using devices` lines print them) -> CUDA compute capability; first match wins
_GPU_CC = (("GB200", 100), ("B200", 100), ("B100", 100), ("RTX PRO 6000", 120), ("RTX 6000D", 120),
           ("RTX 50", 120), ("5090", 120), ("GH200", 90), ("H200", 90), ("H100", 90), ("H800", 90),
           ("H20", 90), ("L40", 89), ("L4", 89), ("RTX 40", 89), ("4090", 89), ("4080", 89), ("ADA", 89),
           ("A100", 80), ("A800", 80), ("A30", 80), ("A40", 86), ("A10", 86), ("A6000", 86), ("RTX 30", 86),
           ("3090", 86), ("3080", 86), ("3070", 86), ("3060", 86), ("A16", 86), ("A2", 86), ("V100", 70),
           ("TITAN V", 70), ("T4", 75), ("RTX 20", 75), ("2080", 75), ("P100", 60))

# NCCL's per-channel speed candidates (GB/s): one node / with a network (the tuner's: _SPEEDS_INTER);
# Hopper and later have their own
_SPEEDS_INTRA = (40, 30, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3)
_SM90_SPEEDS_INTRA = (60, 50, 40, 30, 24, 20, 15, 12, 11, 6, 3)
_SM90_SPEEDS_INTER = (48, 45, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12)


def compute_capability(gpu: str) -> int | None:
    """The compute capability of a GPU named as NVIDIA names it ("NVIDIA H100 80GB HBM3"); None if unknown."""
    text = gpu.upper()
    for key, cc in _GPU_CC:
        if key in text:
            return cc
    return None


@dataclass(frozen=True)
class Cluster:
    """The hardware the NCCL model runs on: nodes of ``gpus_per_node`` GPUs; per GPU the intra-node link's rate
    (GB/s, one direction); per node ``nics`` NICs of ``nic_gb_s`` each. The fabric beyond the rails is taken as
    non-blocking (not fitted: no case of the corpus crosses an oversubscribed spine). ``nccl_version``: the NCCL
    release the outputs name ("2.26.2"; "" if they do not: modelled as NCCL 2.23). ``nccl_env``: the NCCL_*
    settings NCCL ran with, as (variable, value) pairs. ``nic_path`` and ``cpu``: what ``nvidia-smi topo -m`` and
    the node's CPU say (a DGX/HGX's GPUs share PCIe switches with their NICs: PXB; Intel)."""

    name: str
    nodes: int
    gpus_per_node: int
    gpu: str
    compute_capability: int
    interconnect: Interconnect
    intra_gb_s: float
    intra_delay_us: float
    nics: int
    nic_gb_s: float
    nic_delay_us: float
    nccl_version: str = ""
    #: NCCL variables the outputs print (NCCL_DEBUG=INFO) or the user gives; see astra_adapter.nccl.env
    nccl_env: tuple[tuple[str, str], ...] = ()
    #: the PCIe path from a GPU to its nearest NIC (LL128 between nodes only up to PXB) and the CPU vendor
    nic_path: NicPath = NicPath.PXB
    cpu: CpuVendor = CpuVendor.INTEL

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node

    def nics_reached(self, ranks_per_node: int) -> int:
        """The NICs a communicator with ``ranks_per_node`` GPUs on each node reaches: its GPUs' share of the
        node's NICs (one GPU of a rail-optimized node has its own NIC, not the node's eight), at least one."""
        return max(1, min(self.nics, round(self.nics * ranks_per_node / self.gpus_per_node)))

    @property
    def intra_kind(self) -> HwKind:
        return HwKind.PCI if self.interconnect is Interconnect.PCIE else HwKind.NVLINK

    def scaled(self, nodes: int) -> "Cluster":
        return replace(self, nodes=nodes)


def node_of_hosts(topology: Topology) -> dict[str, str]:
    """Each GPU host of a multi-GPU node -> its node's switch (the far end of its ``intra_node`` link)."""
    hosts = {h.name for h in topology.hosts}
    return {(link.a if link.a in hosts else link.b): (link.b if link.a in hosts else link.a)
            for link in topology.links if link.role is LinkRole.INTRA_NODE}


def cluster_from_topology(topology: Topology, *, gpu: str, interconnect: Interconnect, source: str) -> Cluster:
    """The cluster a topology file describes: its multi-GPU nodes (every GPU host with an ``intra_node`` link to
    its node's switch) and their NICs (network links of the node's GPUs or switch); a topology of plain hosts is
    nodes of one GPU whose links are their NICs."""
    cc = compute_capability(gpu)
    if cc is None:
        raise InputError(f"unknown GPU {gpu!r}: name an NVIDIA data-center or RTX GPU (H100, A100, ...)",
                         path="gpu")
    node_of = node_of_hosts(topology)
    intra = [link for link in topology.links if link.role is LinkRole.INTRA_NODE]
    intra_rates = [link.shape.rate_bps for link in intra if link.shape.rate_bps]
    intra_delays = [link.shape.delay_us for link in intra]
    nodes = Counter(node_of.values())
    if not nodes:
        # plain hosts: every host is a node of one GPU, its links are its NICs
        per_host = Counter()
        nic_rates, nic_delays = [], []
        hosts = {h.name for h in topology.hosts}
        for link in topology.links:
            for end in link.endpoints:
                if end in hosts:
                    per_host[end] += 1
                    if link.shape.rate_bps:
                        nic_rates.append(link.shape.rate_bps)
                    nic_delays.append(link.shape.delay_us)
        if not nic_rates:
            raise InputError("the topology's links have no bandwidth: give its NICs a rate", source=source,
                             path="links")
        return Cluster(topology.name, len(hosts), 1, gpu, cc, interconnect, 0.0, 0.0,
                       max(per_host.values(), default=1), min(nic_rates) / 8e9, 0.0 if not nic_delays else
                       min(nic_delays))
    sizes = set(nodes.values())
    if len(sizes) != 1:
        raise InputError(f"the NCCL model needs nodes of one size; this topology has nodes of "
                         f"{', '.join(map(str, sorted(sizes)))} GPUs", source=source, path="nodes")
    if not intra_rates:
        raise InputError("the nodes' intra-node links (nvlink) have no bandwidth", source=source, path="nodes")
    members = set(node_of) | set(node_of.values())
    nic_links = [link for link in topology.links
                 if link.role is LinkRole.NETWORK and any(e in members for e in link.endpoints)]
    first = next(iter(nodes))
    first_members = {h for h, n in node_of.items() if n == first} | {first}
    nics = sum(1 for link in nic_links if any(e in first_members for e in link.endpoints))
    nic_rates = [link.shape.rate_bps for link in nic_links if link.shape.rate_bps]
    nic_delays = [link.shape.delay_us for link in nic_links]
    nic_gb_s = min(nic_rates) / 8e9 if nic_rates else 0.0
    return Cluster(topology.name, len(nodes), sizes.pop(), gpu, cc, interconnect, min(intra_rates) / 8e9,
                   min(intra_delays), nics, nic_gb_s, min(nic_delays, default=0.0))


def _dup(channels: int, speed: float, cc: int, max_channels: int = _RING_MAX_CHANNELS) -> tuple[int, float]:
    if speed >= 25 and not (cc > 80 and speed < 50 and channels > 4):
        doubled = min(2 * channels, max_channels)
        return doubled, speed / -(-doubled // channels)
    return channels, speed


def tuner_system(cluster: Cluster, *, nodes: int | None = None, ranks_per_node: int | None = None) -> TunerSystem:
    """The system NCCL's tuner reads for a communicator on ``nodes`` nodes of ``ranks_per_node`` ranks."""
    nodes = cluster.nodes if nodes is None else nodes
    ppn = cluster.gpus_per_node if ranks_per_node is None else ranks_per_node
    cc = cluster.compute_capability
    version = parse_version(cluster.nccl_version) or default_version(cc)
    tree_intra = 0.0
    hopper = cc >= 90
    intra = cluster.intra_gb_s if ppn > 1 else 0.0
    if nodes == 1:
        link = intra
        channels, speed = _search(link, _SM90_SPEEDS_INTRA if hopper else _SPEEDS_INTRA, _RING_MAX_CHANNELS)
        channels, speed = _dup(channels, speed, cc)
        bw_intra = bw_inter = speed
    else:
        nic = cluster.nic_gb_s
        if nic <= 0:
            raise InputError(f"{cluster.name}: {nodes} nodes need NICs with a bandwidth", path="topology")
        speeds = _SM90_SPEEDS_INTER if hopper else _SPEEDS_INTER
        channels, speed = _search(min(nic, intra) if ppn > 1 else nic, speeds, _RING_MAX_CHANNELS)
        channels = min(_RING_MAX_CHANNELS, cluster.nics_reached(ppn) * max(1, int(nic // speed)),
                       int(intra // speed) if ppn > 1 else _RING_MAX_CHANNELS)
        found = (max(1, channels), speed)
        channels, speed = _dup(*found, cc)
        bw_intra = bw_inter = speed
        if ppn > 1:
            tree_intra = tree_intra_speed(speeds, found, channels, intra, cc, version >= _DUP_BEFORE_TREE_PASS)
    nvls = cluster.interconnect is Interconnect.NVSWITCH and hopper and ppn > 2
    return TunerSystem(nodes=nodes, ranks_per_node=ppn, compute_capability=cc, intra=cluster.intra_kind,
                       channels=channels, bw_intra_gb_s=bw_intra, bw_inter_gb_s=bw_inter,
                       comm_channels=min(MAX_CHANNELS, 2 * channels), nvls=nvls,
                       nvls_channels=16, nvls_graph_channels=ppn if nvls else 0,
                       nvls_bw_gb_s=_nvls_speed(intra, ppn) if nvls else 0.0,
                       same_channels=same_channels(nodes, cluster.nics_reached(ppn)),
                       gpu_direct=cluster.nic_path.ll128_between_nodes, amd_cpu=cluster.cpu is CpuVendor.AMD,
                       version=version, tree_bw_intra_gb_s=tree_intra,
                       env=parse_env(cluster.nccl_env, source=cluster.name))


#: the first release that splits a fast graph into more channels before its second pass (ncclTopoDupChannels at
#: the end of pass 1, src/graph/search.cc 2.19); before, the split came after it, on the raised speed
_DUP_BEFORE_TREE_PASS = (2, 19)


def tree_intra_speed(speeds: tuple[float, ...], found: tuple[int, float], ring_channels: int, intra_gb_s: float,
                     cc: int, dup_first: bool) -> float:
    """The tree graph's bandwidth per channel inside a node between nodes (NCCL's search, every release since
    2.8: its second pass raises a non-ring graph's ``bwIntra`` one speed at a time while it is below twice its
    ``bwInter`` and the GPUs' links hold the channels at the next speed; NCCL's tuner reads ``bwIntra`` for a
    tree on 2 nodes, ``bwInter`` beyond). ``found``: the first pass's channels and speed (before the split of
    :func:`_dup`); the split comes first from 2.19 on, after the raise before; either way the tree graph may not
    have more channels than the ring's (``treeGraph.maxChannels = ringGraph.nChannels``, src/init.cc), so a
    split that would pass them leaves the speed whole."""
    split_first = _dup(*found, cc, max_channels=ring_channels) if dup_first else found
    channels, speed = split_first
    i = next((k for k, s in enumerate(speeds) if s <= speed), len(speeds) - 1)
    inter = speeds[i]
    while i > 0 and speeds[i] < 2 * inter and channels * speeds[i - 1] <= intra_gb_s:
        i -= 1
    raised = float(speeds[i])
    if not dup_first:
        _, raised = _dup(channels, raised, cc, max_channels=ring_channels)
    return raised


def _nvls_speed(intra_gb_s: float, ppn: int) -> float:
    for speed in _SM90_SPEEDS_INTRA:
        if speed * (ppn + 1) <= intra_gb_s:
            return float(speed)
    return 3.0
