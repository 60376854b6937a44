# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A ring's per-event work under ring chains, compiled: :meth:`astra_adapter.fabric.chains.RingOp.move` and
:meth:`~astra_adapter.fabric.chains.RingOp.horizon_ns` on its per-connection arrays in one call each.

Operation for operation the numpy methods': the same subtractions (``wait - dt``, ``left - rate * dt``; built
with ``-ffp-contract=off`` so no product and difference fuse), the same comparisons against the same
thresholds, the minimum over the same quotients (a minimum is exact in any order). What it saves is a dozen
small numpy calls per ring in flight per event (``tests/test_fabric_chain_engine.py`` compares whole plays with
the reference engine's span for span).
"""

from libc.math cimport INFINITY
from libc.stdint cimport int64_t

cdef double _THROUGH = 1e-6  # chains.RingOp: a wait at most this is over


def ring_move(int64_t[::1] chunk, double[::1] left, double[::1] wait, unsigned char[::1] ready,
              unsigned char[::1] active, const unsigned char[::1] next_ready, double[::1] next_wait,
              rate, double dt_ns, double done_bytes, int64_t last, const double[::1] send_buffer):
    """:meth:`RingOp.move`'s arithmetic in place (``rate``: None or the connections' rates): returns (whether
    some connection finished a chunk, the count of moving connections after, whether a connection on its
    ``last`` chunk got within its ``send_buffer`` - its sender's last send is written then). ``active`` is
    refreshed."""
    cdef Py_ssize_t i, n = chunk.shape[0]
    cdef double[::1] r
    cdef bint moved = rate is not None
    cdef bint went = False, written = False
    cdef Py_ssize_t count = 0
    cdef double x
    if moved:
        r = rate
    for i in range(n):
        if ready[i] and not active[i]:  # in its latency or wait
            x = wait[i] - dt_ns
            wait[i] = x if x > 0.0 else 0.0
        if next_ready[i]:
            x = next_wait[i] - dt_ns
            next_wait[i] = x if x > 0.0 else 0.0
        if moved and active[i]:
            x = left[i]
            left[i] = x - r[i] * dt_ns
            if chunk[i] == last and x > send_buffer[i] and not left[i] > send_buffer[i]:
                written = True
        if ready[i] and wait[i] <= _THROUGH and left[i] <= done_bytes:
            chunk[i] += 1
            ready[i] = 0
            left[i] = 0.0
            went = True
        active[i] = ready[i] and wait[i] <= _THROUGH and left[i] > done_bytes
        count += active[i]
    return went, count, written


def ring_horizon(const unsigned char[::1] ready, const unsigned char[::1] active, const double[::1] wait,
                 const double[::1] left, rate, const int64_t[::1] chunk, int64_t last,
                 const double[::1] send_buffer):
    """:meth:`RingOp.horizon_ns`: the least of the idle connections' waits (0.0 if one has none left), each
    moving connection's ``left / rate``, and for one on its ``last`` chunk still above its send buffer
    ``(left - send_buffer) / rate``; inf where nothing is pending."""
    cdef Py_ssize_t i, n = ready.shape[0]
    cdef double best = INFINITY, q
    cdef double[::1] r
    cdef bint moved = rate is not None
    if moved:
        r = rate
    for i in range(n):
        if ready[i] and not active[i]:
            if not wait[i] > 0:
                return 0.0  # a chunk of nothing: through now
            if wait[i] < best:
                best = wait[i]
    if not moved:
        return best
    for i in range(n):
        if active[i]:
            q = left[i] / r[i]
            if q < best:
                best = q
            if chunk[i] == last and left[i] > send_buffer[i]:
                q = (left[i] - send_buffer[i]) / r[i]
                if q < best:
                    best = q
    return best
