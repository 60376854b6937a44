"""Pipeline parallelism, pure: splitting a model into stages and the 1F1B micro-batch schedule.

1F1B (PipeDream-Flush, Megatron-LM's default non-interleaved schedule): stage ``s`` of ``p`` runs
``min(p - s - 1, m)`` warm-up forwards, then alternates one forward and one backward until every forward is
done, then runs the remaining backwards. With one stage it is plain gradient accumulation (F0 B0 F1 B1 ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from genie.core.errors import InputError
from genie.workloads.generators.blocks import PRE_UNIT, Block, ModelGraph


class Phase(Enum):
    FORWARD = "fwd"
    BACKWARD = "bwd"


@dataclass(frozen=True)
class PipelineOp:
    phase: Phase
    micro_batch: int


def one_f_one_b(stages: int, stage: int, micro_batches: int) -> tuple[PipelineOp, ...]:
    warmup = min(stages - stage - 1, micro_batches)
    ops = [PipelineOp(Phase.FORWARD, i) for i in range(warmup)]
    for i in range(warmup, micro_batches):
        ops += [PipelineOp(Phase.FORWARD, i), PipelineOp(Phase.BACKWARD, i - warmup)]
    ops += [PipelineOp(Phase.BACKWARD, i) for i in range(micro_batches - warmup, micro_batches)]
    return tuple(ops)


def partition_units(num_units: int, stages: int) -> tuple[range, ...]:
    """Contiguous ranges of units per stage, as even as possible (earlier stages take the remainder)."""
    if stages > num_units:
        raise InputError(f"{stages} pipeline stages need at least as many layers (the model has {num_units})",
                         path="pp")
    base, extra = divmod(num_units, stages)
    ranges, start = [], 0
    for s in range(stages):
        size = base + (1 if s < extra else 0)
        ranges.append(range(start, start + size))
        start += size
    return tuple(ranges)


def stage_units(graph: ModelGraph, stages: int) -> tuple[tuple[tuple[int, tuple[Block, ...]], ...], ...]:
    """Per stage: its units in order, each with its blocks. The pre unit (embedding, stem) joins the first
    stage, the post unit (head) the last."""
    ranges = partition_units(graph.num_units, stages)
    result = []
    for s, r in enumerate(ranges):
        units = list(r)
        if s == 0:
            units.insert(0, PRE_UNIT)
        if s == stages - 1:
            units.append(graph.num_units)
        result.append(tuple((u, tuple(b for b in graph.blocks if b.unit == u)) for u in units
                            if any(b.unit == u for b in graph.blocks)))
    return tuple(result)
