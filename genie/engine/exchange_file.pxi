# The window's bytes in a memory file (included by exchange_loop.pyx): a bulk send over TCP hands the kernel the
# file's pages by sendfile instead of copying the window (the module doc). Here: the calls only that needs (the
# ones both compiled loops make are in socket_calls.pxi), the file, and an `ExchangeLoop`'s sockets made
# O_NONBLOCK for a run and given their flags back.

import signal

from libc.errno cimport EINVAL, ENOSYS, EOPNOTSUPP, ESPIPE, EOVERFLOW
from posix.types cimport off_t
from posix.unistd cimport close

cdef extern from "<sys/sendfile.h>" nogil:
    ssize_t c_sendfile "sendfile" (int out_fd, int in_fd, off_t *offset, size_t count)

cdef extern from "<signal.h>" nogil:
    ctypedef void (*_handler_t)(int)
    ctypedef struct _sigaction_t "struct sigaction":
        _handler_t sa_handler
    int c_sigaction "sigaction" (int signum, const _sigaction_t *act, _sigaction_t *old)
    _handler_t C_SIG_IGN "SIG_IGN"
    int C_SIGPIPE "SIGPIPE"

cdef extern from "<fcntl.h>" nogil:
    int c_fcntl "fcntl" (int fd, int cmd, ...)
    int F_GETFL, F_SETFL, O_NONBLOCK

# a send call of at least this many bytes to a `file_slots` socket goes out by sendfile from the window's file: one
# GSO packet (chosen, not measured; smaller calls, the small messages' steps among them, copy as before)
FILE_SEND_MIN_BYTES = 64 << 10
cdef Py_ssize_t _FILE_SEND_MIN_BYTES = FILE_SEND_MIN_BYTES


def _window_file(window):
    """A memory file holding the bytes of `window` (a buffer; its pages are what sendfile hands TCP), written from
    the window itself (no copy of it first); -1: none to be had."""
    try:
        fd = os.memfd_create("genie-window", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        return -1
    try:
        view = memoryview(window)
        while view:
            view = view[os.write(fd, view):]
    except BaseException as exc:  # the file is nobody's: closed, whatever ended the writing
        os.close(fd)
        if isinstance(exc, OSError):
            return -1
        raise
    return fd


cdef int _file_slots(ExchangeLoop loop, file_slots) except -1:
    """`loop`'s slots whose bulk sends may come from the file (`__cinit__`: every `file_ok` 0 before)."""
    slots = sorted({int(slot) for slot in file_slots})
    if any(not 0 <= slot < loop.slots for slot in slots):
        raise ValueError(f"file slots {slots}: {loop.slots} slots")
    # sendfile cannot pass MSG_NOSIGNAL: only where a broken pipe's SIGPIPE is ignored (Python ignores it)
    ignored = signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN
    for slot in slots:
        loop.file_ok[slot] = ignored
    return 0


cdef int _bulk_sends(ExchangeLoop loop) except -1:
    """The sends of at least FILE_SEND_MIN_BYTES in the step `loop.load` took, as a run begins: the file made if not
    yet (none to be had: every slot copies), their sockets made O_NONBLOCK until `_restore_flags`."""
    cdef int i, k, slot
    cdef _sigaction_t pipe_action
    # sendfile cannot pass MSG_NOSIGNAL: this run's bulk sends come from the file only while the kernel ignores
    # SIGPIPE for the process now (Python ignores it at start-up; a library may have set it back since)
    if c_sigaction(C_SIGPIPE, NULL, &pipe_action) != 0 or pipe_action.sa_handler != C_SIG_IGN:
        return 0
    for k in range(loop.n_tmpl_send):
        slot = loop.tmpl_send_slot[k]
        if loop.tmpl_send_size[k] < _FILE_SEND_MIN_BYTES or not loop.file_ok[slot]:
            continue
        if loop.file_fd < 0:
            loop.file_fd = _window_file(loop._window_ref)
            if loop.file_fd < 0:  # (never tried again: no slot's sends may come from a file now)
                for i in range(loop.slots):
                    loop.file_ok[i] = 0
                return 0
        _nonblocking(loop, slot)
    return 0


cdef void _nonblocking(ExchangeLoop loop, int slot) noexcept nogil:
    """Make `slot`'s send socket O_NONBLOCK for this run (sendfile's only non-blocking mode), keeping its flags to
    give back; a socket whose flags cannot be read or set (closed) keeps `send`."""
    cdef int fd = loop.send_fd[slot], flags
    if not loop.file_ok[slot] or loop.file_flags[slot] >= 0:
        return
    flags = c_fcntl(fd, F_GETFL)
    if flags < 0 or (not flags & O_NONBLOCK and c_fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0):
        return
    loop.file_flags[slot] = flags


cdef void _restore_flags(ExchangeLoop loop) noexcept nogil:
    """The send sockets' flags as before the run (`run`, `run_ops`: however it ends, a signal handler's exception
    through `_interrupted` included)."""
    cdef int slot
    for slot in range(loop.slots):
        if loop.file_flags[slot] >= 0:
            if not loop.file_flags[slot] & O_NONBLOCK:
                c_fcntl(loop.send_fd[slot], F_SETFL, loop.file_flags[slot])
            loop.file_flags[slot] = -1
