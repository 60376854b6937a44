"""How ASTRA-sim's system layer cuts one collective into chunks and per-dimension phases.

Mirrors ``Sys::generate_collective``: the collective is split into ``preferred-dataset-splits`` chunks
(``size // splits`` bytes each); every chunk becomes a *stream* that runs a list of *phases*, one per involved
network dimension, each phase being one collective implementation (ring, direct, halvingDoubling,
doubleBinaryTree) over the ranks that differ only in that dimension.

- All-gather walks the dimensions from the last to the first; everything else from the first.
- ``localBWAware`` all-reduce: reduce-scatter on dims 0..k-1, all-reduce on the last active dim k, all-gather
  on k-1..0. ``baseline``: a full all-reduce per dimension.
- A phase's output size feeds the next: ring/direct all-gather multiplies by the dim size, reduce-scatter
  divides by it, all-reduce and all-to-all keep it.
- A communicator group smaller than the world is one phase over its ranks in the given order
  (``CommunicatorGroup::get_collective_plan``), on queue level 0, with ASTRA's "Local" ring dimension: with
  system.json's implementation when it lists one for the type (a one-dimensional network), else ring.
- Each phase takes its queue from one of the level's allocators (:class:`QueuePick`,
  ``QueueLevelHandler``): a ``localBWAware`` all-reduce's reduce-scatter and all-reduce phases from the first
  half of the level's queues (clockwise), its all-gather phases from the second half (anticlockwise); every
  other phase round-robin over all of them (the second half anticlockwise).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, StrEnum

from genie.core.errors import GenieError

from astra_adapter.config import CollectiveImpl, CollectiveOptimization, ImplKind, InterDimensionScheduling, \
    SystemConfig


class CommKind(StrEnum):
    ALL_REDUCE = "all_reduce"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_GATHER = "all_gather"
    ALL_TO_ALL = "all_to_all"


_ONE_KINDS = (ImplKind.ONE_RING, ImplKind.ONE_DIRECT, ImplKind.ONE_HALVING_DOUBLING)
RING_LIKE = (ImplKind.RING, ImplKind.ONE_RING)
DIRECT_LIKE = (ImplKind.DIRECT, ImplKind.ONE_DIRECT)
HD_LIKE = (ImplKind.HALVING_DOUBLING, ImplKind.ONE_HALVING_DOUBLING)


@dataclass(frozen=True)
class LogicalDim:
    """One dimension of ASTRA-sim's logical topology for a collective type.

    ``network_dim`` is the network dimension it spans, or None for a ring over all NPUs (``oneRing`` etc.).
    """

    impl: CollectiveImpl
    npus: int
    network_dim: int | None


class QueuePick(Enum):
    """Which allocator of its level's ``QueueLevelHandler`` gives a phase its queue and ring direction (ASTRA-sim
    ``get_next_queue_id`` / ``_first`` / ``_last``): NEXT round-robin over all ``q`` queues, anticlockwise on the
    second half (``i >= q // 2``, when ``q > 1``); FIRST round-robin over the first ``q // 2`` (at least queue 0),
    clockwise; LAST round-robin over queues ``q // 2 .. q - 1``, anticlockwise."""

    NEXT = "next"
    FIRST = "first"
    LAST = "last"


@dataclass(frozen=True)
class PhaseSpec:
    """One phase of a chunk: ``comm`` run with ``impl`` over one logical dimension on queue ``level``, its queue
    taken by ``pick``."""

    comm: CommKind
    impl: CollectiveImpl
    level: int
    logical_dim: int | None  # index into the logical dims; None for a communicator-group ring
    npus: int
    data_size_bytes: int
    local: bool = False  # ASTRA's Dimension::Local ring (communicator groups): fixed 10 ns memory-bus delay
    pick: QueuePick = QueuePick.NEXT

    @property
    def final_size_bytes(self) -> int:
        return final_data_size(self.impl, self.comm, self.data_size_bytes, self.npus)


def final_data_size(impl: CollectiveImpl, comm: CommKind, data_size: int, npus: int) -> int:
    if impl.kind is ImplKind.DOUBLE_BINARY_TREE:
        return data_size  # ASTRA runs its all-reduce whatever the phase type
    if comm is CommKind.ALL_GATHER:
        return data_size * npus
    if comm is CommKind.REDUCE_SCATTER:
        return data_size // npus
    return data_size


def impls_for(system: SystemConfig, comm: CommKind) -> tuple[CollectiveImpl, ...]:
    return {CommKind.ALL_REDUCE: system.all_reduce_impl, CommKind.REDUCE_SCATTER: system.reduce_scatter_impl,
            CommKind.ALL_GATHER: system.all_gather_impl, CommKind.ALL_TO_ALL: system.all_to_all_impl}[comm]


_IMPL_KEYS = {CommKind.ALL_REDUCE: "all-reduce-implementation", CommKind.REDUCE_SCATTER:
              "reduce-scatter-implementation", CommKind.ALL_GATHER: "all-gather-implementation",
              CommKind.ALL_TO_ALL: "all-to-all-implementation"}


def logical_dims(system: SystemConfig, comm: CommKind, npus_per_dim: tuple[int, ...]) -> tuple[LogicalDim, ...]:
    """``GeneralComplexTopology``: one logical dim per listed implementation; a ``one*`` spans all NPUs."""
    impls = impls_for(system, comm)
    if not impls:
        raise GenieError(f"system configuration has no {_IMPL_KEYS[comm]} (needed for {comm.value})")
    if len(impls) > len(npus_per_dim):
        raise GenieError(f"{_IMPL_KEYS[comm]} lists {len(impls)} dimensions but the network has "
                         f"{len(npus_per_dim)}")
    dims = []
    for d, impl in enumerate(impls):
        if impl.kind in _ONE_KINDS:
            total = 1
            for n in npus_per_dim:
                total *= n
            dims.append(LogicalDim(impl, total, None))
            break
        dims.append(LogicalDim(impl, npus_per_dim[d], d))
    return tuple(dims)


def chunk_sizes(size_bytes: int, splits: int) -> tuple[int, ...]:
    """``size // splits`` bytes per chunk (ASTRA-sim); a remainder becomes a smaller last chunk."""
    if size_bytes <= 0:
        return ()
    chunk = size_bytes // splits or size_bytes
    full, rest = divmod(size_bytes, chunk)
    return (chunk,) * full + ((rest,) if rest else ())


def _check_impl(impl: CollectiveImpl, comm: CommKind, npus: int) -> None:
    if impl.kind in HD_LIKE:
        if comm is CommKind.ALL_TO_ALL:
            raise GenieError("ASTRA-sim's halvingDoubling has no all-to-all")
        if npus & (npus - 1):
            raise GenieError(f"halvingDoubling needs a power-of-two dimension, got {npus} NPUs")


def world_phases(system: SystemConfig, comm: CommKind, chunk_bytes: int, dims: tuple[LogicalDim, ...],
                 involved: tuple[bool, ...], rotation: int = 0) -> tuple[PhaseSpec, ...]:
    """The phases of one chunk of a world collective (``rotation``: round-robin inter-dimension offset)."""
    order = list(range(len(dims)))
    if comm is CommKind.ALL_GATHER:
        order.reverse()
    if system.inter_dimension_scheduling is InterDimensionScheduling.ROUND_ROBIN and order:
        r = rotation % len(order)
        order = order[r:] + order[:r]

    def active(d: int) -> bool:
        return dims[d].npus > 1 and (involved[d] if d < len(involved) else True)

    def phase(kind: CommKind, d: int, size: int, pick: QueuePick = QueuePick.NEXT) -> PhaseSpec:
        spec = dims[d]
        _check_impl(spec.impl, kind, spec.npus)
        return PhaseSpec(kind, spec.impl, d, d, spec.npus, size, pick=pick)

    phases: list[PhaseSpec] = []
    remain = chunk_bytes
    if comm is not CommKind.ALL_REDUCE or system.collective_optimization is CollectiveOptimization.BASELINE:
        for d in order:
            if active(d):
                phases.append(phase(comm, d, remain))
                remain = phases[-1].final_size_bytes
        return tuple(phases)
    last = 0
    for i, d in enumerate(order):
        if active(d):
            last = i
    for i in range(last):
        if active(order[i]):
            phases.append(phase(CommKind.REDUCE_SCATTER, order[i], remain, QueuePick.FIRST))
            remain = phases[-1].final_size_bytes
    if active(order[last]):
        phases.append(phase(CommKind.ALL_REDUCE, order[last], remain, QueuePick.FIRST))
        remain = phases[-1].final_size_bytes
    for i in range(last - 1, -1, -1):
        if active(order[i]):
            phases.append(phase(CommKind.ALL_GATHER, order[i], remain, QueuePick.LAST))
            remain = phases[-1].final_size_bytes
    return tuple(phases)


def group_impl(system: SystemConfig, comm: CommKind) -> CollectiveImpl:
    """The implementation of a communicator group smaller than the world (``CommunicatorGroup::
    get_collective_plan``): system.json's own when it lists one (a one-dimensional network), ring when it lists
    several. ASTRA-sim casts the group's ring topology to a tree for ``doubleBinaryTree`` and crashes (SIGSEGV):
    refused here."""
    impls = impls_for(system, comm)
    if not impls:
        raise GenieError(f"system configuration has no {_IMPL_KEYS[comm]} (needed for {comm.value})")
    if len(impls) > 1:
        return CollectiveImpl(ImplKind.RING)
    if impls[0].kind is ImplKind.DOUBLE_BINARY_TREE:
        raise GenieError(f"{_IMPL_KEYS[comm]} doubleBinaryTree in a process group smaller than the world: "
                         "ASTRA-sim crashes on it (segmentation fault); use ring, direct or halvingDoubling")
    return impls[0]


def group_phases(system: SystemConfig, comm: CommKind, chunk_bytes: int, npus: int) -> tuple[PhaseSpec, ...]:
    """A communicator group's single phase over ASTRA's "Local" ring of its members, with :func:`group_impl`
    (a ``localBWAware`` all-reduce still takes its queue as the turning point of the world's, FIRST)."""
    if npus <= 1:
        return ()
    impl = group_impl(system, comm)
    _check_impl(impl, comm, npus)
    pick = QueuePick.FIRST if comm is CommKind.ALL_REDUCE and \
        system.collective_optimization is not CollectiveOptimization.BASELINE else QueuePick.NEXT
    return (PhaseSpec(comm, impl, 0, None, npus, chunk_bytes, local=True, pick=pick),)


def ring_log_lines(system: SystemConfig, npus_per_dim: tuple[int, ...]) -> tuple[str, ...]:
    """The 'ring of node 0' lines rank 0 logs while ASTRA-sim builds its logical topologies."""
    lines = []
    for comm in (CommKind.ALL_REDUCE, CommKind.REDUCE_SCATTER, CommKind.ALL_GATHER, CommKind.ALL_TO_ALL):
        offset = 1
        for d, impl in enumerate(impls_for(system, comm)[:len(npus_per_dim)]):
            if impl.kind in _ONE_KINDS:
                total = 1
                for n in npus_per_dim:
                    total *= n
                lines.append(_ring_line(total, 1))
                break
            if impl.kind is not ImplKind.DOUBLE_BINARY_TREE:
                lines.append(_ring_line(npus_per_dim[d], offset))
            offset *= npus_per_dim[d]
    return tuple(lines)


def _ring_line(npus: int, offset: int) -> str:
    return (f"ring of node 0, id: 0 dimension: local total nodes in ring: {npus} index in ring: 0 "
            f"offset: {offset} total nodes in ring: {npus}")
