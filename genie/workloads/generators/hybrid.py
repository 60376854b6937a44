"""One training iteration of a transformer or ResNet under DP x TP x PP (x EP) as per-rank DAGs.

What each rank does, in issue order (see docs/generators.md for the formulas):
- its pipeline stage's 1F1B schedule of micro-batch forwards and backwards (plain gradient accumulation when
  PP = 1); a stage after the first receives the activation before each forward and sends the input gradient
  after each backward; a stage before the last sends the activation after each forward and receives the
  output gradient before each backward (unique tags per boundary, micro-batch and direction);
- per transformer block (Megatron tensor parallelism): the block's compute split ``1/TP``, then an all-reduce of
  ``b*s*h*dtype`` after attention and after the MLP in the forward, and after each in the backward (4 per layer
  and micro-batch); the vocabulary-parallel embedding all-reduces its output, the parallel cross-entropy
  all-reduces 3 x ``b*s`` fp32 values, the output projection all-reduces its input gradient. With sequence
  parallelism each all-reduce becomes a reduce-scatter and the block input an all-gather;
- per MoE block: router, all-to-all dispatch of ``b*s*top_k*h*dtype`` over the expert-parallel group, the local
  experts, all-to-all combine (and the mirror image in the backward); with a routing skew
  (genie.workloads.generators.routing) the all-to-alls are uneven (per-peer sizes recorded) and each rank's
  experts compute the tokens they were sent;
- DDP: gradient buckets all-reduced over the data-parallel group during the last micro-batch's backward, as each
  bucket fills (expert gradients over the expert-data-parallel group); FSDP/ZeRO-3: per unit (transformer
  layer, residual block) an all-gather of the parameters before its forward and again before its backward
  (prefetched one unit ahead), and a reduce-scatter of its gradients after its last backward;
- tied embeddings split over a pipeline: the first and last stages all-reduce the word-embedding gradient;
- the optimizer step once all gradients are reduced.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from genie.core.errors import InputError
from genie.core.trace import CommType, Trace, TraceNode, make_trace
from genie.workloads.generators.blocks import Block, BlockKind, ModelGraph, resnet_graph, transformer_graph
from genie.workloads.generators.buckets import assign_buckets
from genie.workloads.generators.config import DataParallelMode, TrainingConfig
from genie.workloads.generators.layout import GroupKind, Layout, Parallelism, make_layout
from genie.workloads.generators.pipeline import Phase, one_f_one_b, stage_units
from genie.workloads.generators.program import RankProgram
from genie.workloads.generators.routing import RoutingMatrix, routing_matrix
from genie.workloads.presets import (OPTIMIZER_BYTES_PER_PARAM, Device, Dtype, ResNetModel, TransformerModel)

LOSS_ALL_REDUCES = 3  # Megatron's vocab-parallel cross-entropy: max logit, target logit, sum of exponentials
LOSS_VALUE_BYTES = 4  # fp32 per token
_SHORT = {CommType.ALL_REDUCE: "allreduce", CommType.ALL_GATHER: "allgather",
          CommType.REDUCE_SCATTER: "reducescatter", CommType.ALL_TO_ALL: "alltoall"}
_LAYER_KINDS = (BlockKind.ATTENTION, BlockKind.MLP, BlockKind.MOE)


def model_graph(model: TransformerModel | ResNetModel, dtype: Dtype) -> ModelGraph:
    if isinstance(model, TransformerModel):
        return transformer_graph(model, dtype_bytes=dtype.size_bytes)
    return resnet_graph(model, dtype_bytes=dtype.size_bytes)


def _check(model: TransformerModel | ResNetModel, par: Parallelism, cfg: TrainingConfig) -> None:
    if isinstance(model, TransformerModel):
        for what, value in (("attention heads", model.num_heads), ("KV heads", model.num_kv_heads),
                            ("the FFN width", model.ffn_hidden_size), ("the hidden size", model.hidden_size)):
            if value % par.tp:
                raise InputError(f"tensor parallelism {par.tp} does not divide {what} ({value}) of {model.name}",
                                 path="tp")
        if cfg.sequence_parallel and model.seq_len % par.tp:
            raise InputError(f"sequence parallelism needs tp ({par.tp}) to divide the sequence length "
                             f"({model.seq_len})", path="seq")
        if par.ep > 1 and (not model.is_moe or model.num_experts % par.ep):
            raise InputError(f"expert parallelism {par.ep} needs an MoE model whose expert count it divides "
                             f"({model.name} has {model.num_experts} experts)", path="ep")
    else:
        for key in ("tp", "ep"):
            if getattr(par, key) > 1:
                raise InputError(f"{model.name} is not a transformer: {key} must be 1", path=key)
    if cfg.dp_mode is DataParallelMode.FSDP and (par.pp > 1 or par.ep > 1):
        raise InputError("fsdp (ZeRO-3) is generated with tp and dp only (pp and ep must be 1)", path="dp_mode")


@dataclass(frozen=True)
class _Job:
    graph: ModelGraph
    par: Parallelism
    cfg: TrainingConfig
    device: Device
    layout: Layout
    stages: tuple[tuple[tuple[int, tuple[Block, ...]], ...], ...]  # per stage: (unit, blocks)

    @property
    def dtype_bytes(self) -> int:
        return self.cfg.dtype.size_bytes

    @property
    def act_bytes(self) -> int:
        """b * s * h * dtype: the hidden states of one micro-batch (TP collectives)."""
        return self.cfg.micro_batch_size * self.graph.seq_len * self.graph.hidden_size * self.dtype_bytes

    @property
    def sequence_parallel(self) -> bool:
        return self.cfg.sequence_parallel and self.par.tp > 1

    def boundary_bytes(self, stage: int) -> int:
        """The activation stage ``stage`` sends to ``stage + 1`` (per micro-batch)."""
        last = self.stages[stage][-1][1][-1]
        size = last.out_bytes_per_sample * self.cfg.micro_batch_size
        return size // self.par.tp if self.sequence_parallel else size


def _tied_copy(graph: ModelGraph, pp: int) -> ModelGraph:
    """With tied embeddings over several stages, the last stage holds its own copy of the word embedding."""
    if not graph.tied_embeddings or pp < 2:
        return graph
    emb = next(b for b in graph.blocks if b.kind is BlockKind.EMBEDDING).params[0]
    blocks = tuple(replace(b, params=(*b.params, replace(emb, name="lm_head.weight(tied)")))
                   if b.kind is BlockKind.HEAD else b for b in graph.blocks)
    return replace(graph, blocks=blocks)


def _unit_label(blocks: tuple[Block, ...]) -> str:
    if len(blocks) == 1:
        return blocks[0].name
    prefix = os.path.commonprefix([b.name for b in blocks])
    return prefix[:prefix.rfind(".")] if "." in prefix else blocks[0].name


class _RankEmitter:
    """Emits one rank's iterations (state lives for one generator call)."""

    def __init__(self, job: _Job, rank: int) -> None:
        self.job, self.rank = job, rank
        par = job.par
        self.c = job.layout.coords(rank)
        self.prog = RankProgram(rank, job.device, job.cfg.dtype)
        self.units = job.stages[self.c.pp]
        self.blocks = tuple(b for _, blocks in self.units for b in blocks)
        self.group = {kind: job.layout.group_of(rank, kind) for kind in GroupKind}
        self.prev = job.layout.rank(replace(self.c, pp=self.c.pp - 1)) if self.c.pp > 0 else None
        self.next = job.layout.rank(replace(self.c, pp=self.c.pp + 1)) if self.c.pp < par.pp - 1 else None
        self.fsdp = job.cfg.dp_mode is DataParallelMode.FSDP
        self.buckets = () if self.fsdp else assign_buckets(
            self.blocks, tp=par.tp, ep=par.ep, dtype_bytes=job.dtype_bytes, bucket_bytes=job.cfg.bucket_size_bytes,
            first_bucket_bytes=job.cfg.first_bucket_size_bytes)
        self.param_bytes = {b.name: sum(t.local_elements(par.tp, par.ep) for t in b.params) * job.dtype_bytes
                            for b in self.blocks}
        self.local_params = sum(self.param_bytes.values()) // job.dtype_bytes

    # ---- helpers ------------------------------------------------------------------------------------------
    def _coll(self, comm: CommType, kind: GroupKind, what: str, size: int, deps: tuple[int, ...],
              splits: tuple[tuple[int, ...], tuple[int, ...]] | None = None) -> int | None:
        group = self.group[kind]
        if group is None:
            return None
        send, recv = splits or (None, None)
        return self.prog.collective(f"{_SHORT[comm]}.{kind.value}.{what}", comm, size, group, deps,
                                    send_split_bytes=send, recv_split_bytes=recv)

    def _tag(self, boundary: int, mb: int, phase: Phase) -> int:
        m, pp = self.job.cfg.micro_batches, self.job.par.pp
        return ((self.it * pp + boundary) * m + mb) * 2 + (phase is Phase.BACKWARD)

    def _local_param_bytes(self, block: Block) -> int:
        return self.param_bytes[block.name]

    # ---- one block ------------------------------------------------------------------------------------------
    def _tp_before(self, block: Block, phase: Phase, mb: int, deps: tuple[int, ...]) -> tuple[int, ...]:
        """Sequence parallelism: all-gather the sequence-sharded input (or output gradient) of a block."""
        job = self.job
        gathers = _LAYER_KINDS + ((BlockKind.HEAD,) if phase is Phase.FORWARD else (BlockKind.EMBEDDING,))
        if not job.sequence_parallel or block.kind not in gathers:
            return deps
        what = f"{phase.value}.mb{mb}.{block.name}"
        return (self._coll(CommType.ALL_GATHER, GroupKind.TP, what, job.act_bytes // job.par.tp, deps),)

    def _tp_after(self, block: Block, phase: Phase, mb: int, cur: int) -> int:
        """Megatron's tensor-parallel reduction after a block (see the module docstring)."""
        job, kind = self.job, block.kind
        if job.par.tp == 1 or not kind.tensor_parallel or (kind is BlockKind.EMBEDDING and phase is Phase.BACKWARD):
            return cur
        what = f"{phase.value}.mb{mb}.{block.name}"
        if kind is BlockKind.HEAD and phase is Phase.FORWARD:
            loss = job.cfg.micro_batch_size * job.graph.seq_len * LOSS_VALUE_BYTES
            for i in range(LOSS_ALL_REDUCES):
                cur = self._coll(CommType.ALL_REDUCE, GroupKind.TP, f"{what}.loss{i}", loss, (cur,))
            return cur
        comm = CommType.REDUCE_SCATTER if job.sequence_parallel else CommType.ALL_REDUCE
        return self._coll(comm, GroupKind.TP, what, job.act_bytes, (cur,))

    def _block(self, block: Block, phase: Phase, mb: int, deps: tuple[int | None, ...]) -> int:
        job, prog = self.job, self.prog
        split = job.par.tp if block.kind.tensor_parallel else 1
        scale = job.cfg.micro_batch_size / split * (1 if phase is Phase.FORWARD else 2)
        # weights are read once per micro-batch, except by an embedding lookup (only the looked-up rows)
        lookup = block.kind is BlockKind.EMBEDDING and phase is Phase.FORWARD
        param_bytes = 0 if lookup else self._local_param_bytes(block)
        ready = self._tp_before(block, phase, mb, tuple(d for d in deps if d is not None))
        if block.kind is BlockKind.MOE:
            cur = self._moe(block, phase, mb, ready, scale, param_bytes)
        else:
            cur = prog.compute(f"{phase.value}.mb{mb}.{block.name}", flops=block.fwd_flops_per_sample * scale,
                               bytes_moved=param_bytes + block.fwd_bytes_per_sample * scale, deps=ready)
        return self._tp_after(block, phase, mb, cur)

    def _moe(self, block: Block, phase: Phase, mb: int, deps: tuple[int, ...], scale: float,
             param_bytes: int) -> int:
        job, prog = self.job, self.prog
        what = f"{phase.value}.mb{mb}.{block.name}"
        tokens = job.cfg.micro_batch_size * job.graph.seq_len // (job.par.tp if job.sequence_parallel else 1)
        token_bytes = job.graph.hidden_size * job.dtype_bytes
        a2a = tokens * job.graph.top_k * token_bytes
        router_flops = (block.fwd_flops_per_sample - block.expert_flops_per_sample) * scale
        expert_flops = block.expert_flops_per_sample * scale
        act_bytes = block.fwd_bytes_per_sample * scale / 2
        routed = self._routing(block, mb, tokens)  # None: even
        if routed is not None:
            pos, m = routed
            sent = tuple(t * token_bytes for t in m[pos])  # dispatch: my tokens to each expert rank
            got = tuple(row[pos] * token_bytes for row in m)  # and the tokens each rank routes to my experts
            expert_flops *= sum(got) / a2a  # the experts compute what they were sent
            # forward dispatch and backward combine send the tokens out; forward combine and backward dispatch
            # bring them back
            out_splits = {"dispatch": (sent, got), "combine": (got, sent)}
            if phase is Phase.BACKWARD:
                out_splits = {"dispatch": (got, sent), "combine": (sent, got)}
        steps = ("router", "dispatch", "experts", "combine")
        if phase is Phase.BACKWARD:
            steps = ("combine", "experts", "dispatch", "router")
        cur = deps
        for step in steps:
            if step in ("dispatch", "combine"):
                splits = out_splits[step] if routed is not None else None
                size = sum(splits[0]) if splits is not None else a2a
                node = self._coll(CommType.ALL_TO_ALL, GroupKind.EP, f"{what}.{step}", size, cur, splits)
            else:
                flops = router_flops if step == "router" else expert_flops
                node = prog.compute(f"{what}.{step}", flops=flops, deps=cur,
                                    bytes_moved=act_bytes + (param_bytes if step == "experts" else 0))
            cur = (node,) if node is not None else cur
        return cur[0]

    def _routing(self, block: Block, mb: int, tokens: int) -> tuple[int, RoutingMatrix] | None:
        """(my position in the EP group, the tokens each member routes to each) under a routing skew."""
        job, name = self.job, self.group[GroupKind.EP]
        if job.cfg.routing_skew <= 0 or name is None:
            return None
        group = next(g for g in job.layout.groups if g.name == name)
        router = next(t for t in block.params if t.name.endswith("router.weight"))
        m = routing_matrix(tokens=tokens, top_k=job.graph.top_k, experts=router.elements // job.graph.hidden_size,
                           ep=len(group.ranks), skew=job.cfg.routing_skew, seed=job.cfg.routing_seed,
                           key=(self.it, block.unit, mb, job.layout.groups.index(group)))
        return group.ranks.index(self.rank), m

    # ---- one micro-batch --------------------------------------------------------------------------------------
    def _gather(self, blocks: tuple[Block, ...], phase: Phase, mb: int) -> int | None:
        """FSDP: all-gather a unit's parameters once the compute before the current unit is done."""
        if not self.fsdp or self.group[GroupKind.DP] is None:
            return None
        elements = sum(self._local_param_bytes(b) for b in blocks) // self.job.dtype_bytes
        if not elements:
            return None
        shard = -(-elements // self.job.par.dp)
        deps = () if self.prog.last_compute is None else (self.prog.last_compute,)
        return self._coll(CommType.ALL_GATHER, GroupKind.DP, f"{phase.value}.mb{mb}.{_unit_label(blocks)}",
                          shard * self.job.dtype_bytes, deps)

    def _units(self, phase: Phase, mb: int, cur: int | None, *, reduce_grads: bool = False) -> int | None:
        """Run the stage's units in ``phase`` order. FSDP gathers one unit ahead (its backward prefetch and rate
        limiter: the gather of unit i+1 is issued as unit i starts). With ``reduce_grads`` (the last micro-batch's
        backward), DDP buckets are all-reduced as blocks complete them, FSDP units reduce-scattered."""
        units = self.units if phase is Phase.FORWARD else tuple(reversed(self.units))
        gathered = {0: self._gather(units[0][1], phase, mb)}
        for k, (_, blocks) in enumerate(units):
            if k + 1 < len(units):
                gathered[k + 1] = self._gather(units[k + 1][1], phase, mb)
            ordered = blocks if phase is Phase.FORWARD else tuple(reversed(blocks))
            for i, block in enumerate(ordered):
                cur = self._block(block, phase, mb, (cur, gathered[k] if i == 0 else None))
                if reduce_grads:
                    self._reduce_buckets(block, self.prog.last_compute)
            if reduce_grads and self.fsdp:
                self._reduce_scatter(blocks, self.prog.last_compute)
        return cur

    def forward(self, mb: int) -> None:
        prog, job = self.prog, self.job
        cur = None
        if self.prev is not None:
            cur = prog.recv(f"recv.act.mb{mb}.from{self.prev}", peer=self.prev, tag=self._tag(self.c.pp - 1, mb,
                            Phase.FORWARD), size_bytes=job.boundary_bytes(self.c.pp - 1), after=prog.last_compute)
        cur = self.fwd_out[mb] = self._units(Phase.FORWARD, mb, cur)
        if self.next is not None:
            prog.send(f"send.act.mb{mb}.to{self.next}", peer=self.next, size_bytes=job.boundary_bytes(self.c.pp),
                      tag=self._tag(self.c.pp, mb, Phase.FORWARD), deps=(cur,))

    def backward(self, mb: int) -> None:
        prog, job = self.prog, self.job
        if self.next is not None:
            cur = prog.recv(f"recv.grad.mb{mb}.from{self.next}", peer=self.next, tag=self._tag(self.c.pp, mb,
                            Phase.BACKWARD), size_bytes=job.boundary_bytes(self.c.pp), after=prog.last_compute)
        else:
            cur = self.fwd_out[mb]
        cur = self._units(Phase.BACKWARD, mb, cur, reduce_grads=mb == job.cfg.micro_batches - 1)
        if self.prev is not None:
            prog.send(f"send.grad.mb{mb}.to{self.prev}", peer=self.prev, size_bytes=job.boundary_bytes(self.c.pp - 1),
                      tag=self._tag(self.c.pp - 1, mb, Phase.BACKWARD), deps=(cur,))

    def _reduce_buckets(self, block: Block, ready: int) -> None:
        for bucket in self.buckets:
            if bucket.ready_after == block.name:
                node = self._coll(CommType.ALL_REDUCE, bucket.group, f"bucket{bucket.index}", bucket.size_bytes,
                                  (ready,))
                if node is not None:
                    self.grad_comms.append(node)

    def _reduce_scatter(self, blocks: tuple[Block, ...], ready: int) -> None:
        elements = sum(self._local_param_bytes(b) for b in blocks) // self.job.dtype_bytes
        if elements and self.group[GroupKind.DP] is not None:
            padded = -(-elements // self.job.par.dp) * self.job.par.dp
            self.grad_comms.append(self._coll(CommType.REDUCE_SCATTER, GroupKind.DP, f"bwd.{_unit_label(blocks)}",
                                              padded * self.job.dtype_bytes, (ready,)))

    # ---- one iteration ----------------------------------------------------------------------------------------
    def run_iteration(self, it: int) -> None:
        job = self.job
        self.it, self.fwd_out, self.grad_comms = it, {}, []
        self.prog.prefix = f"it{it}." if job.cfg.iterations > 1 else ""
        for op in one_f_one_b(job.par.pp, self.c.pp, job.cfg.micro_batches):
            (self.forward if op.phase is Phase.FORWARD else self.backward)(op.micro_batch)
        deps = tuple(self.grad_comms)
        if self.group[GroupKind.EMB] is not None and job.graph.tied_embeddings:
            emb = next(t for b in self.blocks for t in b.params if t.name.startswith(("embed_tokens", "lm_head")))
            node = self._coll(CommType.ALL_REDUCE, GroupKind.EMB, "word_embedding_grad",
                              emb.local_elements(job.par.tp) * job.dtype_bytes, deps or (self.prog.last_compute,))
            deps = (*deps, node)
        params = -(-self.local_params // job.par.dp) if self.fsdp else self.local_params
        self.prog.compute("optimizer.step", flops=0, bytes_moved=params * OPTIMIZER_BYTES_PER_PARAM, deps=deps)

    def nodes(self) -> tuple[TraceNode, ...]:
        for it in range(self.job.cfg.iterations):
            self.run_iteration(it)
        return self.prog.nodes


def generate_training(model: TransformerModel | ResNetModel, device: Device, par: Parallelism,
                      cfg: TrainingConfig, *, generator: str = "hybrid") -> Trace:
    """The trace of ``cfg.iterations`` training iterations (see the module docstring)."""
    _check(model, par, cfg)
    graph = _tied_copy(model_graph(model, cfg.dtype), par.pp)
    kinds = tuple(GroupKind) if par.ep > 1 else tuple(k for k in GroupKind if k not in (GroupKind.EP, GroupKind.EDP))
    job = _Job(graph, par, cfg, device, make_layout(par, kinds=kinds), stage_units(graph, par.pp))
    ranks = [_RankEmitter(job, r).nodes() for r in range(par.world_size)]
    info = (("format", "genie-generator"), ("generator", generator), ("model", model.name),
            ("device", device.name), ("efficiency", f"{device.efficiency:g}"), ("dtype", cfg.dtype.value),
            ("parallelism", par.label()), ("rank_order", par.order.value), ("dp_mode", cfg.dp_mode.value),
            ("micro_batch_size", str(cfg.micro_batch_size)), ("micro_batches", str(cfg.micro_batches)),
            ("seq_len", str(graph.seq_len)), ("iterations", str(cfg.iterations)))
    if cfg.routing_skew > 0 and par.ep > 1:
        info += (("routing_skew", f"{cfg.routing_skew:g}"), ("routing_seed", str(cfg.routing_seed)))
    return make_trace(ranks, groups=job.layout.groups, info=info)
