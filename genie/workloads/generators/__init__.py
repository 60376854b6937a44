"""Workload generators: pure functions from a model, a device and a parallelism to a :class:`Trace`.

- :func:`generate` — any DP x TP x PP (x EP) combination of a transformer or ResNet, DDP or FSDP; DLRM with DP;
- the named shapes :func:`data_parallel` (DDP), :func:`fsdp` (FSDP/ZeRO-3), :func:`tensor_parallel` (Megatron),
  :func:`pipeline_parallel` (1F1B), :func:`expert_parallel` (MoE all-to-all), :func:`dlrm`.

Rank layout, group names and formulas: ``docs/generators.md``. Every generated trace passes
:func:`genie.workloads.analysis.check`.
"""

from __future__ import annotations

from dataclasses import replace

from genie.core.errors import InputError
from genie.core.trace import Trace
from genie.workloads.generators.blocks import Block, BlockKind, ModelGraph, ParamTensor
from genie.workloads.generators.buckets import Bucket, assign_buckets
from genie.workloads.generators.config import DataParallelMode, TrainingConfig
from genie.workloads.generators.dlrm import generate_dlrm, shard_tables
from genie.workloads.generators.hybrid import generate_training, model_graph
from genie.workloads.generators.layout import (Coords, GroupKind, Layout, Parallelism, RankOrder, coords_of,
                                               make_layout, rank_of)
from genie.workloads.generators.pipeline import Phase, PipelineOp, one_f_one_b, partition_units
from genie.workloads.presets import Device, DLRMModel, Model

__all__ = [
    "Block", "BlockKind", "Bucket", "Coords", "DataParallelMode", "GroupKind", "Layout", "ModelGraph", "ParamTensor",
    "Parallelism", "Phase", "PipelineOp", "RankOrder", "TrainingConfig", "assign_buckets", "coords_of", "data_parallel",
    "dlrm", "expert_parallel", "fsdp", "generate", "make_layout", "model_graph", "one_f_one_b", "partition_units",
    "pipeline_parallel", "rank_of", "shard_tables", "tensor_parallel",
]

_DEFAULT = TrainingConfig()


def generate(model: Model, device: Device, parallelism: Parallelism, config: TrainingConfig = _DEFAULT) -> Trace:
    """One job's trace; which generator runs follows the model and the parallelism."""
    if isinstance(model, DLRMModel):
        for key in ("tp", "pp", "ep"):
            if getattr(parallelism, key) > 1:
                raise InputError(f"DLRM is generated with data parallelism only: {key} must be 1", path=key)
        return generate_dlrm(model, device, parallelism.dp, config)
    p = parallelism
    name = ("fsdp" if config.dp_mode is DataParallelMode.FSDP else
            "hybrid" if sum(x > 1 for x in (p.tp, p.pp, p.ep)) > 1 else
            "tensor_parallel" if p.tp > 1 else "pipeline_parallel" if p.pp > 1 else
            "expert_parallel" if p.ep > 1 else "data_parallel")
    return generate_training(model, device, parallelism, config, generator=name)


def data_parallel(model: Model, device: Device, *, dp: int, config: TrainingConfig = _DEFAULT) -> Trace:
    """PyTorch DDP on ``dp`` ranks: bucketed gradient all-reduces overlapping the backward."""
    return generate(model, device, Parallelism(dp=dp), replace(config, dp_mode=DataParallelMode.DDP))


def fsdp(model: Model, device: Device, *, dp: int, tp: int = 1, config: TrainingConfig = _DEFAULT) -> Trace:
    """FSDP / ZeRO-3 on ``dp`` ranks (optionally x ``tp``): per-layer all-gathers and reduce-scatters."""
    return generate(model, device, Parallelism(dp=dp, tp=tp), replace(config, dp_mode=DataParallelMode.FSDP))


def tensor_parallel(model: Model, device: Device, *, tp: int, dp: int = 1,
                    config: TrainingConfig = _DEFAULT) -> Trace:
    """Megatron tensor parallelism on ``tp`` ranks (x ``dp`` DDP replicas)."""
    return generate(model, device, Parallelism(dp=dp, tp=tp), config)


def pipeline_parallel(model: Model, device: Device, *, pp: int, dp: int = 1,
                      config: TrainingConfig = _DEFAULT) -> Trace:
    """1F1B pipeline of ``pp`` stages (x ``dp`` DDP replicas)."""
    return generate(model, device, Parallelism(dp=dp, pp=pp), config)


def expert_parallel(model: Model, device: Device, *, ep: int, dp: int | None = None,
                    config: TrainingConfig = _DEFAULT) -> Trace:
    """MoE with experts spread over ``ep`` ranks (``dp`` replicas, default ``ep``; EP divides DP)."""
    return generate(model, device, Parallelism(dp=dp or ep, ep=ep), config)


def dlrm(model: DLRMModel, device: Device, *, ranks: int, config: TrainingConfig = _DEFAULT) -> Trace:
    """DLRM: table-wise sharded embeddings (all-to-all) and DDP MLPs on ``ranks`` ranks."""
    return generate_dlrm(model, device, ranks, config)
