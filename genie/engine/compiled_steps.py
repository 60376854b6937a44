"""A bench plan's steps run by the compiled step loop (`genie/engine/step_loop.pyx`, built by the install step;
issue #36 item 2, benchmarks/README.md "The step's software").

The loop runs what `SocketTransport.exchange` runs for the latency-critical shape — at most one send and one
receive per step, payload-agnostic, within the window, nothing queued — with the same system calls in the same
order: one non-blocking `send`, blocking `recv` calls bounded by the socket's receive slice, the receive connection
put back in delayed-ACK mode. Where a step needs more (a send the socket did not take whole, a slice that ended
without data, a closed or failed connection, the op's time up) the loop stops and this module hands the step to the
reference's own code, which decides and words everything as it does without the loop. Where the module is not built
the reference runs every step (`CompiledSteps` is None).
"""

from __future__ import annotations

import os
import time
from typing import Protocol, Sequence

from genie.engine.flows import Transfer, closed_failure, send_error
from genie.engine.links import PeerLink

try:
    from genie.engine.step_loop import DONE, LATE, RECV_CLOSED, RECV_SLICE, SEND_BLOCKED, SEND_FAILED, CompiledSteps
except ImportError:  # not built (no compiler at install): the pure Python reference runs every step
    CompiledSteps = None


class SocketTransport(Protocol):
    """What the hand-over uses of `genie.engine.transport.SocketTransport` (which imports this module)."""

    rank: int

    def exchange(self, sends: Sequence[Transfer], recvs: Sequence[Transfer], timeout_s: float, *,
                 wait_for_sends: bool = True) -> None: ...

    def queue_send(self, transfer: Transfer, sent_bytes: int) -> bool: ...

    def finish_recv(self, transfer: Transfer, got: int, timeout_s: float, deadline: float | None = None, *,
                    slice_ended: bool = False) -> None: ...

#: each step's sends and receives (`genie.engine.executor.transfer_plan`)
StepPlan = Sequence[tuple[Sequence[Transfer], Sequence[Transfer]]]

_KEPT_PLANS = 32  # a bench job keeps one plan per case; more than this and the oldest are compiled again


class CompiledPlans:
    """One transport's plans, compiled once each (by identity: the caller keeps its plan for the whole case).
    `window`, `links` and `delay_acks` are the transport's (`SocketTransport`)."""

    def __init__(self, window: memoryview, links: dict[int, PeerLink], delay_acks: dict[int, object],
                 bulk_bytes: int) -> None:
        self._window = window
        self._links = links
        self._delay_acks = delay_acks
        self._bulk_bytes = bulk_bytes
        self._plans: dict[int, tuple[StepPlan, object, list[set[int]]]] = {}

    def run(self, transport: SocketTransport, plan: StepPlan, start: int, deadline: float, timeout_s: float,
            stamps: list[tuple[int, int, int]] | None, bulk_peers: set[int]) -> int:
        """`bulk_peers`: the transport's peers sent more than `bulk_bytes` in one transfer since its last flush
        (`SocketTransport.flush`); the steps from `start` on add theirs, as `exchange` adds them."""
        steps, bulk_from = self._entry(plan)
        if steps is None:
            return start
        if bulk_from[start]:
            bulk_peers |= bulk_from[start]
        return run_steps(transport, steps, plan, start, deadline, timeout_s, stamps)

    def whole_ops(self, plan: StepPlan):
        """`plan` compiled for `CompiledSteps.run_ops` (None: it cannot run there): every step the loop's shape
        and no transfer in bulk, so an op's flush has nothing to wait for once its steps are done. An extension
        built before `run_ops` existed (a checkout updated without `pip install -e .`) runs op by op."""
        steps, bulk_from = self._entry(plan)
        return steps if steps is not None and not bulk_from[0] and hasattr(steps, "run_ops") else None

    def _entry(self, plan: StepPlan) -> tuple[object, list[set[int]]]:
        """`plan`'s compiled steps (None: not the loop's shape) and its `_bulk_from`, made once per plan."""
        entry = self._plans.get(id(plan))
        if entry is None or entry[0] is not plan:
            if len(self._plans) >= _KEPT_PLANS:
                self._plans.clear()
            entry = self._plans[id(plan)] = (plan, self.compile(plan), self._bulk_from(plan))
        return entry[1], entry[2]

    def _bulk_from(self, plan: StepPlan) -> list[set[int]]:
        """Per step, the peers that step or a later one sends more than `bulk_bytes` in one transfer."""
        out: list[set[int]] = [set()]
        for sends, _ in reversed(plan):
            out.append(out[-1] | {t.peer for t in sends if t.size_bytes > self._bulk_bytes})
        return out[::-1]

    def compile(self, plan: StepPlan):
        """`plan`'s steps for the compiled loop: None where it is not built or a step is not its shape — sends to
        at most one peer and receives from exactly one, payload-agnostic, within the window, with a connection.
        Several transfers to one peer in a step (PAT's chunks) are one message of their total: the bytes on the
        connection are the same, and a payload-agnostic transfer's content is irrelevant."""
        if CompiledSteps is None:
            return None
        window_bytes, links = len(self._window), self._links
        rows = []
        for sends, recvs in plan:
            if any(t.view is not None or t.peer not in links for t in (*sends, *recvs)) or not recvs \
                    or len({t.peer for t in sends}) > 1 or len({t.peer for t in recvs}) != 1:
                return None
            send_bytes, recv_bytes = sum(t.size_bytes for t in sends), sum(t.size_bytes for t in recvs)
            if send_bytes > window_bytes or recv_bytes > window_bytes:
                return None
            peer = recvs[0].peer
            rows.append((links[sends[0].peer].send.fileno() if sends else -1, send_bytes,
                         links[peer].recv.fileno(), recv_bytes, self._delay_acks[peer] is not None))
        return CompiledSteps(self._window, rows)


def run_steps(transport: SocketTransport, steps, plan: StepPlan, start: int, deadline: float,
              timeout_s: float, stamps: list[tuple[int, int, int]] | None = None,
              first: tuple[int, int, int, int] | None = None) -> int:
    """Run `plan` from step `start` in the compiled loop `steps`, handing each step the loop stops at to the
    reference; returns the first step the caller runs itself (len(plan): none). `deadline` is the op's, on
    time.monotonic()'s clock; `timeout_s` the op's timeout, for the messages. `stamps` (when given) gets
    (step, start ns, end ns) of every step done here, on time.monotonic_ns()'s clock. `first`: the loop has
    already run from `start` and stopped with this (outcome, step, done bytes, errno) (`CompiledSteps.run_ops`)."""
    index = start
    stamp = stamps is not None
    while True:
        begun = index
        if first is not None:
            (outcome, index, done_bytes, error), first = first, None
        else:
            outcome, index, done_bytes, error = steps.run(index, deadline, stamp)
        if stamp:
            stamps.extend((i, *steps.stamps(i)) for i in range(begun, index))
        if outcome == DONE or outcome == LATE:  # LATE: the caller's step loop names the step that found it so
            return index
        sends, recvs = plan[index]
        recv = _message(recvs)
        if outcome == SEND_BLOCKED:
            if not transport.queue_send(_message(sends), done_bytes):
                # the rest is queued: the reference receives while it keeps the queued send moving
                transport.exchange((), recvs, deadline - time.monotonic(), wait_for_sends=False)
                if stamp:
                    stamps.append((index, steps.stamps(index)[0], time.monotonic_ns()))
                return index + 1
            transport.finish_recv(recv, 0, timeout_s, deadline)
        elif outcome == RECV_SLICE:
            transport.finish_recv(recv, done_bytes, timeout_s, deadline, slice_ended=True)
        elif outcome == SEND_FAILED:
            raise send_error(transport.rank, sends[0].peer, error) from None
        elif outcome == RECV_CLOSED:
            raise closed_failure(transport.rank, recv.peer, done_bytes, recv.size_bytes)
        else:  # RECV_FAILED
            raise OSError(error, os.strerror(error))
        if stamp:
            stamps.append((index, steps.stamps(index)[0], time.monotonic_ns()))
        index += 1


def _message(transfers: Sequence[Transfer]) -> Transfer:
    """A step's transfers with one peer as the one message the compiled loop moves."""
    if len(transfers) == 1:
        return transfers[0]
    return Transfer(transfers[0].peer, sum(t.size_bytes for t in transfers))
