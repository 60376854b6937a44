# Included by fairshare_core.pyx (one extension: it reads LiveRates's C state directly): the flat engine's
# per-event loop on its slots, compiled (issue #36 item 6).
#
# The player's loop (astra_adapter/timeline.py, _Player.play, on FabricPlayer and the flat engine's slots:
# astra_adapter/fabric/flat_slots.py, OnSlots) does at every event: settle the ops that changed, the horizon (the
# lay-out if an op changed, the solve if a flow ended, the least time to a flow's end), the advance (every moving
# flow moved, the flows that ended uncounted, each op whose count changed told), the clock, the compute ends due.
# Most events are a flow's end inside a step that goes on: a ring step's flows end at ~10 instants, and only the
# last one ends the step. For such an event the settle asks nothing (an op before its last step has every member
# busy; on its last step, where no member's last flow ended, no member leaves), nothing is laid out, and the heap
# has nothing due - so it is the solve, the least quotient, the move and
# the clock, all of which LiveRates already does in C. FlowEvents.run plays those events in one call, the same
# calls in the same order (LiveRates._solve, _earliest_listed, _move_listed) and the clock's same two sums, and
# hands the first event that is more than that back to Python with its move done: the player then does what its
# loop does after a move (each op whose count changed told, a step that ended entered, the compute ends due).
# So every float is the Python loop's (tests/test_fabric_events.py).


cdef class FlowEvents:
    """The flat engine's events played in C while each is only a flow's end inside a step (see the comment above):
    on the LiveRates ``live`` and the slots bound to it (``LiveRates.bind_slots``) and here (:meth:`bind`)."""

    cdef LiveRates live
    cdef unsigned char[::1] notify  # per slot: its op is on its last step (a member may leave when a flow ends)
    cdef list ops  # per slot its op (FlowSlots.ops: None where dead)
    cdef int64_t[::1] src  # per flow its sending rank
    cdef int64_t[::1] dst  # and its receiving rank
    cdef int64_t[::1] busy  # per slot on its last step: its ranks with a flow moving, as last counted (or more)
    cdef int64_t* stamp  # per rank: the count it was last seen in (_busy_count)
    cdef int64_t stamps
    cdef Py_ssize_t num_ranks
    cdef public bint rated  # the rates are those of the moving flows now (the engine's _rated, kept in step)
    cdef public int64_t solves  # solves run by run() (the engine adds them to its count)
    cdef public int64_t events  # events played by run(), the last one's included

    def __cinit__(self, LiveRates live, Py_ssize_t num_ranks):
        self.live = live
        self.num_ranks = num_ranks
        self.stamp = <int64_t*>calloc(max(num_ranks, 1), sizeof(int64_t))
        if not self.stamp:
            raise MemoryError()

    def __dealloc__(self):
        free(self.stamp)

    def bind(self, unsigned char[::1] notify, list ops, int64_t[::1] src, int64_t[::1] dst, int64_t[::1] busy):
        """The slots' flags (per slot: its op is on its last step), their ops, each flow's ranks and each slot's
        count of busy ranks (FlowSlots: bound again whenever its views change)."""
        self.notify, self.ops, self.src, self.dst, self.busy = notify, ops, src, dst, busy

    cdef int64_t _busy_count(self, Py_ssize_t k) noexcept:
        """Slot ``k``'s distinct ranks sending or receiving a flow that moves (its listed flows): the ranks
        FabricPlayer.settle finds busy in its op (FlatFlowEngine.busy_ranks: after a move, the flows above their
        done threshold are the moving ones)."""
        cdef LiveRates live = self.live
        cdef Py_ssize_t j, i, a = live.b_starts[k]
        cdef int64_t r, n = 0
        cdef int64_t* stamp = self.stamp
        self.stamps += 1
        for j in range(a, a + live.b_counts[k]):
            i = live.b_listed[j]
            r = self.src[i]
            if r < 0 or r >= self.num_ranks:
                return -1  # not a rank of the network: counted as a change (the player's settle decides)
            if stamp[r] != self.stamps:
                stamp[r] = self.stamps
                n += 1
            r = self.dst[i]
            if r < 0 or r >= self.num_ranks:
                return -1
            if stamp[r] != self.stamps:
                stamp[r] = self.stamps
                n += 1
        return n

    def run(self, double t, double t_heap):
        """Events from time ``t`` (the next compute end at ``t_heap``) while each moves flows only inside steps
        that go on before their last, with none due on the heap: per event the solve if a flow ended (``rated``
        false), the horizon, the move, the clock (``t + horizon``, or ``t_heap``), each op whose count changed
        given its count. Returns None if it played none (nothing moves and nothing is due: the player's loop
        says so), else ``(t, moved)`` after the last event played: ``moved`` None where that event was one of the
        above, else its (slot, count) list - the move done, the rest (the ops told, a step entered, the compute
        ends due at ``t``) the player's."""
        cdef LiveRates live = self.live
        cdef double horizon, dt
        cdef bint op_first, plain
        cdef Py_ssize_t k
        cdef int64_t c, n
        cdef list moved
        cdef int64_t played = 0
        while True:
            if not self.rated:
                live._solve(live.t_ptr, live.t_res, live.t_w)
                self.solves += 1
                self.rated = True
            horizon = live._earliest_listed(live.b_left, live.b_routes, live.b_starts, live.b_counts, live.b_listed)
            if not horizon < INFINITY:  # min(inf, horizon)
                horizon = INFINITY
            if horizon == INFINITY and t_heap == INFINITY:
                return (t, None) if played else None
            op_first = t + horizon <= t_heap
            dt = horizon if op_first else t_heap - t
            moved = live._move_listed(live.b_left, live.b_active, live.b_done, live.b_starts, live.b_routes,
                                      live.b_counts, live.b_listed, dt)
            t = t + horizon if op_first else t_heap
            played += 1
            self.events += 1
            if moved:
                self.rated = False
            plain = t < t_heap  # no compute end due
            for k, c in moved:
                if c == 0:
                    plain = False  # a step ended
                elif self.notify[k]:  # on its last step: a member leaves if it has no flow moving now
                    n = self._busy_count(k)
                    if n != self.busy[k]:
                        self.busy[k] = n  # (busy ranks only go: where the count was stale, one event more in Python)
                        plain = False
            if not plain:
                return (t, moved)
            for k, c in moved:
                self.ops[k].active_count = c
