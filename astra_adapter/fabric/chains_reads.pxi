# Included by chains_core.pyx (one extension: its compile flags and imports): a queue read's work under ring
# chains (ChainFlowEngine._read_queues and _connection_waits) - the load and its saturated resources, the queues,
# the flows per resource and a ring's connection waits, each the numpy reference's terms added in the same order -
# and a lock-step op's move.


def lock_step_move(const double[::1] left, const double[::1] rate, const unsigned char[::1] active, double dt_ns,
                   double done_below):
    """A lock-step op's flows ``dt_ns`` on at ``rate`` (``FlowEngine._advance_lock_step``): new arrays - ``left -
    rate x dt_ns`` (every flow: the same product and difference), its moving flags ``active & (left > done_below)``
    (bool) - and the count moving."""
    cdef Py_ssize_t i, n = left.shape[0], count = 0
    left_out = np.empty(n)
    active_out = np.empty(n, dtype=bool)
    cdef double[::1] moved = left_out
    cdef unsigned char[::1] on = active_out.view(np.uint8)
    for i in range(n):
        moved[i] = left[i] - rate[i] * dt_ns
        on[i] = active[i] and moved[i] > done_below
        count += on[i]
    return left_out, active_out, count


cdef class StepEntries:
    """A step's entries (:meth:`astra_adapter.fabric.queues.StandingQueues.entries`: per entry its resource,
    weight and flow index) held as typed views once: the per-read calls below take a buffer of the rates alone."""

    cdef const int64_t[::1] res
    cdef const double[::1] w
    cdef const int64_t[::1] flow

    def __init__(self, const int64_t[::1] res, const double[::1] w, const int64_t[::1] flow):
        self.res, self.w, self.flow = res, w, flow


def moving_load(list rated, Py_ssize_t num_resources, double flow_contention, const double[::1] capacity,
                const double[::1] limit, double full_fraction, unsigned char[::1] full):
    """:meth:`astra_adapter.fabric.queues.StandingQueues.load` (``load_on``) from per step moving ``(entries,
    rates)`` (:class:`StepEntries`): per resource the sum of ``weight x rate`` in the entries' order (as
    ``np.bincount``), times the contention factor of its moving flows (``queues.contended_load``); and into
    ``full`` :meth:`~astra_adapter.fabric.queues.StandingQueues.saturated`'s flags: ``load >= full_fraction x
    capacity`` where ``limit > 0``."""
    moved_out = np.zeros(num_resources)
    cdef double[::1] moved = moved_out
    cdef double[::1] flows_on
    cdef StepEntries entries
    cdef const double[::1] rate
    cdef Py_ssize_t e, q
    cdef double x, r
    cdef bint contended = flow_contention > 0
    if contended:
        flows_out = np.zeros(num_resources)
        flows_on = flows_out
    for entries, rate in rated:
        for e in range(entries.res.shape[0]):
            r = rate[entries.flow[e]]
            moved[entries.res[e]] += entries.w[e] * r
            if contended:
                flows_on[entries.res[e]] += entries.w[e] * (1.0 if r > 0 else 0.0)
    if contended:
        for q in range(num_resources):
            x = flows_on[q] - 1.0
            moved[q] = moved[q] * (1.0 + flow_contention * (x if x > 0.0 else 0.0))
    for q in range(num_resources):
        full[q] = moved[q] >= full_fraction * capacity[q] and limit[q] > 0
    return moved_out


cdef class MovingEntries:
    """A step's moving entries (:meth:`astra_adapter.fabric.queues.StandingQueues.moving_entries`: hop, resource,
    weight, flow index ascending, own link) and its flows' windows, held as typed views once (:func:`queued_of`
    then takes a buffer of the moving flags and bytes left alone)."""

    cdef const int64_t[::1] hop
    cdef const int64_t[::1] res
    cdef const double[::1] w
    cdef const int64_t[::1] flow
    cdef const unsigned char[::1] own
    cdef const double[::1] window

    def __init__(self, const int64_t[::1] hop, const int64_t[::1] res, const double[::1] w,
                 const int64_t[::1] flow, const unsigned char[::1] own, const double[::1] window):
        self.hop, self.res, self.w, self.flow, self.own, self.window = hop, res, w, flow, own, window


def queued_of(list in_flight, const unsigned char[::1] full, const double[::1] sender_limit,
              const double[::1] limit):
    """:meth:`astra_adapter.fabric.queues.StandingQueues.queued_bytes` on the resources ``full`` marks saturated:
    per in-flight step its :class:`MovingEntries` and per flow its moving flag and bytes left. Each flow queues what
    it keeps (its bytes left up to its window; on its sender's own link up to ``sender_limit``) at its first
    saturated resource along its path (the least hop, the first such entry on a tie), added in the flows' order as
    ``np.add.at``; each queue at most ``limit``."""
    cdef Py_ssize_t num_resources = full.shape[0]
    out = np.zeros(num_resources)
    cdef double[::1] queued = out
    cdef MovingEntries entries
    cdef const int64_t[::1] hop
    cdef const int64_t[::1] res
    cdef const double[::1] w
    cdef const int64_t[::1] flow
    cdef const unsigned char[::1] own
    cdef const unsigned char[::1] active
    cdef const double[::1] left
    cdef const double[::1] window
    cdef Py_ssize_t e, best, m, q
    cdef int64_t f
    cdef double keep
    for entries, active, left in in_flight:
        hop, res, w, flow, own, window = entries.hop, entries.res, entries.w, entries.flow, entries.own, \
            entries.window
        m = res.shape[0]
        e = 0
        while e < m:
            f = flow[e]
            best = -1
            while e < m and flow[e] == f:
                if full[res[e]] and (best < 0 or hop[e] < hop[best]):
                    best = e
                e += 1
            if best < 0:
                continue
            keep = left[f] if active[f] else 0.0
            if window[f] < keep:
                keep = window[f]
            if own[best] and sender_limit[res[best]] < keep:
                keep = sender_limit[res[best]]
            queued[res[best]] += w[best] * keep
    for q in range(num_resources):
        if limit[q] < queued[q]:
            queued[q] = limit[q]
    return out


def flows_on_of(list rated, Py_ssize_t num_resources):
    """:meth:`astra_adapter.fabric.queues.StandingQueues.flows_on` from per step ``(entries, rates)``
    (:class:`StepEntries`): per step and resource the sum of ``weight x (rate > 0)`` in the entries' order
    (``np.bincount``: from 0.0), then those sums added to the total step by step in the order given. A resource
    none of a step's entries names adds that step's 0.0 there, which changes no sum (the total starts at +0.0):
    only the named ones are added."""
    total_out = np.zeros(num_resources)
    cdef double[::1] total = total_out
    cdef double[::1] step_sum = np.zeros(num_resources)
    cdef unsigned char[::1] named = np.zeros(num_resources, dtype=np.uint8)
    cdef int64_t[::1] order = np.empty(num_resources, dtype=np.int64)
    cdef StepEntries entries
    cdef const double[::1] rate
    cdef Py_ssize_t e, i, m
    cdef int64_t q
    for entries, rate in rated:
        m = 0
        for e in range(entries.res.shape[0]):
            q = entries.res[e]
            if not named[q]:
                named[q] = 1
                order[m] = q
                m += 1
            step_sum[q] += entries.w[e] * (1.0 if rate[entries.flow[e]] > 0 else 0.0)
        for i in range(m):
            q = order[i]
            total[q] += step_sum[q]
            step_sum[q] = 0.0
            named[q] = 0
    return total_out


cdef double _pairwise_sum(const double* a, Py_ssize_t n) noexcept:
    """numpy's sum of ``n`` contiguous doubles (``pairwise_sum_DOUBLE``): in order from 0.0 below 8 terms, eight
    running sums up to 128, halves (at a multiple of 8) above; the reduction adds it to its identity 0.0."""
    cdef Py_ssize_t i, j, n2
    cdef double res
    cdef double r[8]
    if n < 8:
        res = 0.0
        for i in range(n):
            res += a[i]
        return res
    if n <= 128:
        for j in range(8):
            r[j] = a[j]
        i = 8
        while i < n - (n % 8):
            for j in range(8):
                r[j] += a[i + j]
            i += 8
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        while i < n:
            res += a[i]
            i += 1
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise_sum(a, n2) + _pairwise_sum(a + n2, n - n2)


def sum_like_numpy(const double[::1] a):
    """``float(np.sum(a))`` (:func:`_pairwise_sum` from 0.0): the tests compare the two."""
    return 0.0 + _pairwise_sum(&a[0], a.shape[0]) if a.shape[0] else 0.0


def ring_waits(const int64_t[::1] routes, const unsigned char[::1] needed, const int64_t[::1] ptr,
               const int64_t[::1] res, const double[::1] w, const double[::1] queued, const double[::1] capacity,
               flows_on, const double[::1] chunk, double[::1] waits):
    """``ChainFlowEngine._connection_waits``' loop over a ring's connections ``needed`` (their ``routes``; each
    route's resources and weights the CSR rows ``ptr``/``res``/``w``). With ``flows_on`` None: whether some needed
    connection's path has a queue (``queued`` not 0 on one of its resources), nothing written. Else into ``waits``,
    for each needed connection with a queue on its path, :func:`astra_adapter.fabric.queues.fifo_wait_ns` of its
    row: per resource ``w x max(queued - flows_on x chunk, 0) / capacity`` (numpy's maximum: the first operand
    where it is not less, or nan), summed as ``np.sum``; the others are left as they are (0.0)."""
    cdef Py_ssize_t k, e, a, b, i, n = routes.shape[0], longest = 0
    cdef int64_t r
    cdef bint found
    cdef double x, b_k
    cdef const double[::1] n_on
    for k in range(n):  # the longest row: the terms' scratch
        if needed[k]:
            r = routes[k]
            if ptr[r + 1] - ptr[r] > longest:
                longest = ptr[r + 1] - ptr[r]
    if flows_on is None:
        for k in range(n):
            if needed[k]:
                r = routes[k]
                for e in range(ptr[r], ptr[r + 1]):
                    if queued[res[e]] != 0:
                        return True
        return False
    n_on = flows_on
    terms_out = np.empty(max(longest, 1))
    cdef double[::1] terms = terms_out
    for k in range(n):
        if not needed[k]:
            continue
        r = routes[k]
        a = ptr[r]
        b = ptr[r + 1]
        found = False
        for e in range(a, b):
            if queued[res[e]] != 0:
                found = True
                break
        if not found:
            continue
        b_k = chunk[k]
        for e in range(a, b):
            i = res[e]
            x = queued[i] - n_on[i] * b_k
            if not (x >= 0.0 or x != x):
                x = 0.0
            terms[e - a] = w[e] * x / capacity[i]
        waits[k] = 0.0 + _pairwise_sum(&terms[0], b - a)
    return True
