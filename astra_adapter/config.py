"""ASTRA-sim's three configuration files as frozen dataclasses: system.json, network.yml, remote_memory.json.

Keys, defaults and units follow ASTRA-sim (``Sys::initialize_sys``, astra-network-analytical's
``NetworkParser``, ``AnalyticalRemoteMemory``):

- network ``bandwidth`` is "GB/s" but converted with 2^30 bytes (``bw_bytes_per_ns = GB/s * 2^30 / 1e9``),
  ``latency`` is ns per hop;
- system ``local-mem-bw`` is GB/s with 1e9 bytes, ``peak-perf`` TFLOP/s, ``endpoint-delay`` ns.

Readers take bytes or text plus a ``source`` name used in error messages (:class:`InputError` naming file and
key); ``load_*`` read a path.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any


from genie.core.errors import InputError, shown
from genie.core.jsondoc import decode_json
from genie.input_yaml import parse_yaml
from genie.core.files import InputKind, read_input

GIB_BYTES = 1 << 30


class NetworkBackend(Enum):
    """Which of astra-network-analytical's backends a run models."""

    CONGESTION_UNAWARE = "congestion_unaware"  # per-message delay, links never shared
    CONGESTION_AWARE = "congestion_aware"  # links as resources, chunks queued per link (1-dim topologies)


class TopologyKind(Enum):
    """A network dimension's building block (congestion-unaware hop counts)."""

    RING = "Ring"
    FULLY_CONNECTED = "FullyConnected"
    SWITCH = "Switch"


class ImplKind(Enum):
    """A collective implementation named in system.json (``all-reduce-implementation`` etc.)."""

    RING = "ring"
    ONE_RING = "oneRing"
    DIRECT = "direct"
    ONE_DIRECT = "oneDirect"
    HALVING_DOUBLING = "halvingDoubling"
    ONE_HALVING_DOUBLING = "oneHalvingDoubling"
    DOUBLE_BINARY_TREE = "doubleBinaryTree"


class SchedulingPolicy(Enum):
    LIFO = "LIFO"
    FIFO = "FIFO"
    EXPLICIT = "EXPLICIT"


class CollectiveOptimization(Enum):
    BASELINE = "baseline"
    LOCAL_BW_AWARE = "localBWAware"


class IntraDimensionScheduling(Enum):
    FIFO = "FIFO"
    RG = "RG"
    SMALLEST_FIRST = "smallestFirst"
    LESS_REMAINING_PHASE_FIRST = "lessRemainingPhaseFirst"


class InterDimensionScheduling(Enum):
    ASCENDING = "ascending"
    ONLINE_GREEDY = "onlineGreedy"
    ROUND_ROBIN = "roundRobin"
    OFFLINE_GREEDY = "offlineGreedy"
    OFFLINE_GREEDY_FLEX = "offlineGreedyFlex"


class MemoryType(Enum):
    NO_MEMORY_EXPANSION = "NO_MEMORY_EXPANSION"
    PER_NODE_MEMORY_EXPANSION = "PER_NODE_MEMORY_EXPANSION"
    PER_NPU_MEMORY_EXPANSION = "PER_NPU_MEMORY_EXPANSION"
    MEMORY_POOL = "MEMORY_POOL"


@dataclass(frozen=True)
class CollectiveImpl:
    """One dimension's implementation; ``window`` is the direct algorithm's packet window (-1: all peers)."""

    kind: ImplKind
    window: int = -1

    @property
    def spelled(self) -> str:
        if self.kind in (ImplKind.DIRECT, ImplKind.ONE_DIRECT) and self.window != -1:
            return f"{self.kind.value}{self.window}"
        return self.kind.value


@dataclass(frozen=True)
class NetworkDim:
    topology: TopologyKind
    npus_count: int
    bandwidth_gb_per_s: float
    latency_ns: float

    @property
    def bw_bytes_per_ns(self) -> float:
        return self.bandwidth_gb_per_s * GIB_BYTES / 1_000_000_000


@dataclass(frozen=True)
class NetworkConfig:
    dims: tuple[NetworkDim, ...]

    @property
    def npus_count(self) -> int:
        return math.prod(d.npus_count for d in self.dims)

    @property
    def npus_per_dim(self) -> tuple[int, ...]:
        return tuple(d.npus_count for d in self.dims)


@dataclass(frozen=True)
class SystemConfig:
    scheduling_policy: SchedulingPolicy = SchedulingPolicy.LIFO
    endpoint_delay_ns: int = 10
    active_chunks_per_dimension: int = 1
    preferred_dataset_splits: int = 1
    all_reduce_impl: tuple[CollectiveImpl, ...] = ()
    all_gather_impl: tuple[CollectiveImpl, ...] = ()
    reduce_scatter_impl: tuple[CollectiveImpl, ...] = ()
    all_to_all_impl: tuple[CollectiveImpl, ...] = ()
    collective_optimization: CollectiveOptimization = CollectiveOptimization.BASELINE
    intra_dimension_scheduling: IntraDimensionScheduling = IntraDimensionScheduling.FIFO
    inter_dimension_scheduling: InterDimensionScheduling = InterDimensionScheduling.ASCENDING
    local_mem_bw_gb_per_s: float | None = None  # None: ASTRA-sim's fixed 10 ns per memory access
    peak_perf_tflops: float = 0.0
    roofline_enabled: bool = False
    boost_mode: bool = False
    model_shared_bus: bool = False
    replay_only: bool = False


@dataclass(frozen=True)
class RemoteMemoryConfig:
    memory_type: MemoryType = MemoryType.NO_MEMORY_EXPANSION
    latency_ns: float = 0.0
    bw_gb_per_s: float = 0.0
    num_nodes: int = 0
    npus_per_node: int = 0


# ---- helpers ---------------------------------------------------------------------------------------------
def _text(data: bytes | str) -> str:
    return data.decode("utf-8", errors="replace") if isinstance(data, (bytes, bytearray)) else data


def _number(doc: dict, key: str, source: str, *, minimum: float | None = None, integer: bool = False,
            default: Any = None) -> Any:
    if key not in doc:
        return default
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"expected a number, got {shown(value)}", source=source, path=key)
    if integer and value != int(value):
        raise InputError(f"expected an integer, got {shown(value)}", source=source, path=key)
    if minimum is not None and value < minimum:
        raise InputError(f"must be >= {minimum:g}, got {shown(value)}", source=source, path=key)
    return int(value) if integer else value


def _flag(doc: dict, key: str, source: str) -> bool:
    value = doc.get(key, 0)
    if not isinstance(value, (bool, int, float)):
        raise InputError(f"expected 0 or 1, got {shown(value)}", source=source, path=key)
    return bool(value)


def _enum(cls: type[Enum], doc: dict, key: str, source: str, default: Enum) -> Any:
    if key not in doc:
        return default
    value = doc[key]
    for member in cls:
        if value == member.value or (isinstance(value, str) and value.lower() == str(member.value).lower()):
            return member
    names = ", ".join(str(m.value) for m in cls)
    raise InputError(f"unknown value {shown(value)} (expected one of: {names})", source=source, path=key)


def parse_impl(text: str, *, source: str, path: str) -> CollectiveImpl:
    """'ring', 'oneRing', 'direct', 'direct4' (window 4), 'halvingDoubling', 'doubleBinaryTree'..."""
    if not isinstance(text, str):
        raise InputError(f"expected an implementation name, got {shown(text)}", source=source, path=path)
    for kind in (ImplKind.ONE_DIRECT, ImplKind.DIRECT):
        if text.startswith(kind.value):
            rest = text[len(kind.value):]
            if not rest:
                return CollectiveImpl(kind)
            if rest.isdigit() and int(rest) > 0:
                return CollectiveImpl(kind, int(rest))
            raise InputError(f"bad direct window in {shown(text)} (expected e.g. 'direct' or 'direct4')",
                             source=source, path=path)
    for kind in ImplKind:
        if text == kind.value:
            return CollectiveImpl(kind)
    names = ", ".join(k.value for k in ImplKind)
    raise InputError(f"unknown collective implementation {shown(text)} (expected one of: {names})",
                     source=source, path=path)


def _impl_list(doc: dict, key: str, source: str) -> tuple[CollectiveImpl, ...]:
    if key not in doc:
        return ()
    value = doc[key]
    if not isinstance(value, list) or not value:
        raise InputError("expected a non-empty list of implementation names, one per dimension",
                         source=source, path=key)
    return tuple(parse_impl(v, source=source, path=f"{key}[{i}]") for i, v in enumerate(value))


# ---- system.json ---------------------------------------------------------------------------------------
def parse_system(data: bytes | str, *, source: str = "system.json") -> SystemConfig:
    doc = decode_json(_text(data), source=source)
    if not isinstance(doc, dict):
        raise InputError("expected a JSON object", source=source)
    delay = _number(doc, "endpoint-delay", source, minimum=0, default=10)
    if delay is not None and int(delay) < 1:
        raise InputError("must be >= 1 (ASTRA-sim aborts on an endpoint delay of 0 ns)", source=source,
                         path="endpoint-delay")
    splits = _number(doc, "preferred-dataset-splits", source, minimum=1, integer=True)
    if splits is None:
        raise InputError("missing (ASTRA-sim divides each collective by it)", source=source,
                         path="preferred-dataset-splits")
    mem_bw = _number(doc, "local-mem-bw", source, default=None)
    if mem_bw is not None and mem_bw <= 0:
        raise InputError(f"must be > 0 GB/s, got {shown(mem_bw)}", source=source, path="local-mem-bw")
    config = SystemConfig(
        scheduling_policy=_enum(SchedulingPolicy, doc, "scheduling-policy", source, SchedulingPolicy.LIFO),
        endpoint_delay_ns=int(delay),
        active_chunks_per_dimension=_number(doc, "active-chunks-per-dimension", source, minimum=1, integer=True,
                                            default=1),
        preferred_dataset_splits=splits,
        all_reduce_impl=_impl_list(doc, "all-reduce-implementation", source),
        all_gather_impl=_impl_list(doc, "all-gather-implementation", source),
        reduce_scatter_impl=_impl_list(doc, "reduce-scatter-implementation", source),
        all_to_all_impl=_impl_list(doc, "all-to-all-implementation", source),
        collective_optimization=_enum(CollectiveOptimization, doc, "collective-optimization", source,
                                      CollectiveOptimization.BASELINE),
        intra_dimension_scheduling=_enum(IntraDimensionScheduling, doc, "intra-dimension-scheduling", source,
                                         IntraDimensionScheduling.FIFO),
        inter_dimension_scheduling=_enum(InterDimensionScheduling, doc, "inter-dimension-scheduling", source,
                                         InterDimensionScheduling.ASCENDING),
        local_mem_bw_gb_per_s=None if mem_bw is None else float(mem_bw),
        peak_perf_tflops=float(_number(doc, "peak-perf", source, minimum=0, default=0.0)),
        roofline_enabled=_flag(doc, "roofline-enabled", source),
        boost_mode=_flag(doc, "boost-mode", source),
        model_shared_bus=_flag(doc, "model-shared-bus", source),
        replay_only=_flag(doc, "replay-only", source),
    )
    if config.roofline_enabled and (config.peak_perf_tflops <= 0 or config.local_mem_bw_gb_per_s is None):
        raise InputError("roofline-enabled needs peak-perf > 0 and local-mem-bw", source=source,
                         path="roofline-enabled")
    return config


# ---- network.yml ---------------------------------------------------------------------------------------
def _yaml_list(doc: dict, key: str, source: str) -> list:
    if key not in doc:
        raise InputError("missing", source=source, path=key)
    value = doc[key]
    if not isinstance(value, list) or not value:
        raise InputError(f"expected a non-empty list (one entry per dimension), got {shown(value)}", source=source,
                         path=key)
    return value


def parse_network(data: bytes | str, *, source: str = "network.yml") -> NetworkConfig:
    try:
        doc = parse_yaml(_text(data), source)
    except InputError as exc:  # the one YAML loader: duplicate keys and alias bombs refused
        raise InputError(f"not YAML: {exc.detail}", source=source, path=exc.path) from None
    if not isinstance(doc, dict):
        raise InputError("expected a mapping with topology, npus_count, bandwidth, latency", source=source)
    topologies = _yaml_list(doc, "topology", source)
    lists = {key: _yaml_list(doc, key, source) for key in ("npus_count", "bandwidth", "latency")}
    for key, values in lists.items():
        if len(values) != len(topologies):
            raise InputError(f"has {len(values)} entries but topology has {len(topologies)} dimensions",
                             source=source, path=key)
    dims = []
    for i, name in enumerate(topologies):
        kind = next((k for k in TopologyKind if k.value == name), None)
        if kind is None:
            names = ", ".join(k.value for k in TopologyKind)
            raise InputError(f"unknown topology {shown(name)} (expected one of: {names})", source=source,
                             path=f"topology[{i}]")
        npus, bw, lat = lists["npus_count"][i], lists["bandwidth"][i], lists["latency"][i]
        if isinstance(npus, bool) or not isinstance(npus, int) or npus <= 1:
            raise InputError(f"expected an integer > 1, got {shown(npus)}", source=source, path=f"npus_count[{i}]")
        if isinstance(bw, bool) or not isinstance(bw, (int, float)) or not bw > 0 or not math.isfinite(bw):
            raise InputError(f"expected a number > 0 (GB/s), got {shown(bw)}", source=source, path=f"bandwidth[{i}]")
        if isinstance(lat, bool) or not isinstance(lat, (int, float)) or not lat >= 0 or not math.isfinite(lat):
            raise InputError(f"expected a number >= 0 (ns), got {shown(lat)}", source=source, path=f"latency[{i}]")
        dims.append(NetworkDim(kind, npus, float(bw), float(lat)))
    return NetworkConfig(tuple(dims))


# ---- remote_memory.json --------------------------------------------------------------------------------
def parse_remote_memory(data: bytes | str, *, source: str = "remote_memory.json") -> RemoteMemoryConfig:
    doc = decode_json(_text(data), source=source)
    if not isinstance(doc, dict):
        raise InputError("expected a JSON object", source=source)
    if "memory-type" not in doc:
        raise InputError("missing", source=source, path="memory-type")
    memory_type = _enum(MemoryType, doc, "memory-type", source, MemoryType.NO_MEMORY_EXPANSION)
    config = RemoteMemoryConfig(
        memory_type=memory_type,
        latency_ns=float(_number(doc, "remote-mem-latency", source, minimum=0, default=0.0)),
        bw_gb_per_s=float(_number(doc, "remote-mem-bw", source, minimum=0, default=0.0)),
        num_nodes=_number(doc, "num-nodes", source, minimum=0, integer=True, default=0),
        npus_per_node=_number(doc, "num-npus-per-node", source, minimum=0, integer=True, default=0),
    )
    if memory_type is not MemoryType.NO_MEMORY_EXPANSION and config.bw_gb_per_s <= 0:
        raise InputError(f"must be > 0 for {memory_type.value}", source=source, path="remote-mem-bw")
    if memory_type is MemoryType.PER_NODE_MEMORY_EXPANSION and config.npus_per_node <= 0:
        raise InputError("must be > 0 for PER_NODE_MEMORY_EXPANSION", source=source, path="num-npus-per-node")
    return config


# ---- paths ---------------------------------------------------------------------------------------------
def load_system(path: str | Path) -> SystemConfig:
    return parse_system(read_input(path, InputKind.CONFIG), source=str(path))


def load_network(path: str | Path) -> NetworkConfig:
    return parse_network(read_input(path, InputKind.CONFIG), source=str(path))


def load_remote_memory(path: str | Path) -> RemoteMemoryConfig:
    return parse_remote_memory(read_input(path, InputKind.CONFIG), source=str(path))
