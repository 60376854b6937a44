# Whole ops of a one-step plan back to back (included by exchange_loop.pyx): the bench's timed all-to-alls.

cdef extern from "<sys/ioctl.h>" nogil:
    int c_ioctl "ioctl" (int fd, unsigned long request, void *arg)

cdef extern from "<time.h>" nogil:
    int clock_nanosleep(int clock_id, int flags, const timespec *request, timespec *remain)
    int TIMER_ABSTIME

cdef unsigned long _SIOCOUTQNSD = 0x894B  # genie.engine.flows._SIOCOUTQNSD
cdef int64_t _SENT_POLL_NS = 200000  # genie.engine.flows.SENT_POLL_S

# where an op is (`ExchangeOps.run_ops`), as `run_schedule` goes through it
cdef enum:
    S_BEGIN = 0        # the op's deadline set; its step not begun
    S_STEP = 1         # the step (`exchange(..., wait_for_sends=False)`)
    S_FLUSH_BEGIN = 2  # the step done: the flush's time checked
    S_FLUSH = 3        # the sends left pushed until they are all taken (`flush`'s `exchange((), ())`)
    S_SENT = 4         # waiting until TCP has sent the bulk sends (`wait_sent`)
    S_SENT_SLEEP = 5   # between two looks (`time.sleep(SENT_POLL_S)`)
    S_END = 6

OP_BEGIN, OP_STEP, OP_FLUSH_BEGIN, OP_FLUSH, OP_SENT = S_BEGIN, S_STEP, S_FLUSH_BEGIN, S_FLUSH, S_SENT


cdef inline int64_t _unsent_bytes(int fd) noexcept nogil:  # genie.engine.flows.unsent_bytes
    cdef int value = 0
    if c_ioctl(fd, _SIOCOUTQNSD, &value) < 0:
        return 0
    return value


cdef class ExchangeOps(ExchangeLoop):
    """`ExchangeLoop` that also runs whole ops of a one-step plan back to back (`run_ops`): per op what
    `run_schedule` runs for it without Python — the op's deadline, the step, the flush (the sends left, then the
    wait until TCP has sent the bulk sends, polling every `SENT_POLL_S`) — stamped as the bench stamps it."""

    cdef int n_bulk, stage
    cdef int *bulk_fd
    cdef char *bulk_pending
    cdef int64_t op_deadline_ns, sent_deadline_ns, wake_ns
    cdef double stage_timeout_s
    cdef Py_ssize_t op_k, ops
    cdef int64_t *starts
    cdef int64_t *ends

    def __cinit__(self, *args, **kwargs):
        n = self.slots if self.slots else 1
        self.bulk_fd = <int *> malloc(n * sizeof(int))
        self.bulk_pending = <char *> malloc(n * sizeof(char))
        if not (self.bulk_fd and self.bulk_pending):
            raise MemoryError()
        self.starts = NULL
        self.ends = NULL

    def __dealloc__(self):
        free(self.bulk_fd)
        free(self.bulk_pending)
        free(self.starts)
        free(self.ends)

    def run_ops(self, bulk, Py_ssize_t ops, double timeout_s):
        """Up to `ops` ops of the step `load` took, (`bulk` the slots whose sends the flush waits for TCP to send,
        in the order `wait_sent` looks at them, empty: no wait), each with its own deadline `timeout_s` after it
        began. Returns (spans, outcome, stage, index, errno, stage timeout): `spans` the (start ns, end ns) of each
        op done; with an outcome other than DONE the op after them stopped in `stage` (OP_BEGIN, OP_STEP, ...),
        `index` and `errno` as `run` reports them, the stage's timeout as the reference passes it on (`sent_left`
        and `recv_left_of` say what is left of that op's messages). A ValueError (`bulk`) before anything began."""
        cdef int i, outcome, index = -1, error = 0
        if ops <= 0:
            return [], C_DONE, S_BEGIN, -1, 0, timeout_s
        # no op's sends taken yet (what the reference's outbox holds before its first op: nothing), whatever
        # follows; `sends_left` says nothing of an earlier run's sends
        self.n_send = self.n_recv = 0
        self.left_out = self.left_in = 0
        if len(bulk) > self.slots:
            raise ValueError("more messages than peers")
        fds = []
        for i, slot in enumerate(bulk):
            if not 0 <= slot < self.slots:
                raise ValueError(f"bulk {i}: slot {slot}")
            fds.append(self.send_fd[slot])
        free(self.starts)
        free(self.ends)
        self.starts = <int64_t *> malloc(ops * sizeof(int64_t))
        self.ends = <int64_t *> malloc(ops * sizeof(int64_t))
        if not (self.starts and self.ends):
            raise MemoryError()
        for i, fd in enumerate(fds):
            self.bulk_fd[i] = fd
        self.n_bulk = len(fds)
        self.ops, self.op_k, self.stage = ops, 0, S_BEGIN
        try:  # (as in `run`: the sockets' flags given back however the ops end)
            _bulk_sends(self)
            while True:
                with nogil:
                    outcome = self._ops(timeout_s, &index, &error)
                if outcome != C_INTERRUPTED:
                    break
                try:
                    PyErr_CheckSignals()
                except BaseException:
                    self._interrupted()
                    raise
        finally:
            _restore_flags(self)
        spans = [(self.starts[i], self.ends[i]) for i in range(self.op_k)]
        return spans, outcome, self.stage, index, error, self.stage_timeout_s

    cdef int _ops(self, double timeout_s, int *index, int *error) noexcept nogil:
        cdef int outcome, b, pending
        cdef int64_t now, remaining_ns
        cdef timespec wake
        while self.op_k < self.ops:
            if self.stage == S_BEGIN:  # run_schedule: the op's deadline; _run_plan: the time left at step 0
                now = _monotonic_ns()
                self.starts[self.op_k] = now
                self.op_deadline_ns = now + <int64_t> (timeout_s * 1e9)
                remaining_ns = self.op_deadline_ns - _monotonic_ns()
                self.stage_timeout_s = remaining_ns * 1e-9
                if remaining_ns <= 0:
                    return C_OP_LATE
                self._begin_step(0)
                self.stage = S_STEP
            if self.stage == S_STEP:
                outcome = self._step(self.stage_timeout_s, index, error)
                if outcome != C_DONE:
                    return outcome
                self.stage = S_FLUSH_BEGIN
            if self.stage == S_FLUSH_BEGIN:  # _flush: the time left
                remaining_ns = self.op_deadline_ns - _monotonic_ns()
                self.stage_timeout_s = remaining_ns * 1e-9
                if remaining_ns <= 0:
                    return C_OP_LATE
                if self.left_out > 0:  # flush: the outbox's sends, waited for
                    self.n_recv = 0
                    self.left_in = 0
                    self.wait_for_sends = 1
                    self.n_watched = 0
                    self.phase = P_PASS
                    self.stage = S_FLUSH
                else:
                    self.stage = S_SENT
                    self.sent_deadline_ns = -1
            if self.stage == S_FLUSH:
                outcome = self._step(self.stage_timeout_s, index, error)
                if outcome != C_DONE:
                    return outcome
                self.stage = S_SENT
                self.sent_deadline_ns = -1
            while self.stage == S_SENT or self.stage == S_SENT_SLEEP:  # wait_sent, for more than one peer
                if self.stage == S_SENT_SLEEP:
                    wake.tv_sec = self.wake_ns // 1000000000
                    wake.tv_nsec = self.wake_ns % 1000000000
                    if clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &wake, NULL) == EINTR:
                        return C_INTERRUPTED
                    self.stage = S_SENT
                if self.n_bulk <= 1:
                    self.stage = S_END
                    break
                if self.sent_deadline_ns < 0:
                    self.sent_deadline_ns = _monotonic_ns() + <int64_t> (self.stage_timeout_s * 1e9)
                    for b in range(self.n_bulk):
                        self.bulk_pending[b] = 1
                pending = 0
                for b in range(self.n_bulk):
                    if self.bulk_pending[b]:
                        if _unsent_bytes(self.bulk_fd[b]) > 0:
                            pending += 1
                        else:
                            self.bulk_pending[b] = 0
                if pending == 0:
                    self.stage = S_END
                    break
                if _monotonic_ns() >= self.sent_deadline_ns:
                    return C_SENT_LATE
                self.wake_ns = _monotonic_ns() + _SENT_POLL_NS
                self.stage = S_SENT_SLEEP
            self.ends[self.op_k] = _monotonic_ns()
            self.op_k += 1
            self.stage = S_BEGIN
        return C_DONE

    def bulk_left(self):
        """The bulk sends (their index in `bulk`) TCP had not sent all of at the last look."""
        return [b for b in range(self.n_bulk) if self.bulk_pending[b]]
