# The emulator's loop, compiled (included by line_core.pyx after `CompiledLine`): the reference is
# genie.linkemu.emulator's `Emulator._loop` with `_cycle_python`, step by step.


cdef int _run(CompiledLine self, int fd, int wake_fd, CompiledPlanner planner, int64_t until_ns) except -1:
    cdef int64_t now, due, head, late, timeout_us, now_mono
    cdef bint has_due, slept, timer_wake, signalled, queue_readable
    cdef int released, ready, top
    cdef fd_set readable
    cdef timeval tv
    cdef char drain[64]
    while True:
        now = _clock_ns(CLOCK_MONOTONIC)
        has_due = self.heap_size > 0
        due = self.heap[0].release_ns if has_due else 0
        slept = timer_wake = signalled = False
        self.cycles += 1
        if planner.sleeps(now, has_due, due):
            timeout_us = planner.sleep_us(now, has_due, due)
            tv.tv_sec = timeout_us // 1000000
            tv.tv_usec = timeout_us % 1000000
            FD_ZERO(&readable)
            FD_SET(fd, &readable)
            top = fd
            if wake_fd >= 0:
                FD_SET(wake_fd, &readable)
                top = wake_fd if wake_fd > fd else fd
            ready = c_select(top + 1, &readable, NULL, NULL, &tv)
            if ready < 0:
                if errno == EINTR:
                    return C_SIGNALLED
                raise OSError(errno, "select")
            queue_readable = ready > 0 and FD_ISSET(fd, &readable)
            signalled = wake_fd >= 0 and ready > 0 and FD_ISSET(wake_fd, &readable)
            if signalled:
                c_read(wake_fd, drain, 64)
            slept = True
            timer_wake = not queue_readable and has_due and not signalled
        elif wake_fd >= 0 and c_read(wake_fd, drain, 64) > 0:  # (non-blocking) a release due at once every cycle
            signalled = True  # must not hold a signal until the statistics: the reference sees it every cycle
        now_mono = _clock_ns(CLOCK_MONOTONIC)
        self._read_admit(fd, now_mono, _clock_ns(CLOCK_REALTIME) - now_mono, 256)
        if slept and self.first_lag_ns >= 0:
            planner.observe_wake_lag(self.first_lag_ns)
        now = _clock_ns(CLOCK_MONOTONIC)
        has_due = self.heap_size > 0
        head = self.heap[0].release_ns if has_due else 0
        released = self._release(fd, planner.horizon_ns(now))
        if released and has_due:
            late = now - planner.target_ns(head)
            self.lates[self.late_count % LATE_SAMPLES] = late
            self.late_count += 1
            if late > self.late_ns_max:
                self.late_ns_max = late
            if timer_wake:
                planner.observe_late(late)
        if signalled:
            return C_SIGNALLED
        if now >= until_ns:
            return C_UNTIL
