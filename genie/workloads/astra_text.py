"""ASTRA-sim 1.0 text workloads -> Trace (one training iteration per rank).

The file is read as ASTRA-sim reads it, as a stream of whitespace-separated tokens (tabs, spaces and line
breaks are all alike): the parallelism policy and its parameters (``model_parallel_NPU_group: M`` for
HYBRID_TRANSFORMER*, checkpoint lists for HYBRID_TRANSFORMER_FWD_IN_BCKWD, the last bottom layer for
HYBRID_DLRM), the layer count, then per layer 12 tokens -- name, reserved, forward compute, comm type, comm
size, input-gradient compute, comm type, comm size, weight-gradient compute, comm type, comm size, update
delay -- and for HYBRID_CUSTOMIZED a 13th, the layer's own policy. Compute times are cycles (1 cycle = 1 ns),
sizes bytes. Comm types: ALLREDUCE, ALLGATHER, REDUCESCATTER, ALLTOALL, ALLREDUCEALLTOALL, NONE.

Which comms happen and on which ranks follows ASTRA-sim's ``decode_involved_dimensions``: DATA, MICRO and
HYBRID_DLRM run only weight-gradient comms, on all ranks (DLRM's layer 0 also its forward/input-gradient
all-to-all); MODEL only forward/input-gradient comms, on all ranks; the hybrids run forward/input-gradient
comms on the model-parallel groups and weight-gradient comms on the data-parallel groups. Model-parallel
groups are blocks of consecutive ranks (network dimension 0 first): of ``model_parallel_NPU_group`` ranks for
the transformers, of ``dim0_npus`` for HYBRID_DATA_MODEL (and the data-parallel block for HYBRID_MODEL_DATA).

The DAG of one iteration: forward layer by layer (forward comm blocking); backward from the last layer:
weight-gradient compute, its comm non-blocking (then the update delay), input-gradient compute (not for
layer 0) and its comm blocking. DLRM: the embedding all-to-all overlaps the bottom MLP and joins before the
top MLP; its backward all-to-all starts after the top MLP's backward. FWD_IN_BCKWD: at each initiating layer
the forward pass since the preceding checkpoint is recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from genie.core.errors import InputError, shown
from genie.core.limits import MAX_TRACE_RANKS
from genie.core.trace import (CommType, ProcessGroup, RankTrace, Trace, TraceNode, collective_node, compute_node)


class Policy(Enum):
    DATA = "DATA"
    MODEL = "MODEL"
    HYBRID_DATA_MODEL = "HYBRID_DATA_MODEL"
    HYBRID_MODEL_DATA = "HYBRID_MODEL_DATA"
    HYBRID_DLRM = "HYBRID_DLRM"
    HYBRID_DLRM_ENHANCED = "HYBRID_DLRM_ENHANCED"
    HYBRID_TRANSFORMER = "HYBRID_TRANSFORMER"
    HYBRID_TRANSFORMER_FWD_IN_BCKWD = "HYBRID_TRANSFORMER_FWD_IN_BCKWD"
    HYBRID_CUSTOMIZED = "HYBRID_CUSTOMIZED"
    MICRO = "MICRO"
    DISTRIBUTED_INFERENCE = "DISTRIBUTED_INFERENCE"


_COMM = {"ALLREDUCE": (CommType.ALL_REDUCE,), "ALLGATHER": (CommType.ALL_GATHER,),
         "REDUCESCATTER": (CommType.REDUCE_SCATTER,), "ALLTOALL": (CommType.ALL_TO_ALL,),
         "ALLREDUCEALLTOALL": (CommType.ALL_REDUCE, CommType.ALL_TO_ALL), "NONE": ()}


class Scope(Enum):
    NONE = "none"  # the comm does not happen
    ALL = "all"
    MODEL = "model"  # model-parallel group
    DATA = "data"  # data-parallel group


@dataclass(frozen=True)
class Pass:
    compute_ns: int
    comm: tuple[CommType, ...]
    size_bytes: int


@dataclass(frozen=True)
class Layer:
    name: str
    fwd: Pass
    ig: Pass
    wg: Pass
    update_ns: int
    policy: Policy | None = None  # HYBRID_CUSTOMIZED: the layer's own


@dataclass(frozen=True)
class AstraWorkload:
    policy: Policy
    layers: tuple[Layer, ...]
    model_parallel_npus: int | None = None
    checkpoints: tuple[int, ...] = ()
    checkpoint_initiates: tuple[int, ...] = ()
    dlrm_last_bottom_layer: int | None = None


class _Tokens:
    def __init__(self, text: str, source: str) -> None:
        self.items = [(tok, n) for n, line in enumerate(text.splitlines(), 1) for tok in line.split()]
        self.pos = 0
        self.source = source

    def error(self, message: str) -> InputError:
        line = self.items[min(self.pos, len(self.items) - 1)][1] if self.items else 1
        return InputError(message, source=self.source, path=f"line {line}")

    def word(self, what: str) -> str:
        if self.pos >= len(self.items):
            raise self.error(f"file ends where {what} was expected")
        self.pos += 1
        return self.items[self.pos - 1][0]

    def int(self, what: str) -> int:
        tok = self.word(what)
        try:
            return int(tok)
        except ValueError:
            self.pos -= 1
            raise self.error(f"{what}: expected an integer, got {shown(tok)}") from None

    def policy(self, what: str) -> Policy:
        tok = self.word(what)
        try:
            return Policy(tok)
        except ValueError:
            self.pos -= 1
            raise self.error(f"{what}: unknown parallelism {shown(tok)} (expected one of: "
                             f"{', '.join(p.value for p in Policy)})") from None

    def comm(self, what: str) -> tuple[CommType, ...]:
        tok = self.word(what)
        if tok not in _COMM:
            self.pos -= 1
            raise self.error(f"{what}: unknown comm type {shown(tok)} (expected one of: {', '.join(_COMM)})")
        return _COMM[tok]


def parse_astra_text(text: str, *, source: str = "<text>") -> AstraWorkload:
    t = _Tokens(text, source)
    policy = t.policy("parallelism policy")
    mp = None
    checkpoints: tuple[int, ...] = ()
    initiates: tuple[int, ...] = ()
    last_bottom = None
    if policy in (Policy.HYBRID_TRANSFORMER, Policy.HYBRID_TRANSFORMER_FWD_IN_BCKWD):
        t.word("'model_parallel_NPU_group:'")
        mp = t.int("model_parallel_NPU_group")
        if mp < 1:
            raise t.error("model_parallel_NPU_group must be >= 1")
        if policy is Policy.HYBRID_TRANSFORMER_FWD_IN_BCKWD:
            t.word("'checkpoints:'")
            checkpoints = tuple(t.int("checkpoint layer") for _ in range(t.int("checkpoint count")))
            t.word("'checkpoint_initiates:'")
            initiates = tuple(t.int("initiating layer") for _ in range(t.int("checkpoint_initiates count")))
    elif policy in (Policy.HYBRID_DLRM, Policy.HYBRID_DLRM_ENHANCED):
        last_bottom = t.int("DLRM last bottom layer")
    count = t.int("layer count")
    layers = []
    for i in range(count):
        name = t.word(f"layer {i} name")
        where = f"layer {i} ({name})"
        t.int(f"{where} reserved field")
        passes = []
        for stage in ("forward", "input-gradient", "weight-gradient"):
            compute = t.int(f"{where} {stage} compute")
            comm = t.comm(f"{where} {stage} comm type")
            size = t.int(f"{where} {stage} comm size")
            if compute < 0 or size < 0:
                raise t.error(f"{where} {stage}: negative compute time or size")
            passes.append(Pass(compute, comm, size))
        update = t.int(f"{where} update delay")
        own = t.policy(f"{where} parallelism") if policy is Policy.HYBRID_CUSTOMIZED else None
        layers.append(Layer(name, *passes, update, own))
    if t.pos < len(t.items):
        raise t.error(f"unexpected {shown(t.items[t.pos][0])} after the {count} layers the file announces")
    if last_bottom is not None and not 0 <= last_bottom < count - 1:
        raise InputError(f"DLRM last bottom layer {last_bottom} is not below the last layer", source=source)
    return AstraWorkload(policy, tuple(layers), mp, checkpoints, initiates, last_bottom)


def _scopes(policy: Policy) -> tuple[Scope, Scope, Scope]:
    """(forward, input-gradient, weight-gradient) scope, as ASTRA-sim's decode_involved_dimensions."""
    if policy in (Policy.DATA, Policy.HYBRID_DLRM, Policy.HYBRID_DLRM_ENHANCED, Policy.MICRO):
        return Scope.NONE, Scope.NONE, Scope.ALL
    if policy in (Policy.MODEL, Policy.DISTRIBUTED_INFERENCE):
        return Scope.ALL, Scope.ALL, Scope.NONE
    return Scope.MODEL, Scope.MODEL, Scope.DATA


class _Builder:
    """Builds one rank's nodes; ``tail`` is what the next blocking step waits for."""

    def __init__(self, workload: AstraWorkload, rank: int, npus: int, block: int | None, source: str) -> None:
        self.w, self.rank, self.npus, self.block, self.source = workload, rank, npus, block, source
        self.nodes: list[TraceNode] = []
        self.groups: dict[str, tuple[int, ...]] = {}

    def _group(self, scope: Scope, layer_policy: Policy) -> str | None:
        block = self.block
        if block is None:
            raise InputError(f"{layer_policy.value} needs the size of network dimension 0 (dim0_npus)",
                             source=self.source)
        consecutive = scope is Scope.MODEL
        if layer_policy is Policy.HYBRID_MODEL_DATA:
            consecutive = not consecutive  # data parallel on dimension 0
        if consecutive:
            start = self.rank - self.rank % block
            ranks, name = tuple(range(start, min(start + block, self.npus))), f"dim0_{start // block}"
        else:
            ranks, name = tuple(range(self.rank % block, self.npus, block)), f"dims1+_{self.rank % block}"
        if len(ranks) == self.npus:
            return None
        self.groups[name] = ranks
        return name

    def compute(self, name: str, ns: int, deps: list[int]) -> int:
        self.nodes.append(compute_node(len(self.nodes), name, duration_ns=ns, data_deps=tuple(deps)))
        return len(self.nodes) - 1

    def comm(self, name: str, p: Pass, scope: Scope, policy: Policy, deps: list[int]) -> list[int]:
        """Emit the pass's collective(s) if they happen; returns the ids the next blocking step waits for."""
        if scope is Scope.NONE or not p.comm:
            return deps
        group = None if scope is Scope.ALL else self._group(scope, policy)
        for k, comm in enumerate(p.comm):
            self.nodes.append(collective_node(len(self.nodes), f"{name}{'' if k == 0 else k}", comm_type=comm,
                                              size_bytes=p.size_bytes, process_group=group, data_deps=tuple(deps)))
            deps = [len(self.nodes) - 1]
        return deps

    def layer_scopes(self, i: int) -> tuple[Policy, tuple[Scope, Scope, Scope]]:
        layer = self.w.layers[i]
        policy = layer.policy or self.w.policy
        if self.w.policy in (Policy.HYBRID_DLRM, Policy.HYBRID_DLRM_ENHANCED) and i == 0:
            return policy, (Scope.ALL, Scope.ALL, Scope.ALL)
        return policy, _scopes(policy)

    def forward(self, i: int, deps: list[int], prefix: str = "") -> list[int]:
        layer = self.w.layers[i]
        policy, (fwd, _, _) = self.layer_scopes(i)
        c = self.compute(f"{prefix}{layer.name}.fwd", layer.fwd.compute_ns, deps)
        return self.comm(f"{prefix}{layer.name}.fwd_comm", layer.fwd, fwd, policy, [c])

    def backward(self, i: int, deps: list[int], *, with_ig: bool) -> list[int]:
        layer = self.w.layers[i]
        policy, (_, ig, wg) = self.layer_scopes(i)
        w = self.compute(f"{layer.name}.wg", layer.wg.compute_ns, deps)
        done = self.comm(f"{layer.name}.wg_comm", layer.wg, wg, policy, [w])
        if layer.update_ns:
            self.compute(f"{layer.name}.update", layer.update_ns, done)
        if not with_ig:
            return [w]
        g = self.compute(f"{layer.name}.ig", layer.ig.compute_ns, [w])
        return self.comm(f"{layer.name}.ig_comm", layer.ig, ig, policy, [g])


def _build_rank(w: AstraWorkload, rank: int, npus: int, block: int | None, source: str) -> _Builder:
    b = _Builder(w, rank, npus, block, source)
    n = len(w.layers)
    if w.dlrm_last_bottom_layer is not None:
        lb = w.dlrm_last_bottom_layer
        emb = b.compute(f"{w.layers[0].name}.fwd", w.layers[0].fwd.compute_ns, [])
        emb_comm = b.comm(f"{w.layers[0].name}.fwd_comm", w.layers[0].fwd, Scope.ALL, w.policy, [emb])
        tail = [emb]
        for i in range(1, n):
            tail = b.forward(i, tail + (emb_comm if i == lb + 1 else []))
        for i in range(n - 1, 0, -1):
            tail = b.backward(i, tail, with_ig=True)
            if i == lb + 1:
                layer0 = w.layers[0]
                g = b.compute(f"{layer0.name}.ig", layer0.ig.compute_ns, tail)
                emb_grad = b.comm(f"{layer0.name}.ig_comm", layer0.ig, Scope.ALL, w.policy, [g])
        b.backward(0, tail + emb_grad, with_ig=False)
        return b
    tail: list[int] = []
    for i in range(n):
        tail = b.forward(i, tail)
    checkpoints = sorted(w.checkpoints)
    for i in range(n - 1, -1, -1):
        if i in w.checkpoint_initiates:
            start = max((c for c in checkpoints if c < i), default=-1) + 1
            for j in range(start, i + 1):
                tail = b.forward(j, tail, prefix="recompute.")
        tail = b.backward(i, tail, with_ig=i > 0)
    return b


def read_astra_text(text: str, *, npus: int, source: str = "<text>", dim0_npus: int | None = None,
                    iterations: int = 1) -> Trace:
    """The Trace of ``iterations`` training iterations of an ASTRA-sim 1.0 text workload on ``npus`` ranks."""
    if npus < 1:
        raise InputError(f"npus must be >= 1, got {npus}", source=source)
    if npus > MAX_TRACE_RANKS:
        raise InputError(f"npus must be at most {MAX_TRACE_RANKS} (the most ranks genie reads of a trace), "
                         f"got {npus}", source=source, path="npus")
    if iterations < 1:
        raise InputError(f"iterations must be >= 1, got {iterations}", source=source)
    w = parse_astra_text(text, source=source)
    block = w.model_parallel_npus or dim0_npus
    if block is not None and (block < 1 or npus % block):
        raise InputError(f"the model-parallel/dimension-0 group of {block} ranks does not divide {npus} ranks",
                         source=source)
    ranks, groups = [], {}
    for rank in range(npus):
        b = _build_rank(w, rank, npus, block, source)
        nodes = b.nodes
        for it in range(1, iterations):  # chain copies: iteration k starts after iteration k-1 ends
            base = it * len(b.nodes)
            sinks = [n.id + base - len(b.nodes) for n in b.nodes if not any(n.id in m.deps for m in b.nodes)]
            for n in b.nodes:
                deps = tuple(d + base for d in n.data_deps) or tuple(sinks)
                nodes = [*nodes, TraceNode(n.id + base, f"iter{it}.{n.name}", n.kind, deps, (), n.duration_ns,
                                           attrs=n.attrs)]
        ranks.append(RankTrace(rank, tuple(nodes)))
        groups.update(b.groups)
    info = (("format", "astra_text"), ("policy", w.policy.value), ("layers", str(len(w.layers))))
    return Trace(tuple(ranks), tuple(ProcessGroup(k, v) for k, v in sorted(groups.items())), info)
