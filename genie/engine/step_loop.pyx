# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The bench's latency-critical step loop, compiled (issue #36 item 2; benchmarks/README.md "The step's software").

A run without data whose every step is at most one send and one receive of payload-agnostic bytes within the
transport's window (recursive doubling, trees, PAT's small steps) is, per step: one non-blocking `send`, blocking
`recv` calls until the message is in, the receive connection put back in delayed-ACK mode. That is what
`SocketTransport._send_now` / `_recv_now` do in Python (the reference, which runs wherever this module is not
built); here the same system calls, in the same order, run with no Python between them and without the GIL.

The loop stops at the first step it cannot finish by itself and says where and why (an outcome code, the step,
the bytes done, the errno); `SocketTransport.run_steps` turns that into the reference's handling — a send the
socket did not take whole queued in the outbox, a receive slice that ended empty checked against the deadline,
a closed or failed connection named as the reference names it. Nothing here decides anything the reference
does not. `run_ops` runs whole ops back to back the same way (the bench's timed iterations: no Python between
them), stamping each op's start and end; an op it stops in goes to the reference from that step.
"""

include "socket_calls.pxi"

cdef extern from "<netinet/in.h>" nogil:
    int IPPROTO_TCP

cdef extern from "<netinet/tcp.h>" nogil:
    int TCP_QUICKACK

# outcomes of `CompiledSteps.run` (mirrored in genie/engine/transport.py)
cdef enum:
    C_DONE = 0          # every step from `start` on is complete
    C_SEND_BLOCKED = 1  # the step's send went only in part (`done` bytes): the rest is the outbox's
    C_RECV_SLICE = 2    # the step's send is out; its receive has `done` bytes and a slice ended without more
    C_LATE = 3          # the op's deadline had passed before the step began
    C_SEND_FAILED = 4   # the step's send failed with `error`
    C_RECV_CLOSED = 5   # the peer closed (or reset) the step's receive connection after `done` bytes
    C_RECV_FAILED = 6   # the step's receive failed with `error`

DONE, SEND_BLOCKED, RECV_SLICE, LATE = C_DONE, C_SEND_BLOCKED, C_RECV_SLICE, C_LATE
SEND_FAILED, RECV_CLOSED, RECV_FAILED = C_SEND_FAILED, C_RECV_CLOSED, C_RECV_FAILED


cdef inline double _monotonic_s() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef class CompiledSteps:
    """A plan's steps as C arrays: per step the send socket (-1: none) and size, the receive socket and size, and
    whether the receive connection is kept in delayed-ACK mode. `window` is the transport's window (kept alive
    here): every send reads its start, every receive lands at its start, as in the reference."""

    cdef Py_ssize_t count
    cdef int *send_fd
    cdef Py_ssize_t *send_size
    cdef int *recv_fd
    cdef Py_ssize_t *recv_size
    cdef char *delay_acks
    cdef int64_t *start_ns
    cdef int64_t *end_ns
    cdef unsigned char *window
    cdef Py_ssize_t window_bytes
    cdef object _window_ref

    def __cinit__(self, unsigned char[::1] window, steps):
        rows = list(steps)
        self.count = len(rows)
        n = self.count if self.count else 1
        self.send_fd = <int *> malloc(n * sizeof(int))
        self.send_size = <Py_ssize_t *> malloc(n * sizeof(Py_ssize_t))
        self.recv_fd = <int *> malloc(n * sizeof(int))
        self.recv_size = <Py_ssize_t *> malloc(n * sizeof(Py_ssize_t))
        self.delay_acks = <char *> malloc(n * sizeof(char))
        self.start_ns = <int64_t *> malloc(n * sizeof(int64_t))
        self.end_ns = <int64_t *> malloc(n * sizeof(int64_t))
        if not (self.send_fd and self.send_size and self.recv_fd and self.recv_size and self.delay_acks
                and self.start_ns and self.end_ns):
            raise MemoryError()
        self._window_ref = window
        self.window = &window[0]
        self.window_bytes = window.shape[0]
        cdef Py_ssize_t i
        for i, (send_fd, send_size, recv_fd, recv_size, delay_acks) in enumerate(rows):
            if send_size > self.window_bytes or recv_size > self.window_bytes or send_size < 0 or recv_size < 0:
                raise ValueError(f"step {i}: a message outside the {self.window_bytes}-byte window")
            self.send_fd[i] = send_fd
            self.send_size[i] = send_size
            self.recv_fd[i] = recv_fd
            self.recv_size[i] = recv_size
            self.delay_acks[i] = 1 if delay_acks else 0

    def __dealloc__(self):
        free(self.send_fd)
        free(self.send_size)
        free(self.recv_fd)
        free(self.recv_size)
        free(self.delay_acks)
        free(self.start_ns)
        free(self.end_ns)

    def __len__(self):
        return self.count

    def stamps(self, Py_ssize_t step):
        """When the last run began and ended `step` (ns, time.monotonic_ns()'s clock; with `stamp`), the end
        once its receive is in and its connection is back in delayed-ACK mode."""
        if not 0 <= step < self.count:
            raise IndexError(step)
        return self.start_ns[step], self.end_ns[step]

    def run(self, Py_ssize_t start, double deadline_s, bint stamp=False):
        """Run steps `start`.. until all are done or one needs the reference: (outcome, step, done bytes,
        errno). `deadline_s` is on time.monotonic()'s clock. With `stamp` each step begun records its start
        and each step done its end (`stamps`)."""
        cdef Py_ssize_t i = start, got = 0
        cdef int outcome, error = 0
        with nogil:
            outcome = self._steps(&i, deadline_s, stamp, &got, &error)
        return outcome, i, got, error

    def run_ops(self, Py_ssize_t ops, double timeout_s):
        """Up to `ops` whole ops back to back, each from its first step, each with its own deadline `timeout_s`
        after it began (as `run_schedule` sets it): what the bench's timed loop does per iteration, without
        Python between the ops. Returns (spans, outcome, step, done bytes, errno, deadline_s, start_ns):
        `spans` the (start ns, end ns) of each op done; with an outcome other than DONE, the op after them
        stopped at `step` as `run` reports it (LATE at the last step + 1: its time was up when its steps were
        done, which the reference's flush reports), begun at `start_ns` with deadline `deadline_s`."""
        cdef Py_ssize_t k = 0, i = 0, got = 0, n = ops if ops > 0 else 1
        cdef int outcome = C_DONE, error = 0
        cdef double deadline_s = 0.0
        cdef int64_t *starts = <int64_t *> malloc(n * sizeof(int64_t))
        cdef int64_t *ends = <int64_t *> malloc(n * sizeof(int64_t))
        if not (starts and ends):
            free(starts)
            free(ends)
            raise MemoryError()
        try:
            with nogil:
                while k < ops:
                    starts[k] = _monotonic_ns()
                    deadline_s = _monotonic_s() + timeout_s
                    i = 0
                    outcome = self._steps(&i, deadline_s, False, &got, &error)
                    if outcome != C_DONE:
                        break
                    if _monotonic_s() >= deadline_s:  # the reference's flush finds the op's time up
                        outcome = C_LATE
                        break
                    ends[k] = _monotonic_ns()
                    k += 1
            spans = [(starts[j], ends[j]) for j in range(k)]
            return spans, outcome, i, got, error, deadline_s, (starts[k] if k < ops else 0)
        finally:
            free(starts)
            free(ends)

    cdef int _steps(self, Py_ssize_t *index, double deadline_s, bint stamp, Py_ssize_t *got_out,
                    int *error_out) noexcept nogil:
        """Steps `index[0]`.. as `run` describes; `index`, `got_out` and `error_out` say where it stopped."""
        cdef Py_ssize_t i = index[0], size, got = 0
        cdef ssize_t n
        cdef int outcome = C_DONE, error = 0, zero = 0, fd
        cdef unsigned char *window = self.window
        while i < self.count:
            if _monotonic_s() >= deadline_s:
                outcome = C_LATE
                break
            if stamp:
                self.start_ns[i] = _monotonic_ns()
            got = 0
            size = self.send_size[i]
            fd = self.send_fd[i]
            if fd >= 0 and size > 0:
                n = c_send(fd, window, size, MSG_DONTWAIT | MSG_NOSIGNAL)
                if n < 0:
                    error = errno
                    if error == EAGAIN or error == EINTR:
                        outcome, error = C_SEND_BLOCKED, 0
                    else:
                        outcome = C_SEND_FAILED
                    break
                if n < size:
                    outcome, got = C_SEND_BLOCKED, n
                    break
            size = self.recv_size[i]
            fd = self.recv_fd[i]
            while got < size:
                n = c_recv(fd, window, size - got, 0)
                if n > 0:
                    got += n
                    continue
                if n == 0:
                    outcome = C_RECV_CLOSED
                    break
                error = errno
                if error == EAGAIN or error == EINTR:
                    outcome, error = C_RECV_SLICE, 0
                elif error == ECONNRESET:
                    outcome, error = C_RECV_CLOSED, 0
                else:
                    outcome = C_RECV_FAILED
                break
            if outcome != C_DONE:
                break
            if self.delay_acks[i]:
                c_setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &zero, sizeof(int))  # errors: as the reference
            if stamp:
                self.end_ns[i] = _monotonic_ns()
            i += 1
        index[0] = i
        got_out[0] = got
        error_out[0] = error
        return outcome
