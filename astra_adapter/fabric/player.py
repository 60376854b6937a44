"""A trace played on the fabric model: the replay's DAG rules (:mod:`astra_adapter.timeline`: compute on the
compute lane, collectives one at a time per process-group channel, messages per peer lane, overlap), with every
communication op timed by the flow engine instead of a fixed duration (pure). An op's flows start once its last
member has entered it, except a big ring's under ring chains: its connections start pair by pair, each when its
sender and its receiver have entered (:class:`astra_adapter.fabric.chains.PairStarts`)."""

from __future__ import annotations

import numpy as np

from genie.core.collective import Collective
from genie.core.trace import Trace

from genie.core.collector import collector_paused
from astra_adapter.fabric.flows import FabricOp, FlowEngine
from astra_adapter.measurements import CommOp
from astra_adapter.timeline import CompiledTrace, Timeline, _Op, _Player, timeline_of


class _FlowOp(_Op):
    __slots__ = ("comm", "flow", "channel", "gone", "flow_order", "pairs", "early")

    def __init__(self, members: tuple[int, ...], sides: tuple | None, comm: CommOp) -> None:
        super().__init__(members, sides, float("inf"))
        self.comm = comm
        self.flow: FabricOp | None = None
        self.channel: int | None = None
        self.gone: set[int] = set()  # members that have left the op
        self.flow_order = 0  # when its flow started, among the player's ops (their order in ``running``)
        # a ring whose connections start pair by pair: chains.pair_start_connections (None: not asked yet; False:
        # the op starts at its last member's entry), and whether it runs (before its last member's entry; its
        # connections still held are its flow's, RingOp.held)
        self.pairs: tuple | bool | None = None
        self.early = False


def _flow_order(op: _FlowOp) -> int:
    return op.flow_order


class FabricPlayer(_Player):
    def __init__(self, trace: Trace, engine: FlowEngine, compiled: CompiledTrace | None = None) -> None:
        self.engine = engine
        self._of_flow: dict[int, _FlowOp] = {}  # id(op.flow) -> the running op, for the ops whose flow started
        self._flows_started = 0
        self._with_flow = 0  # the first ops of ``running`` have their flows: the others joined it since (at its end)
        # the engine's compiled event loop (None: it has none, or it is off)
        self._flow_events = engine.flow_events if engine.plays_events else None  # type: ignore[attr-defined]
        super().__init__(trace, lambda op: float("inf"), share_nic=False, compiled=compiled)
        self.reads_member_starts = engine.params.ring_chains  # a big ring's pairs start on their own (_member_started)
        self._entered: list[_FlowOp] = []  # running ops with held connections a member entered since the last horizon
        channels, p2p = trace.channels()
        for key, op in self.op_index.items():  # ("coll", group, k) or ("p2p", src, dst, k): the replay's channel
            op.channel = channels.get(key[1]) if key[0] == "coll" else p2p  # type: ignore[attr-defined]

    def _new_op(self, members: tuple[int, ...], sides: tuple | None, op: CommOp, duration_ns) -> _Op:
        return _FlowOp(members, sides, op)

    def _member_started(self, op: _Op, rank: int, t: float) -> bool:
        """Whether ``op`` runs from now, ``rank`` having entered it: at its last member's entry, or a ring whose
        connections start pair by pair (the engine's ``pair_starts``) at the entry that completes its first pair;
        a later entry releases the connections whose pair it completes, at the next horizon (:meth:`_start_flows`)."""
        assert isinstance(op, _FlowOp)
        pairs = op.pairs
        if pairs is None:
            pairs = op.pairs = len(op.members) > 2 and op.comm.collective is not Collective.SEND_RECV and \
                self.engine.pair_starts(self.engine.plan(op.comm, op.members, op.channel)) or False
        if pairs is False:
            return len(op.started) == len(op.members)
        if op.early:
            if op.flow is not None:
                self._entered.append(op)
            return False
        to, fro = pairs[2][rank]  # a first pair in has ``rank`` in it: with the peer it sends to or receives from
        if to in op.started or fro in op.started:
            op.early = True
            return True
        return False

    @staticmethod
    def _ready(op: _FlowOp) -> np.ndarray:
        """Per connection of a pair-start ring ``op``: both its ranks have entered."""
        src, dst, _ = op.pairs  # type: ignore[misc]
        started = list(op.started)
        return np.isin(src, started) & np.isin(dst, started)

    def horizon_ns(self) -> float:
        self._start_flows()
        return self.engine.horizon_ns()

    def _start_flows(self) -> None:
        if self._entered:  # running rings' connections whose pairs came in since: released, in entry order
            for op in self._entered:
                released = op.flow.held & self._ready(op)  # type: ignore[union-attr,attr-defined]
                if released.any():
                    self.engine.release(op.flow, released)  # type: ignore[arg-type]
            self._entered.clear()
        running = self.running
        if self._with_flow < len(running):  # ops joined ``running`` (at its end) since: their flows start
            for op in running[self._with_flow:]:
                plan = self.engine.plan(op.comm, op.members, op.channel)  # type: ignore[attr-defined]
                if op.early:  # type: ignore[attr-defined]
                    op.flow = self.engine.start(plan, ~self._ready(op))  # type: ignore[arg-type,attr-defined]
                else:
                    op.flow = self.engine.start(plan)  # type: ignore[attr-defined]
                op.flow_order = self._flows_started  # type: ignore[attr-defined]
                self._flows_started += 1
                self._of_flow[id(op.flow)] = op  # type: ignore[arg-type,attr-defined]
            self._with_flow = len(running)

    def advance(self, dt_ns: float) -> None:
        self.engine.advance(dt_ns)

    def _event(self, t: float) -> float | None:
        """As the replay's loop, except that where the engine plays events itself (the flat engine's compiled
        loop: :meth:`astra_adapter.fabric.flat_slots.OnSlots.flow_events`), the new ops' flows started first as
        the horizon starts them, it plays them up to the first that is more than a flow's end inside a step, its
        move done; the compute ends due then as after any event. The same events, the same floats."""
        flow_events = self._flow_events
        if flow_events is not None:
            if self._with_flow < len(self.running) or self._entered:
                self._start_flows()
            heap = self.heap
            after = flow_events(t, heap[0][0] if heap else float("inf"))
            if after is not None:
                self._compute_ends(after)
                return after
        return super()._event(t)

    def settle(self, t: float) -> None:
        """Each member leaves an op when its own part of the last step is done (the replay's ranks leave a
        collective at their last receive, not together); the op ends when the last one leaves. Only the ops
        whose busy ranks may have changed are asked (the others' ranks that were to leave have left), in the
        order of ``running`` (their flows started in that order); an op joined by its last member since the last
        horizon has no flow yet and starts there."""
        changed = self.engine.changed  # the ops whose busy ranks may have changed (None: any)
        if changed is None:
            asked = [op for op in self.running if op.flow is not None]  # type: ignore[attr-defined]
        elif not changed:  # (nothing changed since the last settle: nothing to ask)
            return
        else:
            of_flow = self._of_flow
            asked = sorted((of_flow[k] for k in changed if k in of_flow), key=_flow_order)
        for op in asked:
            assert isinstance(op, _FlowOp) and op.flow is not None
            busy = self.engine.busy_ranks(op.flow)
            if busy is None:
                continue
            leaving = [rank for rank in op.members if rank not in busy and rank not in op.gone]
            for rank in leaving:
                op.gone.add(rank)
                self.leave(op, rank, t)
            if len(op.gone) == len(op.members):
                self.running.remove(op)
                self._with_flow -= 1  # an op with its flow: one of the first
                self.engine.remove(op.flow)
                del self._of_flow[id(op.flow)]
            for rank in leaving:
                self.pump(rank, t)
        if changed is not None:
            changed.clear()


def play_on_fabric(trace: Trace, engine: FlowEngine, compiled: CompiledTrace | None = None) -> Timeline:
    """``trace`` played with every op on ``engine``; ``compiled`` (:class:`CompiledTrace` of ``trace``) is shared
    by several plays of one trace. The cyclic garbage collector is paused during the play: what a play allocates
    (ops, their steps' arrays, the events' tuples) is freed by reference counts, and its few cycles (311 objects in
    a 1024-rank draw-1 play, against some 2,700 collections and one full one rescanning the trace's records) wait
    for the collector's next run (benchmarks/README.md, "The play's Python side")."""
    with collector_paused():
        return timeline_of(FabricPlayer(trace, engine, compiled))


