"""DLRM training (Naumov et al. 2019): table-wise model-parallel embeddings, data-parallel MLPs.

Every rank holds whole embedding tables (largest first onto the least-loaded rank, as TorchRec's table-wise
sharding) and a replica of the MLPs; each rank's micro-batch is ``b`` samples, the global batch ``B = b * N``.
Per micro-batch, in issue order:
- embedding lookup of the local tables for the global batch (memory bound: ``B * T_local * d`` rows read);
- all-to-all (forward) of the pooled embeddings over all ranks: each rank sends ``B * T_local * d * dtype``
  (its tables for everybody's samples), so one all-to-all moves ``B * T * d * dtype`` in total; it overlaps the
  bottom MLP;
- bottom MLP, dot interaction (waits for the all-to-all), top MLP, then their backwards; the all-to-all
  (backward) returns the embedding gradients (same sizes) while the bottom MLP's backward runs; the sparse
  embedding update follows it;
- on the last micro-batch, the MLP gradients go through DDP buckets (all-reduce over ``dp0``, all ranks) as the
  backward fills them; the dense optimizer step waits for them.
"""

from __future__ import annotations

from genie.core.errors import InputError
from genie.core.trace import CommType, ProcessGroup, Trace, make_trace
from genie.workloads.generators.blocks import Block, BlockKind, ParamTensor
from genie.workloads.generators.buckets import Bucket, assign_buckets
from genie.workloads.generators.config import DataParallelMode, TrainingConfig
from genie.workloads.generators.program import RankProgram
from genie.workloads.presets import OPTIMIZER_BYTES_PER_PARAM, Device, DLRMModel

GROUP = "dp0"


def shard_tables(table_rows: tuple[int, ...], ranks: int) -> tuple[tuple[int, ...], ...]:
    """Table indices per rank: largest table first onto the rank with the fewest rows (ties: lowest rank)."""
    load = [0] * ranks
    owned: list[list[int]] = [[] for _ in range(ranks)]
    for t in sorted(range(len(table_rows)), key=lambda i: (-table_rows[i], i)):
        r = min(range(ranks), key=lambda k: (load[k], k))
        owned[r].append(t)
        load[r] += table_rows[t]
    return tuple(tuple(sorted(o)) for o in owned)


def mlp_blocks(model: DLRMModel, dtype_bytes: int) -> tuple[Block, ...]:
    blocks = []
    for name, n_in, n_out in model.mlp_layers():
        params = (ParamTensor(f"{name}.weight", n_in * n_out), ParamTensor(f"{name}.bias", n_out))
        blocks.append(Block(name, BlockKind.FC, 0, params, 2 * n_in * n_out, (n_in + n_out) * dtype_bytes,
                            n_out * dtype_bytes))
    return tuple(blocks)


def interaction_flops_per_sample(model: DLRMModel) -> int:
    n = model.num_tables + 1
    return 2 * (n * (n - 1) // 2) * model.embedding_dim


def _layer(prog: RankProgram, block: Block, phase: str, mb: int, samples: int, dtype_bytes: int,
           deps: tuple[int, ...]) -> int:
    factor = 1 if phase == "fwd" else 2
    return prog.compute(f"{phase}.mb{mb}.{block.name}", flops=block.fwd_flops_per_sample * samples * factor,
                        bytes_moved=block.param_count * dtype_bytes + block.fwd_bytes_per_sample * samples * factor,
                        deps=deps)


def _micro_batch(prog: RankProgram, model: DLRMModel, blocks: tuple[Block, ...], mb: int, samples: int,
                 rows_bytes: int, dtype_bytes: int, *, all_to_all: bool, buckets: tuple[Bucket, ...]) -> list[int]:
    """One micro-batch; ``buckets`` are all-reduced as the backward fills them. Returns their node ids."""
    bottom = tuple(b for b in blocks if b.name.startswith("bot"))
    top = tuple(b for b in blocks if b.name.startswith("top"))
    lookup = prog.compute(f"fwd.mb{mb}.embedding_lookup", flops=0, bytes_moved=2 * rows_bytes)
    emb = prog.collective(f"alltoall.dp.fwd.mb{mb}.embeddings", CommType.ALL_TO_ALL, rows_bytes, GROUP,
                          (lookup,)) if all_to_all else lookup
    cur = None
    for block in bottom:
        cur = _layer(prog, block, "fwd", mb, samples, dtype_bytes, (cur,) if cur is not None else ())
    flops = interaction_flops_per_sample(model) * samples
    cur = prog.compute(f"fwd.mb{mb}.interaction", flops=flops, deps=(cur, emb))
    for block in top:
        cur = _layer(prog, block, "fwd", mb, samples, dtype_bytes, (cur,))
    reduced: list[int] = []

    def backward(block: Block, cur: int) -> int:
        cur = _layer(prog, block, "bwd", mb, samples, dtype_bytes, (cur,))
        reduced.extend(prog.collective(f"allreduce.dp.bucket{k.index}", CommType.ALL_REDUCE, k.size_bytes, GROUP,
                                       (cur,)) for k in buckets if k.ready_after == block.name)
        return cur

    for block in reversed(top):
        cur = backward(block, cur)
    cur = prog.compute(f"bwd.mb{mb}.interaction", flops=2 * flops, deps=(cur,))
    emb = prog.collective(f"alltoall.dp.bwd.mb{mb}.embeddings", CommType.ALL_TO_ALL, rows_bytes, GROUP,
                          (cur,)) if all_to_all else cur
    for block in reversed(bottom):
        cur = backward(block, cur)
    prog.compute(f"bwd.mb{mb}.embedding_update", flops=0, bytes_moved=3 * rows_bytes, deps=(emb,))
    return reduced


def generate_dlrm(model: DLRMModel, device: Device, ranks: int, cfg: TrainingConfig) -> Trace:
    """The trace of DLRM on ``ranks`` ranks (see the module docstring)."""
    if ranks < 1:
        raise InputError(f"must be at least 1, got {ranks}", path="dp")
    if cfg.dp_mode is not DataParallelMode.DDP:
        raise InputError("DLRM is generated with DDP for its MLPs", path="dp_mode")
    dtype_bytes = cfg.dtype.size_bytes
    shards = shard_tables(model.table_rows, ranks)
    blocks = mlp_blocks(model, dtype_bytes)
    buckets = assign_buckets(blocks, tp=1, ep=1, dtype_bytes=dtype_bytes, bucket_bytes=cfg.bucket_size_bytes,
                             first_bucket_bytes=cfg.first_bucket_size_bytes)
    b = cfg.micro_batch_size
    programs = []
    for rank in range(ranks):
        prog = RankProgram(rank, device, cfg.dtype)
        rows_bytes = b * ranks * len(shards[rank]) * model.embedding_dim * dtype_bytes
        for it in range(cfg.iterations):
            prog.prefix = f"it{it}." if cfg.iterations > 1 else ""
            grad_comms: list[int] = []
            for mb in range(cfg.micro_batches):
                last = mb == cfg.micro_batches - 1  # DDP all-reduces during the last micro-batch only (no_sync)
                grad_comms += _micro_batch(prog, model, blocks, mb, b, rows_bytes, dtype_bytes, all_to_all=ranks > 1,
                                           buckets=buckets if last and ranks > 1 else ())
            prog.compute("optimizer.step", flops=0, bytes_moved=model.dense_params * OPTIMIZER_BYTES_PER_PARAM,
                         deps=tuple(grad_comms))
        programs.append(prog.nodes)
    groups = (ProcessGroup(GROUP, tuple(range(ranks))),) if ranks > 1 else ()
    info = (("format", "genie-generator"), ("generator", "dlrm"), ("model", model.name), ("device", device.name),
            ("efficiency", f"{device.efficiency:g}"), ("dtype", cfg.dtype.value), ("parallelism", f"dp{ranks}"),
            ("micro_batch_size", str(b)), ("micro_batches", str(cfg.micro_batches)),
            ("iterations", str(cfg.iterations)))
    return make_trace(programs, groups=groups, info=info)
