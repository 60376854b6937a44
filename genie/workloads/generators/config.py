"""How a generated job trains: batch, micro-batches, number format, data-parallel flavour."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from genie.core.errors import InputError
from genie.workloads.generators.buckets import DEFAULT_BUCKET_BYTES, DEFAULT_FIRST_BUCKET_BYTES
from genie.workloads.presets import Dtype


class DataParallelMode(Enum):
    DDP = "ddp"  # replicated weights, bucketed gradient all-reduce (PyTorch DDP, Megatron DDP)
    FSDP = "fsdp"  # sharded weights: per-layer all-gather (forward and backward), reduce-scatter (FSDP, ZeRO-3)

    @classmethod
    def parse(cls, text: str) -> "DataParallelMode":
        key = text.strip().lower()
        key = {"zero3": "fsdp", "zero-3": "fsdp"}.get(key, key)
        for mode in cls:
            if mode.value == key:
                return mode
        raise InputError(f"unknown data-parallel mode {text!r} (expected ddp or fsdp)", path="dp_mode")


@dataclass(frozen=True)
class TrainingConfig:
    """``micro_batch_size`` samples (sequences, images) per micro-batch and data-parallel replica;
    ``micro_batches`` per iteration (gradient accumulation, or the pipeline's micro-batches), so the global
    batch is ``micro_batch_size * micro_batches * dp``."""

    micro_batch_size: int = 1
    micro_batches: int = 1
    dtype: Dtype = Dtype.BF16
    dp_mode: DataParallelMode = DataParallelMode.DDP
    bucket_size_bytes: int = DEFAULT_BUCKET_BYTES
    first_bucket_size_bytes: int = DEFAULT_FIRST_BUCKET_BYTES
    sequence_parallel: bool = False  # Megatron sequence parallelism: TP all-reduce -> all-gather + reduce-scatter
    iterations: int = 1
    routing_skew: float = 0.0  # MoE: Zipf exponent of expert popularity (0: even routing, plain all-to-alls)
    routing_seed: int = 0  # MoE: the seed of the skewed routing (genie.workloads.generators.routing)

    def __post_init__(self) -> None:
        for key in ("micro_batch_size", "micro_batches", "bucket_size_bytes", "first_bucket_size_bytes",
                    "iterations"):
            if getattr(self, key) < 1:
                raise InputError(f"must be at least 1, got {getattr(self, key)}", path=key)
        if not 0 <= self.routing_skew <= 10:
            raise InputError(f"must be between 0 (even) and 10, got {self.routing_skew}", path="routing_skew")
        if isinstance(self.routing_seed, bool) or not isinstance(self.routing_seed, int) or self.routing_seed < 0:
            raise InputError(f"must be a non-negative integer, got {self.routing_seed!r}", path="routing_seed")
