"""A genie trace and topology as ASTRA-sim's full input set (``genie astra export``).

``export_astra(trace, mapping, out_dir)`` writes::

    OUT/workload/<name>.<rank>.et            Chakra ET per rank (process groups renumbered)
    OUT/workload/<name>.comm_group.json      --comm-group-configuration (when the trace has groups)
    OUT/workload/<name>.group_names.json     original group name -> ASTRA-sim group id
    OUT/system.json  OUT/network.yml  OUT/remote_memory.json
    OUT/mapping.json                          how the topology became ASTRA-sim dimensions, and the caveats
    OUT/cmd.sh                                the command line (ASTRA-sim binary or genie's drop-in for it)

Every file is built and parsed back in memory first, then written atomically: bad input leaves nothing behind.

**Groups.** ASTRA-sim's comm-group loader parses group names as integers (``std::stoi``) and treats ``pg_name``
"0" as the world, so a group holding every rank in rank order becomes "0" and the others "1", "2", ... in the
trace's group order. The comm-group file lists only groups 1, 2, ...: ASTRA-sim builds a ``CommunicatorGroup``
per key and asserts its id is > 0, and "0" needs no entry (it is ASTRA-sim's default group).

**Durations.** ET files hold whole microseconds (``duration_micros``); a node of genie's with a finer duration
keeps it in a ``duration_ns`` attribute that ASTRA-sim ignores. The export says (a note) how many nodes ASTRA-sim
sees rounded and by how much; ``genie astra simulate`` reads the set as ASTRA-sim does.

**Implementations.** One per collective type and dimension, from genie's algorithm (the trace's ``algorithm``
hint when all nodes of that type agree, else ``SystemParams.algorithms``, else ring; direct for all-to-all):
ring -> ``ring``; direct -> ``direct1`` on a dimension of hosts (each host has one NIC, so its n-1 concurrent
messages share it - ASTRA-sim's congestion-unaware network would send them in parallel at full rate; a window
of one serializes them) and ``direct`` inside a host; halving_doubling and recursive_doubling ->
``halvingDoubling`` (power-of-two dimensions; recursive doubling sends the whole buffer log2(n) times, which
ASTRA-sim cannot express); double_binary_tree -> ``doubleBinaryTree`` (all-reduce only). A process group
smaller than the world runs system.json's implementation when it lists one (a one-dimensional network) and a
ring when it lists several (``CommunicatorGroup::get_collective_plan``); ``doubleBinaryTree`` in such a group
crashes the binary (SIGSEGV), so the export refuses it.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from genie.core.alltoallv import as_even_all_to_alls
from genie.core.collective import Algorithm, Collective
from genie.core.errors import InputError
from genie.core.files import write_atomic
from genie.core.trace import CommType, NodeKind, ProcessGroup, Trace
from genie.workloads.analysis import drop_missing_deps
from genie.workloads.chakra_et import COMM_GROUP_SUFFIX, whole_micros, write_comm_groups, write_et

from astra_adapter.config import (CollectiveImpl, CollectiveOptimization, ImplKind, MemoryType, NetworkConfig,
                                  RemoteMemoryConfig, SchedulingPolicy, SystemConfig, parse_network,
                                  parse_remote_memory, parse_system)
from astra_adapter.mapping import DimRole, MappedDim, TopologyMapping

WORLD_GROUP_ID = "0"
_COMM_CODES = frozenset(c.value for c in CommType)
_EXPORTED = (Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_TO_ALL)


@dataclass(frozen=True)
class SystemParams:
    """The system.json knobs genie chooses (ASTRA-sim's defaults unless calibrated)."""

    endpoint_delay_ns: int = 10
    preferred_dataset_splits: int = 1
    active_chunks_per_dimension: int = 1
    scheduling_policy: SchedulingPolicy = SchedulingPolicy.LIFO
    collective_optimization: CollectiveOptimization = CollectiveOptimization.BASELINE
    local_mem_bw_gb_per_s: float = 1600.0
    peak_perf_tflops: float = 312.0
    algorithms: tuple[tuple[Collective, Algorithm], ...] = ()  # overrides of the trace's hints

    def algorithm_for(self, collective: Collective) -> Algorithm | None:
        return dict(self.algorithms).get(collective)


@dataclass(frozen=True)
class GroupRenaming:
    """Original process-group name -> ASTRA-sim group id (an integer as text; "0" is the world)."""

    names: tuple[tuple[str, str], ...] = ()

    def as_dict(self) -> dict[str, str]:
        return dict(self.names)


@dataclass(frozen=True)
class ExportResult:
    out_dir: Path
    workload_prefix: Path
    files: tuple[Path, ...]
    system: SystemConfig
    network: NetworkConfig
    renaming: GroupRenaming
    notes: tuple[str, ...] = field(default_factory=tuple)


# ---- implementations ----------------------------------------------------------------------------------
def dim_impl(collective: Collective, algorithm: Algorithm, dim: MappedDim) -> CollectiveImpl:
    """The ASTRA-sim implementation standing for genie's ``algorithm`` on one dimension."""
    if algorithm is Algorithm.AUTO:
        algorithm = Algorithm.DIRECT if collective is Collective.ALL_TO_ALL else Algorithm.RING
    if algorithm is Algorithm.RING:
        return CollectiveImpl(ImplKind.RING)
    if algorithm is Algorithm.DIRECT:
        return CollectiveImpl(ImplKind.DIRECT, -1 if dim.role is DimRole.INTRA_HOST else 1)
    if algorithm in (Algorithm.HALVING_DOUBLING, Algorithm.RECURSIVE_DOUBLING):
        if collective is Collective.ALL_TO_ALL:
            raise InputError("ASTRA-sim's halvingDoubling has no all-to-all", path=collective.value)
        if dim.npus_count & (dim.npus_count - 1):
            raise InputError(f"halvingDoubling needs a power-of-two dimension, {dim.description} has "
                             f"{dim.npus_count}", path=collective.value)
        return CollectiveImpl(ImplKind.HALVING_DOUBLING)
    if algorithm is Algorithm.DOUBLE_BINARY_TREE and collective is Collective.ALL_REDUCE:
        return CollectiveImpl(ImplKind.DOUBLE_BINARY_TREE)
    raise InputError(f"algorithm {algorithm.value} has no ASTRA-sim implementation for {collective.value}",
                     path=collective.value)


def trace_algorithms(trace: Trace) -> tuple[dict[Collective, Algorithm], tuple[str, ...]]:
    """Per collective type, the algorithm hint all its nodes agree on (mixed hints: the most common, noted)."""
    raw: Counter = Counter()  # (comm_type code, algorithm text): one pass over each collective's attributes
    for rank in trace.ranks:
        for node in rank.nodes:
            if node.kind is NodeKind.COLLECTIVE:
                code = hint = None
                for a in node.attrs:
                    if a.name == "comm_type":
                        code = a.value
                    elif a.name == "algorithm":
                        hint = a.value
                raw[(code, hint)] += 1
    seen: dict[Collective, Counter] = {}
    for (code, hint), count in raw.items():
        coll = CommType(code).collective if code in _COMM_CODES else None
        if coll in _EXPORTED:
            try:
                algorithm = Algorithm.parse(hint) if isinstance(hint, str) and hint else Algorithm.AUTO
            except ValueError:
                algorithm = Algorithm.AUTO  # a hint genie does not know, as TraceNode.algorithm
            seen.setdefault(coll, Counter())[algorithm] += count
    chosen, notes = {}, []
    for coll, counts in seen.items():
        algorithm = counts.most_common(1)[0][0]
        if len(counts) > 1:
            notes.append(f"{coll.value} nodes use several algorithms ({', '.join(a.value for a in counts)}); "
                         f"system.json takes {algorithm.value}")
        chosen[coll] = algorithm
    return chosen, tuple(notes)


def system_config(mapping: TopologyMapping, params: SystemParams = SystemParams(),
                  trace: Trace | None = None) -> tuple[SystemConfig, tuple[str, ...]]:
    """system.json for ``mapping``: implementations per dimension from the algorithms (see module doc)."""
    hinted, notes = trace_algorithms(trace) if trace is not None else ({}, ())
    impls = {}
    for coll in _EXPORTED:
        algorithm = params.algorithm_for(coll) or hinted.get(coll, Algorithm.AUTO)
        impls[coll] = tuple(dim_impl(coll, algorithm, d) for d in mapping.dims)
    if params.endpoint_delay_ns < 1:
        raise InputError("must be >= 1 (ASTRA-sim aborts on 0)", path="endpoint-delay")
    config = SystemConfig(scheduling_policy=params.scheduling_policy, endpoint_delay_ns=int(params.endpoint_delay_ns),
                          active_chunks_per_dimension=params.active_chunks_per_dimension,
                          preferred_dataset_splits=params.preferred_dataset_splits,
                          all_reduce_impl=impls[Collective.ALL_REDUCE], all_gather_impl=impls[Collective.ALL_GATHER],
                          reduce_scatter_impl=impls[Collective.REDUCE_SCATTER],
                          all_to_all_impl=impls[Collective.ALL_TO_ALL],
                          collective_optimization=params.collective_optimization,
                          local_mem_bw_gb_per_s=params.local_mem_bw_gb_per_s,
                          peak_perf_tflops=params.peak_perf_tflops)
    return config, notes


# ---- serializers (inverse of astra_adapter.config's parsers) --------------------------------------------
def system_json(config: SystemConfig) -> str:
    doc = {
        "scheduling-policy": config.scheduling_policy.value,
        "endpoint-delay": config.endpoint_delay_ns,
        "active-chunks-per-dimension": config.active_chunks_per_dimension,
        "preferred-dataset-splits": config.preferred_dataset_splits,
        "all-reduce-implementation": [i.spelled for i in config.all_reduce_impl],
        "all-gather-implementation": [i.spelled for i in config.all_gather_impl],
        "reduce-scatter-implementation": [i.spelled for i in config.reduce_scatter_impl],
        "all-to-all-implementation": [i.spelled for i in config.all_to_all_impl],
        "collective-optimization": config.collective_optimization.value,
        "intra-dimension-scheduling": config.intra_dimension_scheduling.value,
        "inter-dimension-scheduling": config.inter_dimension_scheduling.value,
        "boost-mode": int(config.boost_mode),
        "roofline-enabled": int(config.roofline_enabled),
        "peak-perf": config.peak_perf_tflops,
    }
    if config.local_mem_bw_gb_per_s is not None:
        doc["local-mem-bw"] = config.local_mem_bw_gb_per_s
    return json.dumps(doc, indent=4) + "\n"


def _yaml_list(values: list) -> str:
    return "[ " + ", ".join(str(v) for v in values) + " ]"


def network_yml(network: NetworkConfig) -> str:
    return (f"topology: {_yaml_list([d.topology.value for d in network.dims])}\n"
            f"npus_count: {_yaml_list([d.npus_count for d in network.dims])}\n"
            f"bandwidth: {_yaml_list([repr(float(d.bandwidth_gb_per_s)) for d in network.dims])}  # GB/s (2^30 B)\n"
            f"latency: {_yaml_list([repr(float(d.latency_ns)) for d in network.dims])}  # ns per hop\n")


def remote_memory_json(config: RemoteMemoryConfig = RemoteMemoryConfig()) -> str:
    doc: dict[str, object] = {"memory-type": config.memory_type.value}
    if config.memory_type is not MemoryType.NO_MEMORY_EXPANSION:
        doc.update({"remote-mem-latency": config.latency_ns, "remote-mem-bw": config.bw_gb_per_s,
                    "num-nodes": config.num_nodes, "num-npus-per-node": config.npus_per_node})
    return json.dumps(doc, indent=4) + "\n"


# ---- groups -------------------------------------------------------------------------------------------
def renumber_groups(trace: Trace) -> tuple[Trace, GroupRenaming]:
    """Groups renamed to ASTRA-sim's integer ids: the world-ordered group of all ranks -> "0", others 1, 2..."""
    world = tuple(range(trace.num_ranks))
    names: dict[str, str] = {}
    groups: list[ProcessGroup] = []
    for g in trace.groups:
        if g.name in names:
            continue
        if tuple(g.ranks) == world:
            names[g.name] = WORLD_GROUP_ID
            if all(x.name != WORLD_GROUP_ID for x in groups):
                groups.insert(0, ProcessGroup(WORLD_GROUP_ID, world))
        else:
            names[g.name] = str(sum(1 for v in names.values() if v != WORLD_GROUP_ID) + 1)
            groups.append(ProcessGroup(names[g.name], tuple(g.ranks)))
    if not names:
        return trace, GroupRenaming()
    ranks = []
    for rank in trace.ranks:
        nodes = tuple(n.with_attr("pg_name", names[n.process_group])
                      if n.process_group is not None and n.process_group in names else n for n in rank.nodes)
        ranks.append(replace(rank, nodes=nodes))
    return replace(trace, ranks=tuple(ranks), groups=tuple(groups)), GroupRenaming(tuple(names.items()))


def _rounding_notes(trace: Trace) -> tuple[str, ...]:
    """What ASTRA-sim loses reading durations in whole microseconds (``duration_micros``)."""
    seen: dict[int, int] = {}
    for rank in trace.ranks:
        for node in rank.nodes:
            if node.duration_ns % 1000:
                seen[id(node)] = node.duration_ns
    if not seen:
        return ()
    worst = max(abs(whole_micros(ns) * 1000 - ns) / ns for ns in seen.values())
    total_ns = sum(n.duration_ns for r in trace.ranks for n in r.nodes)
    change_ns = sum(whole_micros(n.duration_ns) * 1000 - n.duration_ns for r in trace.ranks for n in r.nodes)
    change = change_ns / max(1, total_ns)
    return (f"{len(seen)} distinct node durations are not whole microseconds: ASTRA-sim (and genie astra "
            f"simulate) read them rounded (duration_micros; up to {worst:.2%} per node, {change:+.4%} of all "
            "durations); genie estimate keeps the nanoseconds (duration_ns attribute)",)


def even_all_to_alls(trace: Trace) -> tuple[Trace, tuple[str, ...]]:
    """ASTRA-sim cannot express an uneven all-to-all: its ET all-to-all has one ``comm_size`` per node, split
    evenly over the group, and a group whose members give different sizes never finishes (the binary: "has
    unreleased nodes"). Each uneven instance (per-peer sizes, or members of different sizes) becomes the even
    all-to-all of its busiest member (genie.core.alltoallv.busiest_even_size) on every member - the busiest
    member's time, an upper bound for the others - and a note says so. The trace itself when there is none."""
    even, written = as_even_all_to_alls(trace)
    if not written:
        return trace, ()
    rank, node_id, size = written[0]
    return even, (f"{len(written)} uneven all-to-all(s) (per-peer sizes, e.g. MoE routing): ASTRA-sim cannot "
                  "express per-peer sizes (its all-to-all has one comm_size per node, split evenly, and members "
                  "must agree); each is written as the even all-to-all of its busiest member, the same comm_size "
                  f"on every member (rank {rank} node {node_id}: {size} B) - the busiest member's time, an upper "
                  "bound for the others",)


def _astra_runnable(trace: Trace) -> tuple[Trace, tuple[str, ...]]:
    """``trace`` without what the real ASTRA-sim (518bd51) aborts on, and notes saying what was left out:
    METADATA nodes (its Statistics asserts on their type, "Invalid node_type"; the process groups of a
    ``## process_group:init ##`` node are in comm_group.json), dependencies on nodes the trace does not have
    (its feeder: "Node 0 in ctrl_dep graph, but not found in index"; genie counts them as met), and per-peer
    all-to-all sizes (`even_all_to_alls`)."""
    trace, notes = even_all_to_alls(trace)
    metadata = sum(1 for r in trace.ranks for n in r.nodes if n.kind is NodeKind.METADATA)
    if metadata:
        trace = replace(trace, ranks=tuple(replace(r, nodes=tuple(n for n in r.nodes if n.kind is not NodeKind.METADATA))
                                           for r in trace.ranks))
        notes += (f"{metadata} METADATA nodes left out (ASTRA-sim asserts on them; process groups go to "
                  "comm_group.json)",)
    trace, dropped = drop_missing_deps(trace)
    if dropped:
        notes += (f"{dropped} dependencies on nodes the trace does not have dropped (genie counts them as met; "
                  "ASTRA-sim aborts on them)",)
    return trace, notes


# ---- the whole set ------------------------------------------------------------------------------------
def _check_exportable(trace: Trace, mapping: TopologyMapping, network: NetworkConfig) -> None:
    if trace.num_ranks != mapping.npus_count:
        raise InputError(f"the trace has {trace.num_ranks} ranks but topology {mapping.topology_name} maps to "
                         f"{mapping.npus_count} NPUs")
    if network.npus_per_dim != tuple(d.npus_count for d in mapping.dims):
        raise InputError(f"the network has dimensions {list(network.npus_per_dim)} but the topology maps to "
                         f"{[d.npus_count for d in mapping.dims]}", path="network")
    for rank in trace.ranks:
        for node in rank.nodes:
            if node.kind is NodeKind.COLLECTIVE and node.comm_type not in (
                    CommType.ALL_REDUCE, CommType.ALL_GATHER, CommType.REDUCE_SCATTER, CommType.ALL_TO_ALL,
                    CommType.BROADCAST):
                shown = node.comm_type.name if node.comm_type else node.comm_type_code
                raise InputError(f"rank {rank.rank} node {node.id} ({node.name}): collective {shown} is not "
                                 f"supported by ASTRA-sim")


def _small_groups(trace: Trace) -> frozenset[str]:
    return frozenset(g.name for g in trace.groups if len(set(g.ranks)) < trace.num_ranks)


def _check_group_impls(trace: Trace, system: SystemConfig) -> None:
    """ASTRA-sim runs a one-dimensional network's implementation in a group smaller than the world, and casts
    the group's ring to a tree for ``doubleBinaryTree``: the binary crashes (SIGSEGV, no output). Refused."""
    if len(system.all_reduce_impl) != 1 or system.all_reduce_impl[0].kind is not ImplKind.DOUBLE_BINARY_TREE:
        return
    small = _small_groups(trace)
    for rank in trace.ranks:
        for node in rank.nodes:
            if node.kind is NodeKind.COLLECTIVE and node.comm_type is CommType.ALL_REDUCE and \
                    node.process_group in small:
                raise InputError(f"all-reduce algorithm double_binary_tree (system.json all-reduce-implementation "
                                 f"doubleBinaryTree) on a one-dimensional topology with process group "
                                 f"{node.process_group!r} (rank {rank.rank} node {node.id}): ASTRA-sim crashes "
                                 "(segmentation fault) running it in a group smaller than the world; choose ring, "
                                 "direct or halving_doubling for all_reduce", path="all_reduce")


def _group_note(system: SystemConfig) -> str:
    if len(system.all_reduce_impl) > 1:
        return ("process groups smaller than the world run as one ring in ASTRA-sim on a multi-dimensional "
                "network, whatever system.json says")
    return ("process groups smaller than the world run system.json's implementation over their members in "
            "ASTRA-sim (one-dimensional network)")


@dataclass(frozen=True)
class Simulator:
    """What ``cmd.sh`` runs when ``$ASTRA_SIM`` is unset: genie's drop-in, by absolute paths (no PATH needed)."""

    argv: tuple[str, ...] = ("genie", "astra", "simulate")
    python_path: str | None = None  # prepended to PYTHONPATH (genie's source tree when it is not installed)


def command_line(workload: str, comm_group: str | None, simulator: Simulator = Simulator()) -> str:
    fallback = " ".join(shlex.quote(a) for a in simulator.argv)
    argv = [f"${{ASTRA_SIM:-{fallback}}}", shlex.quote(f"--workload-configuration={workload}"),
            "--system-configuration=system.json", "--network-configuration=network.yml",
            "--remote-memory-configuration=remote_memory.json"]
    if comm_group:  # the names are the user's (--name): quoted, never shell text
        argv.append(shlex.quote(f"--comm-group-configuration={comm_group}"))
    env = ""
    if simulator.python_path:
        env = f"PYTHONPATH={shlex.quote(simulator.python_path)}${{PYTHONPATH:+:$PYTHONPATH}} "
    return ("#!/bin/sh\n# Run from this directory. ASTRA_SIM: path of AstraSim_Analytical_Congestion_Unaware (or\n"
            "# _Aware); unset, genie's drop-in for it runs with the same options.\ncd \"$(dirname \"$0\")\"\n"
            + env + " \\\n    ".join(argv) + "\n")


def export_astra(trace: Trace, mapping: TopologyMapping, out_dir: str | Path, *, network: NetworkConfig | None = None,
                 params: SystemParams = SystemParams(), name: str = "workload",
                 simulator: Simulator = Simulator()) -> ExportResult:
    """Write the ASTRA-sim input set for ``trace`` on ``mapping`` (``network``: calibrated, else from the links)."""
    out = Path(out_dir)
    network = network or mapping.network()
    _check_exportable(trace, mapping, network)
    system, notes = system_config(mapping, params, trace)
    _check_group_impls(trace, system)
    trace, dropped = _astra_runnable(trace)
    notes += dropped
    renamed, renaming = renumber_groups(trace)
    files: dict[Path, bytes] = {}
    prefix = out / "workload" / name
    for i, rank in enumerate(renamed.ranks):
        files[prefix.with_name(f"{name}.{i}.et")] = write_et(rank.nodes, rank.metadata)
    comm_group = None
    listed = tuple(g for g in renamed.groups if g.name != WORLD_GROUP_ID)  # ASTRA-sim asserts ids > 0
    if listed:
        comm_group = f"workload/{name}{COMM_GROUP_SUFFIX}"
        files[out / comm_group] = write_comm_groups(listed)
    if renamed.groups:
        files[prefix.with_name(f"{name}.group_names.json")] = (json.dumps(renaming.as_dict(), indent=1)
                                                               + "\n").encode()
    texts = {"system.json": system_json(system), "network.yml": network_yml(network),
             "remote_memory.json": remote_memory_json()}
    parse_system(texts["system.json"], source="system.json")  # what we write must read back
    parse_network(texts["network.yml"], source="network.yml")
    parse_remote_memory(texts["remote_memory.json"], source="remote_memory.json")
    all_notes = (*mapping.notes, *notes, *_rounding_notes(trace))
    if any(len(g.ranks) < trace.num_ranks for g in trace.groups):
        all_notes += (_group_note(system),)
    mapping_doc = {"topology": mapping.topology_name, "shape": mapping.shape.value,
                   "ranks_per_host": mapping.ranks_per_host,
                   "dimensions": [{"role": d.role.value, "topology": d.topology.value, "npus_count": d.npus_count,
                                   "bandwidth_gb_per_s": n.bandwidth_gb_per_s, "latency_ns": n.latency_ns,
                                   "what": d.description} for d, n in zip(mapping.dims, network.dims)],
                   "groups": renaming.as_dict(), "notes": list(all_notes)}
    texts["mapping.json"] = json.dumps(mapping_doc, indent=1) + "\n"
    texts["cmd.sh"] = command_line(f"workload/{name}", comm_group, simulator)
    for file_name, text in texts.items():
        files[out / file_name] = text.encode()
    for path, data in files.items():
        write_atomic(path, data)
    (out / "cmd.sh").chmod(0o755)
    return ExportResult(out, prefix, tuple(files), system, network, renaming, tuple(all_notes))
