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
#
# A ring (coflow) step's end is such an event too where the op's next step is the same step object (the plans
# memoise identical steps: a ring's 2(n-1) steps are most often one), pays no latency and is not the op's last
# (`again`: per slot, how many such entries are left, set by FlowSlots.place). The Python loop would enter it
# (FabricOp.next_step), settle nothing (every member is busy before the last step), and place the op again in its
# own slot (FlowSlots.place: the step's bytes and moving flags copied in, its moving flows listed and counted on
# their routes) before the next solve - so run() does that here (_enter): the same copies, the same recounts in
# the same order (the move's uncounts, then each entered slot's counts in the order of the move's list, as the
# ops enter the pending lay-out), the op's step, placed step and count written back. Where the event is more than
# that (a compute end due, a member leaving, another step ending) nothing is entered here: Python does it all.


cdef int64_t _UNCOUNTED_BUSY = 1 << 62  # flat_slots._UNCOUNTED: a slot's busy ranks not counted yet


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
    cdef int64_t[::1] again  # per slot: entries of its op's next step (the same step) left to run() (_enter)
    cdef double[::1] init_left  # per flow: its held step's bytes (StepFlows.wire_bytes), what an entry copies in
    cdef unsigned char[::1] init_flags  # and its moving flag (StepFlows.moving)
    cdef public int64_t entered  # ring steps entered by run() (a counter for the tests and benchmarks)

    def __cinit__(self, LiveRates live, Py_ssize_t num_ranks):
        self.live = live
        self.num_ranks = num_ranks
        self.stamp = <int64_t*>calloc(max(num_ranks, 1), sizeof(int64_t))
        if not self.stamp:
            raise MemoryError()

    def __dealloc__(self):
        free(self.stamp)

    def bind(self, unsigned char[::1] notify, list ops, int64_t[::1] src, int64_t[::1] dst, int64_t[::1] busy,
             int64_t[::1] again, double[::1] init_left, unsigned char[::1] init_flags):
        """The slots' flags (per slot: its op is on its last step), their ops, each flow's ranks and each slot's
        count of busy ranks; per slot the entries of the same step left to run(), per flow its step's bytes and
        moving flag (FlowSlots: bound again whenever its views change)."""
        self.notify, self.ops, self.src, self.dst, self.busy = notify, ops, src, dst, busy
        self.again, self.init_left, self.init_flags = again, init_left, init_flags

    cdef int _enter(self, Py_ssize_t k) except -1:
        """Slot ``k``'s op on to its next step, the same step as the one that just ended (``again[k]`` > 0): what
        FabricOp.next_step and FlowSlots.place do there - the step's bytes and flags copied into the slot, its
        moving flows listed (ascending) and counted on their routes in index order, the slot's start time and
        busy count reset - and the op's step, placed step and count of moving flows written back."""
        cdef LiveRates live = self.live
        cdef Py_ssize_t a = live.b_starts[k], b, i
        cdef int64_t m = 0, r
        b = live.b_starts[k + 1] if k + 1 < live.b_starts.shape[0] else live.b_left.shape[0]
        for i in range(a, b):
            live.b_left[i] = self.init_left[i]
            live.b_active[i] = self.init_flags[i]
            if self.init_flags[i]:
                live.b_listed[a + m] = i
                m += 1
        live.b_counts[k] = m
        live.b_begun[k] = live.now
        self.busy[k] = _UNCOUNTED_BUSY
        self.again[k] -= 1
        for i in range(a, b):  # (FlowSlots.place's count_flows: +1 per moving flow, in index order)
            if live.b_active[i]:
                r = live.b_routes[i]
                live._recount(r, live.count[r] + 1)
        op = self.ops[k]
        op.step = op.step + 1
        op.placed_step = op.step
        op.active_count = m
        self.entered += 1
        return 0

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
                    if self.again[k] <= 0:  # (else a ring step whose next step is the same: entered below if plain)
                        plain = False  # a step ended
                elif self.notify[k]:  # on its last step: a member leaves if it has no flow moving now
                    n = self._busy_count(k)
                    if n != self.busy[k]:
                        self.busy[k] = n  # (busy ranks only go: where the count was stale, one event more in Python)
                        plain = False
            if not plain:
                return (t, moved)
            for k, c in moved:
                if c == 0:
                    self._enter(k)  # (in the move's order: the order the ops enter the pending lay-out)
                else:
                    self.ops[k].active_count = c
