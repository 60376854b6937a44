# The C library calls the compiled step and exchange loops make (included by step_loop.pyx and exchange_loop.pyx:
# declared once, each extension compiles its own copy). The reference is genie/engine/flows.py and transport.py.

from libc.errno cimport errno, EAGAIN, EINTR, ECONNRESET  # EWOULDBLOCK is EAGAIN on Linux
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, free
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

cdef extern from "<sys/socket.h>" nogil:
    ssize_t c_send "send" (int fd, const void *buf, size_t n, int flags)
    ssize_t c_recv "recv" (int fd, void *buf, size_t n, int flags)
    int c_setsockopt "setsockopt" (int fd, int level, int name, const void *value, unsigned int size)
    int MSG_DONTWAIT
    int MSG_NOSIGNAL
    int MSG_TRUNC


cdef inline int64_t _monotonic_ns() noexcept nogil:  # time.monotonic_ns()
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <int64_t> ts.tv_sec * 1000000000 + ts.tv_nsec
