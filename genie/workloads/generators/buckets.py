"""PyTorch DDP gradient buckets, pure.

DDP walks the parameters in reverse registration order (roughly the order backward produces their gradients),
adds each whole tensor to the open bucket and closes the bucket once it holds at least the cap: the first
bucket's cap is 1 MiB (``dist._DEFAULT_FIRST_BUCKET_BYTES``), later ones ``bucket_cap_mb`` (25 MiB by default,
``25 * 1024 * 1024`` bytes). A tensor larger than the cap is a bucket by itself; the last bucket holds what is
left. A bucket's all-reduce starts when the backward of the block holding its last tensor is done, so it
overlaps the backward of the blocks before it. Expert parameters (MoE) are reduced over the expert-data-parallel
group, so they get their own bucket sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

from genie.workloads.generators.blocks import Block
from genie.workloads.generators.layout import GroupKind

DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024
DEFAULT_FIRST_BUCKET_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Bucket:
    group: GroupKind  # DP for dense parameters, EDP for expert parameters
    index: int  # within its group kind, in issue order
    size_bytes: int
    ready_after: str  # name of the block whose backward completes the bucket
    tensors: tuple[str, ...]


def assign_buckets(blocks: tuple[Block, ...], *, tp: int, ep: int, dtype_bytes: int,
                   bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                   first_bucket_bytes: int = DEFAULT_FIRST_BUCKET_BYTES) -> tuple[Bucket, ...]:
    """Buckets of one rank's local gradients (``blocks`` in forward order), in the order they become ready."""
    buckets: list[Bucket] = []
    open_: dict[GroupKind, tuple[list[str], int]] = {}
    count: dict[GroupKind, int] = {GroupKind.DP: 0, GroupKind.EDP: 0}

    def close(kind: GroupKind, block: str) -> None:
        names, size = open_.pop(kind)
        buckets.append(Bucket(kind, count[kind], size, block, tuple(names)))
        count[kind] += 1

    last_block: dict[GroupKind, str] = {}
    for block in reversed(blocks):
        for tensor in reversed(block.params):
            kind = GroupKind.EDP if tensor.expert else GroupKind.DP
            size = tensor.local_elements(tp, ep) * dtype_bytes
            names, total = open_.get(kind, ([], 0))
            open_[kind] = (names + [tensor.name], total + size)
            last_block[kind] = block.name
            cap = first_bucket_bytes if count[kind] == 0 else bucket_bytes
            if open_[kind][1] >= cap:
                close(kind, block.name)
    for kind in list(open_):
        close(kind, last_block[kind])
    return tuple(buckets)
