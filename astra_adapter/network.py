"""astra-network-analytical's congestion-unaware network: per-message delay, no link sharing.

A rank's address is one coordinate per dimension, dimension 0 varying fastest (``rank % npus[0]``). A message
travels in the *first* dimension where source and destination addresses differ and costs, in that dimension,
``hops * latency_ns + size_bytes / bw_bytes_per_ns``, truncated to whole nanoseconds. Hops: Ring = shorter way
round (bidirectional), FullyConnected = 1, Switch = 2 (NPU -> switch -> NPU).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from astra_adapter.config import NetworkConfig, TopologyKind


@dataclass(frozen=True)
class AnalyticalNetwork:
    config: NetworkConfig
    _strides: tuple[int, ...] = field(init=False, repr=False, compare=False)
    npus_count: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        strides, stride = [], 1
        for dim in self.config.dims:
            strides.append(stride)
            stride *= dim.npus_count
        object.__setattr__(self, "_strides", tuple(strides))
        object.__setattr__(self, "npus_count", stride)

    @property
    def dims_count(self) -> int:
        return len(self.config.dims)

    def stride(self, dim: int) -> int:
        """Rank distance between neighbours in ``dim`` (product of the lower dimensions' sizes)."""
        return self._strides[dim]

    def coordinate(self, rank: int, dim: int) -> int:
        return (rank // self._strides[dim]) % self.config.dims[dim].npus_count

    def dim_members(self, rank: int, dim: int) -> tuple[int, ...]:
        """The ranks that differ from ``rank`` only in ``dim``, in coordinate order."""
        stride = self._strides[dim]
        base = rank - self.coordinate(rank, dim) * stride
        return tuple(base + k * stride for k in range(self.config.dims[dim].npus_count))

    def transfer_dim(self, src: int, dst: int) -> int:
        for dim in range(len(self.config.dims)):
            if self.coordinate(src, dim) != self.coordinate(dst, dim):
                return dim
        raise ValueError(f"rank {src} sends to itself")

    def hops(self, src: int, dst: int) -> tuple[int, int]:
        """(dimension, hop count) of a message from ``src`` to ``dst``."""
        dim = self.transfer_dim(src, dst)
        spec = self.config.dims[dim]
        if spec.topology is TopologyKind.SWITCH:
            return dim, 2
        if spec.topology is TopologyKind.FULLY_CONNECTED:
            return dim, 1
        clockwise = (self.coordinate(dst, dim) - self.coordinate(src, dim)) % spec.npus_count
        return dim, min(clockwise, spec.npus_count - clockwise)

    def delay_ns(self, src: int, dst: int, size_bytes: int) -> int:
        dim, hops = self.hops(src, dst)
        return self.dim_delay_ns(dim, hops, size_bytes)

    def dim_delay_ns(self, dim: int, hops: int, size_bytes: int) -> int:
        spec = self.config.dims[dim]
        return int(hops * spec.latency_ns + size_bytes / spec.bw_bytes_per_ns)
