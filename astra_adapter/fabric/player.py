"""A trace played on the fabric model: the replay's DAG rules (:mod:`astra_adapter.timeline`: compute on the
compute lane, collectives one at a time per process-group channel, messages per peer lane, overlap), with every
communication op timed by the flow engine instead of a fixed duration (pure)."""

from __future__ import annotations

from genie.core.trace import Trace

from astra_adapter.fabric.flows import FabricOp, FlowEngine
from astra_adapter.measurements import CommOp
from astra_adapter.timeline import Timeline, _Op, _Player, timeline_of


class _FlowOp(_Op):
    __slots__ = ("comm", "flow")

    def __init__(self, members: tuple[int, ...], sides: tuple | None, comm: CommOp) -> None:
        super().__init__(members, sides, float("inf"))
        self.comm = comm
        self.flow: FabricOp | None = None


class FabricPlayer(_Player):
    def __init__(self, trace: Trace, engine: FlowEngine) -> None:
        self.engine = engine
        super().__init__(trace, lambda op: float("inf"), share_nic=False)

    def _shared_op(self, key: tuple, members: tuple[int, ...], op: CommOp, duration_ns,
                   sides: tuple | None) -> _Op:
        shared = self.op_index.get(key)
        if shared is None:
            shared = self.op_index[key] = _FlowOp(members, sides, op)
        return shared

    def horizon_ns(self) -> float:
        for op in self.running:
            if op.flow is None:  # type: ignore[attr-defined]
                op.flow = self.engine.start(self.engine.plan(op.comm, op.members))  # type: ignore[attr-defined]
        return self.engine.horizon_ns()

    def advance(self, dt_ns: float) -> None:
        self.engine.advance(dt_ns)
        for op in self.running:
            flow = op.flow  # type: ignore[attr-defined]
            if flow is not None and flow.done and op.remaining_ns:
                op.remaining_ns = 0.0
                self.engine.remove(flow)


def play_on_fabric(trace: Trace, engine: FlowEngine) -> Timeline:
    return timeline_of(FabricPlayer(trace, engine))
