# The emulator's wake-up planner and loop, compiled (included by line_core.pyx). The reference is
# genie.linkemu.emulator's WakePlanner and Emulator._loop; tests/test_linkemu_compiled.py drives both planners with
# the same observations.

from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC, CLOCK_REALTIME

cdef extern from "<sys/select.h>" nogil:
    ctypedef struct fd_set:
        pass
    struct timeval:
        long tv_sec
        long tv_usec
    void FD_ZERO(fd_set *)
    void FD_SET(int, fd_set *)
    int FD_ISSET(int, fd_set *)
    int c_select "select" (int, fd_set *, fd_set *, fd_set *, timeval *)

cdef extern from "<unistd.h>" nogil:
    ssize_t c_read "read" (int, void *, size_t)

# the reference's constants (genie/linkemu/emulator.py)
cdef enum:
    MIN_MARGIN_NS = 2000
    MAX_MARGIN_NS = 500000
    LAG_WINDOW = 63
    LAG_RECOMPUTE_EVERY = 8
    MAX_WAKE_LAG_SAMPLE_NS = 2000000
    IDLE_WAKE_NS = 250000000
    LATE_SAMPLES = 4096
    MIN_SLEEP_US = 1
# how `CompiledLine.run` returned
cdef enum:
    C_UNTIL = 0  # the time given (the next statistics) has come
    C_SIGNALLED = 1  # a signal's wake-up byte: Python runs the handlers
cdef double MARGIN_GAIN = 0.125
UNTIL, SIGNALLED = C_UNTIL, C_SIGNALLED
#: the constants above and in nfqueue_messages.pxi, for tests/test_linkemu_compiled.py to hold them to the
#: reference's (genie.linkemu.emulator, nfqueue)
CONSTANTS = {"MIN_MARGIN_NS": MIN_MARGIN_NS, "MAX_MARGIN_NS": MAX_MARGIN_NS, "LAG_WINDOW": LAG_WINDOW,
             "LAG_RECOMPUTE_EVERY": LAG_RECOMPUTE_EVERY, "MAX_WAKE_LAG_SAMPLE_NS": MAX_WAKE_LAG_SAMPLE_NS,
             "IDLE_WAKE_NS": IDLE_WAKE_NS, "LATE_SAMPLES": LATE_SAMPLES, "MARGIN_GAIN": MARGIN_GAIN,
             "MAX_VERDICTS_PER_SEND": MAX_VERDICTS_PER_SEND}


cdef inline int64_t _clock_ns(int clock) noexcept nogil:  # time.monotonic_ns() / time.time_ns()
    cdef timespec ts
    clock_gettime(clock, &ts)
    return <int64_t> ts.tv_sec * 1000000000 + ts.tv_nsec


cdef class CompiledPlanner:
    """The reference's `WakePlanner` (the same rules, attributes and methods) with its state in C, for
    `CompiledLine.run`."""

    cdef public int64_t margin_ns
    cdef public bint compensate
    cdef public int64_t max_compensation_ns
    cdef int64_t lag_ns
    cdef int64_t lags[LAG_WINDOW]
    cdef int64_t lag_count  # observations kept so far (all of them: the window is the last 63)
    cdef int64_t seen

    def __init__(self, int64_t margin_ns, *, bint compensate, int64_t max_compensation_ns):  # (no defaults of its own)
        self.margin_ns = margin_ns
        self.compensate = compensate
        self.max_compensation_ns = max_compensation_ns

    @property
    def compensation_ns(self):
        return self.compensation()

    cdef inline int64_t compensation(self) noexcept:
        if not self.compensate:
            return 0
        return self.lag_ns if self.lag_ns < self.max_compensation_ns else self.max_compensation_ns

    cpdef int64_t target_ns(self, int64_t due_ns):
        return due_ns - self.compensation()

    def timeout_s(self, int64_t now_ns, int64_t due_ns):
        cdef int64_t gap = self.target_ns(due_ns) - self.margin_ns - now_ns
        return gap / 1e9 if gap > 0 else 0.0

    def should_sleep(self, int64_t now_ns, due_ns):
        return self.sleeps(now_ns, due_ns is not None, 0 if due_ns is None else due_ns)

    def select_timeout_us(self, int64_t now_ns, due_ns):
        """What `CompiledLine.run` gives select() (us): the reference's `max(timeout, MIN_SLEEP_S)` rounded up as
        Python's select rounds it."""
        return self.sleep_us(now_ns, due_ns is not None, 0 if due_ns is None else due_ns)

    cdef bint sleeps(self, int64_t now_ns, bint has_due, int64_t due_ns) except -1:
        """The reference's `should_sleep`: the one rule of the loop and of `should_sleep`."""
        return not has_due or self.target_ns(due_ns) - now_ns > self.margin_ns // 2

    cdef int64_t sleep_us(self, int64_t now_ns, bint has_due, int64_t due_ns) except -1:
        """select()'s timeout: the idle period, else until the margin before the target; at least 1 us."""
        cdef int64_t gap = IDLE_WAKE_NS if not has_due else self.target_ns(due_ns) - self.margin_ns - now_ns
        cdef int64_t us = (gap + 999) // 1000 if gap > 0 else 0  # rounded up, as Python's select
        return us if us > MIN_SLEEP_US else MIN_SLEEP_US

    cpdef int64_t horizon_ns(self, int64_t now_ns):
        return now_ns + self.compensation() + self.margin_ns // 2

    cpdef void observe_late(self, int64_t late_ns):
        cdef double estimate = self.margin_ns + MARGIN_GAIN * late_ns
        if estimate < MIN_MARGIN_NS:
            estimate = MIN_MARGIN_NS
        if estimate > MAX_MARGIN_NS:
            estimate = MAX_MARGIN_NS
        self.margin_ns = <int64_t> estimate

    cpdef void observe_wake_lag(self, int64_t lag_ns):
        cdef int64_t ordered[LAG_WINDOW]
        cdef int count, i, j
        cdef int64_t value
        if not 0 <= lag_ns <= MAX_WAKE_LAG_SAMPLE_NS:
            return
        self.lags[self.lag_count % LAG_WINDOW] = lag_ns
        self.lag_count += 1
        self.seen += 1
        if self.seen % LAG_RECOMPUTE_EVERY == 1:  # a running median of the window, as the reference sorts it
            count = <int> (self.lag_count if self.lag_count < LAG_WINDOW else LAG_WINDOW)
            for i in range(count):
                value = self.lags[i]
                j = i
                while j > 0 and ordered[j - 1] > value:
                    ordered[j] = ordered[j - 1]
                    j -= 1
                ordered[j] = value
            self.lag_ns = ordered[count // 2]
