# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""A multi-peer step's sends and receives, compiled (issue #36 item 3; benchmarks/README.md "The all-to-all's
exchange, compiled").

The all-to-all posts a send and a receive to every peer in one step. The pure Python reference
(`SocketTransport.exchange` through `genie.engine.flows.StepExchange` and `SocketTransport._wait_loop`, which runs
wherever this module is not built) moves such a step with non-blocking system calls in one thread: an optimistic
pass (every send pushed until its socket takes no more, then every receive read until its socket is empty), then,
if one receive is all that is left, blocking reads bounded by the socket's receive slice, else the transport's
edge-triggered epoll set (write readiness watched on the send sockets still sending) and a pump of the peer an
event names (its receive on a read event, its send on a write event) until the step is done. Here the same system
calls, in the same order and with the same sizes and flags, run with no Python between them and without the GIL.
A payload-agnostic message is sent from the start of the transport's window and received with MSG_TRUNC (the
kernel discards it uncopied; socket pairs copy it into the window), at most a window per call, as the reference.
One difference in the calls, not in the bytes: a call of at least FILE_SEND_MIN_BYTES to a TCP connection of its
own (`file_slots`) is a `sendfile` from a memory file holding the window's bytes: TCP takes the file's pages, no copy
(benchmarks/README.md "The all-to-all's send without its copy"), and charges the socket for them as for a copy.
`sendfile` has no per-call non-blocking flag: those sockets are O_NONBLOCK while the loop runs (`run`, `run_ops`)
and get their flags back when it returns or raises. Without a file (no memfd) or where the socket refuses pages,
the loop sends with `send` as the reference does.

The loop decides nothing the reference does not: where a step fails or times out it stops and says where (an
outcome, the message's index, the errno); `genie.engine.compiled_exchange` raises what the reference raises. It
keeps its progress between calls: an `epoll_wait` or blocking read interrupted by a signal returns to Python (the
caller runs the signal's handler, as CPython does on EINTR) and the step resumes where it was.
"""

import os

from cpython.exc cimport PyErr_CheckSignals

include "socket_calls.pxi"
include "exchange_file.pxi"

cdef extern from "<sys/epoll.h>" nogil:
    ctypedef union epoll_data_t:
        void *ptr
        int fd
        uint32_t u32
        uint64_t u64
    cdef struct epoll_event:
        uint32_t events
        epoll_data_t data
    int epoll_wait(int epfd, epoll_event *events, int maxevents, int timeout)
    int epoll_ctl(int epfd, int op, int fd, epoll_event *event)
    int EPOLL_CTL_MOD
    uint32_t EPOLLIN, EPOLLOUT, EPOLLERR, EPOLLHUP, EPOLLRDHUP, EPOLLET

cdef extern from "<sys/select.h>" nogil:
    int FD_SETSIZE

# outcomes of `ExchangeLoop.run` (mirrored in genie/engine/compiled_exchange.py)
cdef enum:
    C_DONE = 0          # the step is complete (its receives, and its sends if it waits for them)
    C_SEND_FAILED = 1   # send `index` failed with `error`
    C_RECV_CLOSED = 2   # the peer closed (or reset) receive `index`'s connection
    C_RECV_FAILED = 3   # receive `index` failed with `error`
    C_LATE_ONE = 4      # the lone receive left (`index`) found the step's time up when a slice ended empty
    C_LATE = 5          # the epoll wait found the step's time up
    C_INTERRUPTED = 6   # (internal) a blocking call returned EINTR: the caller checks signals, then resumes
    C_WAIT_FAILED = 7   # epoll_wait or epoll_ctl failed with `error` (select.epoll.poll / .modify raise)
    C_OP_LATE = 8       # (`ExchangeOps`) the op's time was up before its step or its flush began
    C_SENT_LATE = 9     # (`ExchangeOps`) TCP had not sent every bulk send when the flush's time was up

DONE, SEND_FAILED, RECV_CLOSED, RECV_FAILED, LATE_ONE, LATE, WAIT_FAILED = C_DONE, C_SEND_FAILED, C_RECV_CLOSED, \
    C_RECV_FAILED, C_LATE_ONE, C_LATE, C_WAIT_FAILED
OP_LATE, SENT_LATE = C_OP_LATE, C_SENT_LATE

# the phases of a step, as the reference goes through them
cdef enum:
    P_PASS = 0   # the optimistic pass (StepExchange.progress)
    P_ONE = 1    # one receive left and nothing to send: blocking reads (SocketTransport._recv_blocking)
    P_WAIT = 2   # the epoll wait (SocketTransport._wait_loop)
    P_OVER = 3

cdef int64_t _LONGEST_WAIT_NS = 2000000000000000  # ~23 days: epoll_wait's int milliseconds
cdef uint32_t _WATCH_IN = EPOLLIN | EPOLLRDHUP | EPOLLET  # genie.engine.transport.WATCH_IN
cdef uint32_t _EVENT_IN = EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP  # genie.engine.flows._EPOLL_IN
cdef uint32_t _EVENT_OUT = EPOLLOUT | EPOLLERR | EPOLLHUP  # genie.engine.flows._EPOLL_OUT


cdef class ExchangeLoop:
    """One transport's peers as slots (`links`: per slot the send and the receive socket's fd, in the transport's
    order), its epoll set `epoll_fd` (every fd registered with WATCH_IN, data = the fd, as `select.epoll`
    registers) and its `window` (kept alive here). `run` moves one step. `file_slots`: the slots whose send socket
    is a TCP connection of its own, whose bulk sends come from a file of the window's bytes now (the module doc)."""

    cdef int slots, epoll_fd, fd_count, max_events, phase, wait_for_sends, n_send, n_recv, n_watched
    cdef int left_in, left_out, n_tmpl_send, n_tmpl_recv
    cdef int *tmpl_send_slot      # the step `load` took: per send its slot and size (`_begin_step` starts it)
    cdef Py_ssize_t *tmpl_send_size
    cdef int *tmpl_recv_slot
    cdef Py_ssize_t *tmpl_recv_size
    cdef int *send_fd
    cdef int *recv_fd
    cdef int *fd_slot             # fd -> slot (-1: not the transport's)
    cdef int *send_at             # slot -> index of its send in this step (-1: none pending)
    cdef int *recv_at             # slot -> index of its receive in this step (-1: none pending)
    cdef int *send_slot
    cdef int *recv_slot
    cdef int *watched
    cdef Py_ssize_t *send_left
    cdef Py_ssize_t *recv_left
    cdef epoll_event *events
    cdef int64_t deadline_ns
    cdef unsigned char *window
    cdef Py_ssize_t window_bytes
    cdef object _window_ref
    cdef int file_fd              # the window's bytes in a memory file (-1: none yet - it is made at the first bulk
                                  # send, no memory for runs without one - or none to be had)
    cdef char *file_ok            # slot -> its sends may come from the file
    cdef int *file_flags          # slot -> its send socket's flags before this run made it O_NONBLOCK (-1: not)
    cdef Py_ssize_t file_bytes

    def __cinit__(self, unsigned char[::1] window, int epoll_fd, links, file_slots=()):
        self.file_fd = -1
        rows = [(int(s), int(r)) for s, r in links]
        self.slots = len(rows)
        n = self.slots if self.slots else 1
        self.fd_count = max([max(s, r) for s, r in rows], default=0) + 1
        self.max_events = FD_SETSIZE - 1  # what select.epoll.poll asks for by default
        self.send_fd = <int *> malloc(n * sizeof(int))
        self.recv_fd = <int *> malloc(n * sizeof(int))
        self.send_at = <int *> malloc(n * sizeof(int))
        self.recv_at = <int *> malloc(n * sizeof(int))
        self.send_slot = <int *> malloc(n * sizeof(int))
        self.recv_slot = <int *> malloc(n * sizeof(int))
        self.watched = <int *> malloc(n * sizeof(int))
        self.send_left = <Py_ssize_t *> malloc(n * sizeof(Py_ssize_t))
        self.recv_left = <Py_ssize_t *> malloc(n * sizeof(Py_ssize_t))
        self.tmpl_send_slot = <int *> malloc(n * sizeof(int))
        self.tmpl_send_size = <Py_ssize_t *> malloc(n * sizeof(Py_ssize_t))
        self.tmpl_recv_slot = <int *> malloc(n * sizeof(int))
        self.tmpl_recv_size = <Py_ssize_t *> malloc(n * sizeof(Py_ssize_t))
        self.fd_slot = <int *> malloc(self.fd_count * sizeof(int))
        self.events = <epoll_event *> malloc(self.max_events * sizeof(epoll_event))
        self.file_ok = <char *> malloc(n * sizeof(char))
        self.file_flags = <int *> malloc(n * sizeof(int))
        if not (self.send_fd and self.recv_fd and self.send_at and self.recv_at and self.send_slot
                and self.recv_slot and self.watched and self.send_left and self.recv_left and self.tmpl_send_slot
                and self.tmpl_send_size and self.tmpl_recv_slot and self.tmpl_recv_size and self.fd_slot
                and self.events and self.file_ok and self.file_flags):
            raise MemoryError()
        self._window_ref = window
        self.window = &window[0]
        self.window_bytes = window.shape[0]
        self.epoll_fd = epoll_fd
        self.phase = P_OVER
        cdef int i
        for i in range(self.fd_count):
            self.fd_slot[i] = -1
        for i, (send_fd, recv_fd) in enumerate(rows):
            if send_fd < 0 or recv_fd < 0:
                raise ValueError(f"slot {i}: a closed socket")
            self.send_fd[i] = send_fd
            self.recv_fd[i] = recv_fd
            self.fd_slot[send_fd] = i
            self.fd_slot[recv_fd] = i
            self.send_at[i] = -1
            self.recv_at[i] = -1
            self.file_ok[i] = 0
            self.file_flags[i] = -1
        _file_slots(self, file_slots)

    def __dealloc__(self):
        if self.file_fd >= 0:
            close(self.file_fd)
        free(self.file_ok)
        free(self.file_flags)
        free(self.send_fd)
        free(self.recv_fd)
        free(self.send_at)
        free(self.recv_at)
        free(self.send_slot)
        free(self.recv_slot)
        free(self.watched)
        free(self.send_left)
        free(self.recv_left)
        free(self.tmpl_send_slot)
        free(self.tmpl_send_size)
        free(self.tmpl_recv_slot)
        free(self.tmpl_recv_size)
        free(self.fd_slot)
        free(self.events)

    @property
    def file_sent_bytes(self):  # bytes sent from the window's file so far
        return self.file_bytes

    def file_slots(self):  # the slots whose bulk sends may come from the window's file
        return [slot for slot in range(self.slots) if self.file_ok[slot]]

    def load(self, sends, recvs):
        """The step `run` (or `run_ops`) moves next: `sends` [(slot, bytes left)] in the reference's order (the
        outbox's flows, then the step's new ones), `recvs` [(slot, bytes)] in the step's order, each slot at most
        once per list and every size > 0. A ValueError leaves what the last `run` reports (`sends_left`,
        `sent_left`, `recv_left_of`) as it was: nothing of the step began."""
        cdef int i
        cdef int n_send = len(sends), n_recv = len(recvs)
        self.n_tmpl_send = self.n_tmpl_recv = 0  # refused below: no step to run, not a mix of two
        if n_send > self.slots or n_recv > self.slots:
            raise ValueError("more messages than peers")
        for i in range(self.slots):  # (scratch: which slot has a message; `_begin_step` marks them again)
            self.send_at[i] = -1
            self.recv_at[i] = -1
        self._take(sends, "send", self.tmpl_send_slot, self.tmpl_send_size, self.send_at)
        self._take(recvs, "receive", self.tmpl_recv_slot, self.tmpl_recv_size, self.recv_at)
        self.n_tmpl_send, self.n_tmpl_recv = n_send, n_recv

    cdef int _take(self, messages, str kind, int *slots, Py_ssize_t *sizes, int *at) except -1:
        """`load`'s check and copy of one list of (slot, size): each slot once and in range, every size > 0."""
        cdef int i, slot
        cdef Py_ssize_t size
        for i, (slot, size) in enumerate(messages):
            if not 0 <= slot < self.slots or at[slot] >= 0 or size <= 0:
                raise ValueError(f"{kind} {i}: slot {slot}, {size} bytes")
            slots[i] = slot
            sizes[i] = size
            at[slot] = i
        return 0

    def run(self, bint wait_for_sends, double timeout_s):
        """Move the step `load` took. `timeout_s` as `exchange` gets it. Returns (outcome, index, errno);
        afterwards `sent_left(i)` and `recv_left_of(i)` say what is left of each message."""
        cdef int outcome
        cdef double t = timeout_s
        self._begin_step(wait_for_sends)
        cdef int index = -1, error = 0
        try:  # (the sockets' flags given back however the run ends: done, failed, a handler's exception)
            _bulk_sends(self)
            while True:
                with nogil:
                    outcome = self._step(t, &index, &error)
                if outcome != C_INTERRUPTED:
                    return outcome, index, error
                try:
                    PyErr_CheckSignals()  # a handler that raises ends the step, as in the reference
                except BaseException:
                    self._interrupted()
                    raise
        finally:
            _restore_flags(self)

    cdef void _begin_step(self, int wait_for_sends) noexcept nogil:
        """The step `load` took, from its start."""
        cdef int i
        for i in range(self.n_tmpl_send):
            self.send_slot[i] = self.tmpl_send_slot[i]
            self.send_left[i] = self.tmpl_send_size[i]
            self.send_at[self.send_slot[i]] = i
        for i in range(self.n_tmpl_recv):
            self.recv_slot[i] = self.tmpl_recv_slot[i]
            self.recv_left[i] = self.tmpl_recv_size[i]
            self.recv_at[self.recv_slot[i]] = i
        self.n_send, self.n_recv = self.n_tmpl_send, self.n_tmpl_recv
        self.left_out, self.left_in = self.n_send, self.n_recv
        self.wait_for_sends = wait_for_sends
        self.n_watched = 0
        self.phase = P_PASS

    cdef int _interrupted(self) except -1:
        """A signal handler raised (the caller re-raises it): the wait's watches undone, as `_wait_loop`'s finally
        undoes them - where that fails, its OSError replaces the handler's exception, as in the reference."""
        cdef int err
        with nogil:
            err = self._unwatch()
        self.phase = P_OVER
        if err:
            raise OSError(err, os.strerror(err))
        return 0

    def sends_left(self):
        """How many sends (of the last `run`) their sockets have not taken whole."""
        return self.left_out

    def sent_left(self, int i):
        """Bytes of send `i` (of the last `run`) not yet taken by its socket."""
        if not 0 <= i < self.n_send:
            raise IndexError(i)
        return self.send_left[i]

    def recv_left_of(self, int i):
        """Bytes of receive `i` (of the last `run`) not yet received."""
        if not 0 <= i < self.n_recv:
            raise IndexError(i)
        return self.recv_left[i]

    cdef inline bint _done(self) noexcept nogil:
        return self.left_in == 0 and (not self.wait_for_sends or self.left_out == 0)

    cdef int _pump_send(self, int i, int *error) noexcept nogil:
        """`pump_send`: send until the socket takes no more (0), the message is out (1), or it fails (-1)."""
        cdef ssize_t n
        cdef off_t offset
        cdef Py_ssize_t left
        cdef int slot = self.send_slot[i]
        cdef int fd = self.send_fd[slot]
        while self.send_left[i] > 0:
            left = self.send_left[i]
            if left > self.window_bytes:
                left = self.window_bytes
            if left >= _FILE_SEND_MIN_BYTES and self.file_flags[slot] >= 0 and self.file_ok[slot]:
                offset = 0  # the window's bytes from its start, as `send` takes them; the file's offset stays
                n = c_sendfile(fd, self.file_fd, &offset, left)
                if n == 0 or (n < 0 and (errno == EINVAL or errno == ENOSYS or errno == EOPNOTSUPP
                                         or errno == ESPIPE or errno == EOVERFLOW)):
                    # refused by the socket or the file, not the connection (0: the file ended short of the
                    # window - never, but a `continue` without progress must not spin here without the GIL)
                    self.file_ok[slot] = 0
                    continue
                if n > 0:
                    self.file_bytes += n
            else:
                n = c_send(fd, self.window, left, MSG_DONTWAIT | MSG_NOSIGNAL)
            if n < 0:
                if errno == EINTR:  # CPython retries the call (PEP 475)
                    continue
                if errno == EAGAIN:
                    return 0
                error[0] = errno
                return -1
            self.send_left[i] -= n
        self.send_at[self.send_slot[i]] = -1
        self.left_out -= 1
        return 1

    cdef int _pump_recv(self, int i, int flags, int *outcome, int *error) noexcept nogil:
        """`pump_recv`: read until the socket is empty (0), the message is in (1), or it fails (-1, `outcome`).
        With blocking `flags` (0) an EINTR stops the pump (0, `outcome` C_INTERRUPTED)."""
        cdef ssize_t n
        cdef Py_ssize_t left
        cdef int fd = self.recv_fd[self.recv_slot[i]]
        while self.recv_left[i] > 0:
            left = self.recv_left[i]
            n = c_recv(fd, self.window, left if left < self.window_bytes else self.window_bytes,
                       flags | MSG_TRUNC)
            if n > 0:
                self.recv_left[i] -= n
                continue
            if n == 0:
                outcome[0] = C_RECV_CLOSED
                return -1
            if errno == EINTR:
                if flags & MSG_DONTWAIT:  # CPython retries the call (PEP 475)
                    continue
                outcome[0] = C_INTERRUPTED
                return 0
            if errno == EAGAIN:
                return 0
            if errno == ECONNRESET:
                outcome[0] = C_RECV_CLOSED
                return -1
            outcome[0], error[0] = C_RECV_FAILED, errno
            return -1
        self.recv_at[self.recv_slot[i]] = -1
        self.left_in -= 1
        return 1

    cdef int _unwatch(self) noexcept nogil:
        """`_wait_loop`'s finally: the send sockets watched for write readiness back to WATCH_IN, in order; the
        errno of the first `epoll_ctl` that fails (where `select.epoll.modify` raises, leaving the rest watched),
        else 0."""
        cdef epoll_event ev
        cdef int k, n = self.n_watched
        if self.phase != P_WAIT:
            return 0
        self.n_watched = 0
        for k in range(n):
            ev.events = _WATCH_IN
            ev.data.u64 = 0
            ev.data.fd = self.watched[k]
            if epoll_ctl(self.epoll_fd, EPOLL_CTL_MOD, self.watched[k], &ev) < 0:
                return errno
        return 0

    cdef int _end_wait(self, int outcome, int *error) noexcept nogil:
        """The wait over with `outcome`, its watches undone - or C_WAIT_FAILED with the errno where undoing them
        fails (the reference's finally raises that OSError instead of what the step came to)."""
        cdef int err = self._unwatch()
        self.phase = P_OVER
        if err:
            error[0] = err
            return C_WAIT_FAILED
        return outcome

    cdef int _step(self, double timeout_s, int *index, int *error) noexcept nogil:
        cdef int i = 0, k, r, slot, got, ms, outcome = C_DONE
        cdef uint32_t ev_mask
        cdef int64_t remaining_ns
        cdef epoll_event ev
        if self.phase == P_PASS:
            for i in range(self.n_send):
                if self.send_left[i] > 0 and self._pump_send(i, error) < 0:
                    index[0] = i
                    self.phase = P_OVER
                    return C_SEND_FAILED
            for i in range(self.n_recv):
                if self.recv_left[i] > 0 and self._pump_recv(i, MSG_DONTWAIT, &outcome, error) < 0:
                    index[0] = i
                    self.phase = P_OVER
                    return outcome
            if self._done():
                self.phase = P_OVER
                return C_DONE
            if self.left_out == 0 and self.left_in == 1:
                self.phase = P_ONE
                self.deadline_ns = _monotonic_ns() + <int64_t> (timeout_s * 1e9)
            else:
                self.phase = P_WAIT
                for i in range(self.n_send):  # write readiness, only of the sends still blocked
                    if self.send_left[i] > 0:
                        ev.events = _WATCH_IN | EPOLLOUT
                        ev.data.u64 = 0
                        ev.data.fd = self.send_fd[self.send_slot[i]]
                        if epoll_ctl(self.epoll_fd, EPOLL_CTL_MOD, ev.data.fd, &ev) < 0:
                            error[0] = errno  # `select.epoll.modify` raises before `_wait_loop`'s try: the
                            self.phase = P_OVER  # sockets watched so far stay watched
                            return C_WAIT_FAILED
                        self.watched[self.n_watched] = ev.data.fd
                        self.n_watched += 1
                self.deadline_ns = _monotonic_ns() + <int64_t> (timeout_s * 1e9)
        if self.phase == P_ONE:
            for i in range(self.n_recv):
                if self.recv_left[i] > 0:
                    break
            index[0] = i
            while True:
                outcome = C_DONE
                r = self._pump_recv(i, 0, &outcome, error)
                if r > 0:
                    self.phase = P_OVER
                    return C_DONE
                if r < 0:
                    self.phase = P_OVER
                    return outcome
                if outcome == C_INTERRUPTED:
                    return C_INTERRUPTED
                if _monotonic_ns() >= self.deadline_ns:  # a slice ended without data
                    self.phase = P_OVER
                    return C_LATE_ONE
        # P_WAIT
        while True:
            remaining_ns = self.deadline_ns - _monotonic_ns()
            if remaining_ns <= 0:
                return self._end_wait(C_LATE, error)
            if remaining_ns < _LONGEST_WAIT_NS:
                ms = <int> ((remaining_ns + 999999) // 1000000)  # select.epoll.poll rounds its timeout up
            else:
                ms = <int> (_LONGEST_WAIT_NS // 1000000)
            got = epoll_wait(self.epoll_fd, self.events, self.max_events, ms)
            if got < 0:
                if errno == EINTR:
                    return C_INTERRUPTED
                error[0] = errno
                return self._end_wait(C_WAIT_FAILED, error)
            for k in range(got):
                ev_mask = self.events[k].events
                if self.events[k].data.fd >= self.fd_count or self.fd_slot[self.events[k].data.fd] < 0:
                    continue
                slot = self.fd_slot[self.events[k].data.fd]
                if ev_mask & _EVENT_IN:
                    i = self.recv_at[slot]
                    if i >= 0 and self._pump_recv(i, MSG_DONTWAIT, &outcome, error) < 0:
                        index[0] = i
                        return self._end_wait(outcome, error)
                if ev_mask & _EVENT_OUT:
                    i = self.send_at[slot]
                    if i >= 0 and self._pump_send(i, error) < 0:
                        index[0] = i
                        return self._end_wait(C_SEND_FAILED, error)
                if self._done():
                    return self._end_wait(C_DONE, error)


include "exchange_ops.pxi"
