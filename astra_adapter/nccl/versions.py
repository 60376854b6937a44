"""NCCL's tuner constants and rules per release (pure): what changed in ``src/graph/tuning.cc`` between the
releases nccl-tests outputs in the wild were run with, as facts read from the tagged sources (docs/nccl-model.md
lists them with their tags); the code is genie's.

A release is ``(major, minor)``; an output that does not name its release is modelled as NCCL 2.23
(:data:`DEFAULT_VERSION`, the release :mod:`astra_adapter.nccl.tuning` was written from), or as the first release
with its GPU's tables where that is later (:func:`default_version`). Releases before 2.8 had no
tuner of this shape (2.4 picked its protocol by fixed thresholds) and are modelled with the 2.8 rules, the
earliest encoded here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from genie.core.collective import Collective

NcclVersion = tuple[int, int]
DEFAULT_VERSION: NcclVersion = (2, 23)
EARLIEST_VERSION: NcclVersion = (2, 8)

_VERSION = re.compile(r"(\d+)\.(\d+)")


def default_version(compute_capability: int) -> NcclVersion:
    """The release an output that names none is modelled with: 2.23, or the first release with the GPU's own
    tables where that is later (Blackwell: 2.25)."""
    return max(DEFAULT_VERSION, (2, 25) if compute_capability >= 100 else DEFAULT_VERSION)


def describe_release(text: str, compute_capability: int) -> str:
    """Which release's tuner a cluster is modelled with, and why, in words."""
    named = parse_version(text)
    if named is not None:
        used = constants(named).version
        note = "" if used == named else f" (modelled with {used[0]}.{used[1]}'s rules, the earliest genie has)"
        return f"NCCL {text}'s rules, the release the outputs print{note}"
    v = default_version(compute_capability)
    return f"NCCL {v[0]}.{v[1]}'s rules (the outputs print no NCCL version)"


def parse_version(text: str) -> NcclVersion | None:
    """``"2.26.2"`` -> ``(2, 26)``; None for an empty or unreadable string."""
    m = _VERSION.search(text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


# [algorithm][protocol] us, algorithms in NCCL's order (Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree,
# PAT), protocols LL, LL128, Simple. Releases before 2.14 had one CollNet algorithm; its row is used for both.
_Z = (0, 0, 0)
# 2.8 .. 2.17
_BASE_2_8 = ((4.4, 4.4, 0), (3.6, 10.0, 8.4), (4.4, 4.4, 0), (4.4, 4.4, 0), _Z, _Z, _Z)
_HW_2_8 = {
    "nvlink": ((.52, 1.25, 28), (.47, 1.9, 3.4), (.5, 1.2, 8.0), (.5, 1.2, 8.0), _Z, _Z, _Z),
    "pci": ((1.0, 1.9, 28), (1.0, 2.5, 5.7), (1.0, 1.9, 8.0), (1.0, 1.9, 8.0), _Z, _Z, _Z),
    "net": ((5.0, 8.5, 28), (2.7, 4.0, 9.6), (5.0, 5.0, 10.7), (5.0, 5.0, 10.7), _Z, _Z, _Z),
}
# 2.12 and 2.13 only: the network ring Simple step at 28 us
_HW_2_12 = {**_HW_2_8, "net": ((5.0, 8.5, 28), (2.7, 4.0, 28), (5.0, 5.0, 10.7), (5.0, 5.0, 10.7), _Z, _Z, _Z)}
# 2.18
_BASE_2_18 = ((6.8, 14.0, 0), (6.6, 14.0, 8.4), (6.8, 14.0, 0), (6.8, 14.0, 0), (0, 0, 23.0), (0, 0, 23.0), _Z)
_HW_2_18 = {
    "nvlink": ((.6, 1.25, 4), (.6, 1.9, 3.4), (0, 0, 8.0), (0, 0, 4.75), (0, 0, 0), (0, 0, 0), _Z),
    "pci": ((1.0, 1.9, 6), (1.0, 2.5, 5.7), (0, 0, 8.0), (0, 0, 8.0), _Z, _Z, _Z),
    "net": ((5.0, 8.5, 14), (2.7, 4.0, 14.0), (0, 0, 10.7), (0, 0, 14), (0, 0, 18), (0, 0, 19), _Z),
}
# 2.19 .. 2.22 (NVLS 23 us on NVLink in 2.19/2.20, 25 from 2.21)
_BASE_2_19 = ((6.8, 14.0, 0), (6.6, 14.0, 8.4), _Z, _Z, _Z, _Z, _Z)


def _hw_2_19(nvls_us: float) -> dict:
    return {
        "nvlink": ((.6, 1.25, 28), (.6, 1.9, 3.4), (0, 0, 3.7), (0, 0, 2.8), (0, 0, nvls_us), (0, 0, nvls_us), _Z),
        "pci": ((1.0, 1.9, 28), (1.0, 2.5, 5.7), (0, 0, 3.7), (0, 0, 2.8), _Z, _Z, _Z),
        "net": ((5.0, 8.5, 28), (2.7, 4.0, 14.0), (0, 0, 31), (0, 0, 30), (0, 0, 18), (0, 0, 14), _Z),
    }


# 2.23 onwards (through 2.30 for the rows genie uses)
_BASE_2_23 = ((6.8, 14.0, 8.4), (6.6, 14.0, 8.4), _Z, _Z, _Z, _Z, _Z)
_HW_2_23 = {
    "nvlink": ((.6, 1.25, 4.0), (.6, 1.9, 3.4), (0, 0, 3.7), (0, 0, 2.8), (0, 0, 25), (0, 0, 25), _Z),
    "pci": ((1.0, 1.9, 4.0), (1.0, 2.5, 5.7), (0, 0, 3.7), (0, 0, 2.8), _Z, _Z, _Z),
    "net": ((5.0, 8.5, 14), (2.7, 4.0, 14.0), (0, 0, 31), (0, 0, 30), (0, 0, 18), (0, 0, 14), _Z),
}

# per-channel caps (GB/s), [generation: Volta, Ampere, Hopper, Blackwell][nodes: 1, 2, more]
_LL_MAX_2_8 = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (87.7, 22.5, 19.0), (87.7, 22.5, 19.0))
_LL_MAX_2_21 = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
# 2.8 and 2.9: Ampere's tree caps were 22.5 / 16.0 GB/s a channel across 2 / more nodes (23.6 / 17.8 from 2.10)
_TREE_2_8 = ((26.5, 18.5, 10.0), (24.0, 22.5, 16.0), (24.0, 22.5, 16.0), (24.0, 22.5, 16.0))
_TREE_2_10 = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (24.0, 23.6, 17.8), (24.0, 23.6, 17.8))
_TREE_2_17 = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 33.0), (38.7, 41.4, 33.0))
_TREE_2_19 = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (77.4, 82.8, 72.0))
_RING_LL128_2_10 = ((20.0,) * 3,) * 4
# 2.8 and 2.9: LL128's cap a channel per collective (ll128MaxBwPerCh[function]), for rings and trees alike
_LL128_PER_COLLECTIVE_2_8 = ((Collective.BROADCAST, 18.8), (Collective.REDUCE, 12.0), (Collective.ALL_GATHER, 18.3),
                             (Collective.REDUCE_SCATTER, 15.2), (Collective.ALL_REDUCE, 16.9))
# 2.17: one LL128 cap a channel per generation for rings and trees (ll128MaxBwPerCh[compCapIndex]), Hopper's 36.7
_LL128_2_17 = ((20.0,) * 3, (20.0,) * 3, (36.7,) * 3, (36.7,) * 3)
_RING_LL128_2_18 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7), (73.4, 73.4, 73.4))
_TREE_LL128_2_10 = ((20.0,) * 3,) * 4
_TREE_LL128_2_18 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0), (73.4, 73.4, 58.0))


@dataclass(frozen=True)
class TunerConstants:
    """What NCCL's tuner uses in one release (see the module doc)."""

    version: NcclVersion
    base_lat_us: tuple[tuple[float, ...], ...]
    hw_lat_us: dict  # "nvlink" | "pci" | "net" -> [algorithm][protocol]
    ll_max_bws: tuple[tuple[float, ...], ...]
    per_ch_max_tree_bws: tuple[tuple[float, ...], ...]
    per_ch_max_ring_ll128_bws: tuple[tuple[float, ...], ...]
    per_ch_max_tree_ll128_bws: tuple[tuple[float, ...], ...]
    #: ring LL's share of the graph bandwidth: 1/2 from 2.21; before, 1/4 for all-reduce, reduce and every
    #: multi-node call, 1/3 for the others
    ring_ll_half: bool
    #: ring LL128 with one GPU a node: x0.7 before 2.23 (x0.92 otherwise, and always from 2.23)
    ring_ll128_one_gpu_factor: float
    #: all-reduce's inter-node ring steps: 2 x nodes in 2.12 .. 2.22, 2 x (nodes - 1) otherwise
    ar_inter_steps_2n: bool
    #: an all-A100 communicator's bus bandwidth capped at 235 GB/s (2.8 .. 2.14)
    a100_cap_gb_s: float | None
    #: a multi-node ring's intra-node step at least NCCL's network overhead (1 us, 2 on AMD; x3 Simple), from 2.18
    ring_net_overhead: bool
    #: LL's intra-node step latency x1.8 on a multi-node communicator (before 2.18)
    multinode_ll_intra_factor: float
    #: the generations' row index: from 2.16 by the oldest GPU (>= 90 Hopper, >= 80 Ampere); before, Ampere only
    #: for sm80 exactly, everything else read Volta's row
    sm80_only_index: bool
    #: compute capabilities LL128 is enabled on by default; None: any from sm70
    ll128_arches: frozenset[int] | None
    #: with one GPU a node, the network step latency is the tree's (from 2.23; before, the algorithm's own)
    one_gpu_net_lat_from_tree: bool
    #: PAT's share of the graph bandwidth: 0.85 in 2.23, 0.75 from 2.24
    pat_factor: float
    #: 2.8 and 2.9: LL128's per-channel cap per collective, replacing both LL128 tables (None: the tables)
    ll128_per_collective: tuple[tuple[Collective, float], ...] | None
    #: tree LL128 across nodes: x0.915 in 2.8 and 2.9, x120/128 from 2.10
    tree_ll128_inter_factor: float
    #: the ring's "plateau" latency factor on a multi-node all-reduce (Ring/Simple) before 2.18: from
    #: nRanks/16 x 64 KiB bytes, x1.9 (2.17: x1.5 on Hopper); from 2.18 from 64 bytes a channel and rank, x1.9
    #: before Ampere, x1.4 from it
    plateau_by_ranks: bool
    #: the algorithms the release has
    has_nvls: bool
    has_nvls_tree: bool
    has_pat: bool

    def generation(self, compute_capability: int) -> int:
        cc = compute_capability
        if self.sm80_only_index:
            return 1 if cc == 80 else 0
        return 3 if cc >= 100 and self.version >= (2, 25) else 2 if cc >= 90 else 1 if cc >= 80 else 0

    def ll128_cap_per_channel(self, collective: Collective, table: tuple[tuple[float, ...], ...],
                              generation: int, node_index: int) -> float:
        """LL128's bandwidth cap a channel: the release's per-collective value (2.8, 2.9), else ``table``'s."""
        if self.ll128_per_collective is not None:
            return dict(self.ll128_per_collective).get(collective, table[generation][node_index])
        return table[generation][node_index]

    def plateau_factor(self, compute_capability: int) -> float:
        """The ring's plateau latency factor (see ``plateau_by_ranks``)."""
        if self.version < (2, 17):
            return 1.9
        if self.version < (2, 18):
            return 1.9 if compute_capability < 90 else 1.5
        return 1.9 if compute_capability < 80 else 1.4

    def ll128_arch_enabled(self, compute_capability: int) -> bool:
        if self.ll128_arches is None:
            return compute_capability >= 70
        return compute_capability in self.ll128_arches


@lru_cache(maxsize=64)
def constants(version: NcclVersion | None) -> TunerConstants:
    """NCCL's tuner constants in release ``version`` (None: :data:`DEFAULT_VERSION`)."""
    v = max(version or DEFAULT_VERSION, EARLIEST_VERSION)
    if v < (2, 18):
        base, hw = _BASE_2_8, (_HW_2_12 if (2, 12) <= v < (2, 14) else _HW_2_8)
    elif v < (2, 19):
        base, hw = _BASE_2_18, _HW_2_18
    elif v < (2, 23):
        base, hw = _BASE_2_19, _hw_2_19(23.0 if v < (2, 21) else 25.0)
    else:
        base, hw = _BASE_2_23, _HW_2_23
    if v < (2, 16):
        arches = frozenset({70, 80})
    elif v < (2, 25):
        arches = frozenset({70, 80, 90})
    elif v < (2, 27):
        arches = frozenset({70, 80, 90, 100, 120})
    else:
        arches = None
    return TunerConstants(
        version=v, base_lat_us=base, hw_lat_us=hw,
        ll_max_bws=_LL_MAX_2_21 if v >= (2, 21) else _LL_MAX_2_8,
        per_ch_max_tree_bws=_TREE_2_19 if v >= (2, 19) else _TREE_2_17 if v >= (2, 17) else _TREE_2_10 if v >= (
            2, 10) else _TREE_2_8,
        per_ch_max_ring_ll128_bws=_RING_LL128_2_18 if v >= (2, 18) else _LL128_2_17 if v >= (2, 17) else
        _RING_LL128_2_10,
        per_ch_max_tree_ll128_bws=_TREE_LL128_2_18 if v >= (2, 18) else _LL128_2_17 if v >= (2, 17) else
        _TREE_LL128_2_10,
        ring_ll_half=v >= (2, 21),
        ring_ll128_one_gpu_factor=0.92 if v >= (2, 23) else 0.7,
        ar_inter_steps_2n=(2, 12) <= v < (2, 23),
        a100_cap_gb_s=235.0 if v < (2, 15) else None,
        ring_net_overhead=v >= (2, 18),
        multinode_ll_intra_factor=1.8 if v < (2, 18) else 1.0,
        sm80_only_index=v < (2, 16),
        ll128_arches=arches,
        one_gpu_net_lat_from_tree=v >= (2, 23),
        pat_factor=0.85 if v < (2, 24) else 0.75,
        ll128_per_collective=_LL128_PER_COLLECTIVE_2_8 if v < (2, 10) else None,
        tree_ll128_inter_factor=0.915 if v < (2, 10) else 120.0 / 128.0,
        plateau_by_ranks=v < (2, 18),
        has_nvls=v >= (2, 17), has_nvls_tree=v >= (2, 18), has_pat=v >= (2, 23),
    )
