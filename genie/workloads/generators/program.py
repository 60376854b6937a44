"""Appending one rank's nodes the way a training framework issues them.

Compute nodes form one chain (a GPU's compute stream runs one kernel sequence), and the collectives of each
process group form one chain (one communicator, one NCCL stream): each such node gets a control dependency on
the previous one. So a replayer that starts every ready node still runs compute serially, issues each group's
collectives in the same order on every member, and overlaps communication with compute exactly where data
dependencies allow. Send and receive nodes are not chained (their tags are unique).
"""

from __future__ import annotations

from genie.core.trace import CommType, TraceNode, collective_node, compute_node, recv_node, send_node
from genie.workloads.presets import Device, Dtype


class RankProgram:
    """A builder used inside one generator call; ``nodes`` is the finished, immutable result."""

    def __init__(self, rank: int, device: Device, dtype: Dtype) -> None:
        self.rank = rank
        self.device = device
        self.dtype = dtype
        self.prefix = ""  # prepended to every name (e.g. "it1." for the second iteration)
        self._nodes: list[TraceNode] = []
        self._last_compute: int | None = None
        self._last_on_group: dict[str, int] = {}

    @property
    def nodes(self) -> tuple[TraceNode, ...]:
        return tuple(self._nodes)

    @property
    def last_compute(self) -> int | None:
        return self._last_compute

    def _next_id(self) -> int:
        return len(self._nodes)

    @staticmethod
    def _ctrl(previous: int | None, deps: tuple[int, ...]) -> tuple[int, ...]:
        return () if previous is None or previous in deps else (previous,)

    def compute(self, name: str, *, flops: float, bytes_moved: float = 0, deps: tuple[int, ...] = ()) -> int:
        node_id = self._next_id()
        duration = self.device.compute_ns(flops, self.dtype, bytes_moved)
        deps = tuple(dict.fromkeys(deps))
        self._nodes.append(compute_node(node_id, self.prefix + name, duration_ns=duration, num_ops=int(flops),
                                        tensor_size_bytes=int(bytes_moved), data_deps=deps,
                                        ctrl_deps=self._ctrl(self._last_compute, deps)))
        self._last_compute = node_id
        return node_id

    def collective(self, name: str, comm_type: CommType, size_bytes: int, group: str,
                   deps: tuple[int, ...] = (), *, send_split_bytes: tuple[int, ...] | None = None,
                   recv_split_bytes: tuple[int, ...] | None = None) -> int:
        """A collective; an uneven all-to-all with its per-peer sizes."""
        node_id = self._next_id()
        deps = tuple(dict.fromkeys(deps))
        self._nodes.append(collective_node(node_id, self.prefix + name, comm_type=comm_type,
                                           size_bytes=int(size_bytes), process_group=group, data_deps=deps,
                                           ctrl_deps=self._ctrl(self._last_on_group.get(group), deps),
                                           send_split_bytes=send_split_bytes, recv_split_bytes=recv_split_bytes))
        self._last_on_group[group] = node_id
        return node_id

    def send(self, name: str, *, peer: int, size_bytes: int, tag: int, deps: tuple[int, ...] = ()) -> int:
        node_id = self._next_id()
        self._nodes.append(send_node(node_id, self.prefix + name, rank=self.rank, peer=peer,
                                     size_bytes=int(size_bytes), tag=tag, data_deps=tuple(dict.fromkeys(deps))))
        return node_id

    def recv(self, name: str, *, peer: int, size_bytes: int, tag: int, after: int | None = None) -> int:
        """A receive posted once node ``after`` is done (a control dependency), or at the start."""
        node_id = self._next_id()
        self._nodes.append(recv_node(node_id, self.prefix + name, rank=self.rank, peer=peer,
                                     size_bytes=int(size_bytes), tag=tag,
                                     ctrl_deps=() if after is None else (after,)))
        return node_id
