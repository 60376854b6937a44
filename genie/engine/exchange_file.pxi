# The window's bytes in a memory file (included by exchange_loop.pyx): what a bulk send over TCP hands the kernel by
# sendfile instead of copying the window (`ExchangeLoop._bulk_send`).


def _window_file(bytes data, bint wanted):
    """A memory file holding `data` (its pages are what sendfile hands TCP); -1: not wanted, or none to be had."""
    if not wanted:
        return -1
    try:
        fd = os.memfd_create("genie-window", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        return -1
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        os.close(fd)
        return -1
    return fd
