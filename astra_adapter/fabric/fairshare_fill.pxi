# Included by fairshare_core.pyx (one extension): progressive filling's rounds, scanning every entry (session 21's)
# or walked by resource (the default).
#
# _rounds_scanning (the numpy code's way, operation for operation) spends every round on every live incidence
# entry: it zeroes and re-sums every resource's load, lists the loaded resources, adds the round's increment to
# every moving flow, then scans the entries again for the flows crossing a saturated resource and compacts them.
# In a large component (late in an MoE play a data-parallel ring joins the expert groups into one of thousands of
# routes, refilled at every flow end) that is rounds x entries. _rounds_by_resource does the same arithmetic on
# the same values with less walking, so every rate is the same float:
#   - a resource's load is summed over its live entries in ascending entry order, starting from 0 - the scan's
#     sum, term for term - but only when it lost an entry (the others' sums would come out the same);
#   - the round's increment is the least residual / load over the loaded resources (a minimum is exact), each
#     loaded resource's residual then takes the same subtraction and threshold;
#   - a flow's rate is the sum of the increments of the rounds it moved in, added in order from 0: every moving
#     flow holds the same partial sum, so it is kept once (`level`) and written to a flow when it freezes;
#   - the flows frozen are those with an entry on a resource that saturated this round (found through that
#     resource's entries, not a scan of all).
# Each round then costs the loaded resources plus the entries of the flows that froze.


cdef void _rounds_scanning(_Scratch* s, Py_ssize_t m, Py_ssize_t entries, double* out) noexcept:
    """Progressive filling's rounds on the prepared incidence (every flow moving), each round summing every
    resource's load over all live entries and dropping the frozen flows' entries after it (as
    fairshare.max_min_rates_compacting)."""
    cdef Py_ssize_t i, j, u, m2, live, num_used, still
    cdef int64_t q
    cdef double delta, quotient, left
    cdef Py_ssize_t* flow_of = s.flow_of
    cdef int64_t* res_of = s.res_of
    cdef double* weight = s.weight
    cdef double* cap = s.cap
    cdef double* residual = s.residual
    cdef double* load = s.load
    cdef char* saturated = s.saturated
    cdef Py_ssize_t* used = s.used
    cdef char* moving = s.moving
    live = entries
    still = m
    while still > 0:
        for j in range(live):
            load[res_of[j]] = 0
        for j in range(live):
            load[res_of[j]] += weight[j]
        num_used = 0
        for j in range(live):
            q = res_of[j]
            if load[q] > 0 and not saturated[q]:  # `saturated` marks the resources listed this round
                saturated[q] = 1
                used[num_used] = q
                num_used += 1
        if num_used == 0:
            for i in range(m):
                if moving[i]:
                    out[i] = INFINITY  # crosses nothing loaded: unbounded
            break
        delta = residual[used[0]] / load[used[0]]
        for u in range(1, num_used):
            quotient = residual[used[u]] / load[used[u]]
            if quotient < delta:
                delta = quotient
        for i in range(m):
            if moving[i]:
                out[i] += delta
        for u in range(num_used):
            q = used[u]
            left = residual[q] - delta * load[q]
            if left <= _REL_EPS * cap[q]:
                left = 0
                saturated[q] = 2
            else:
                saturated[q] = 0
            residual[q] = left
        for j in range(live):  # the flows crossing a saturated resource
            if saturated[res_of[j]] == 2 and moving[flow_of[j]]:
                moving[flow_of[j]] = 0
                still -= 1
        m2 = 0
        for j in range(live):
            if moving[flow_of[j]]:
                flow_of[m2] = flow_of[j]
                res_of[m2] = res_of[j]
                weight[m2] = weight[j]
                m2 += 1
        live = m2
        for u in range(num_used):
            saturated[used[u]] = 0


cdef void _rounds_by_resource(_Scratch* s, Py_ssize_t m, Py_ssize_t entries, double* out) noexcept:
    """Progressive filling's rounds on the prepared incidence (every flow moving), walked by resource: the
    floats of _rounds_scanning (see the comment above)."""
    cdef Py_ssize_t i, j, k, e, u, n, num_res = 0, num_used, num_touched, still = m
    cdef int64_t q, q2
    cdef double delta, quotient, left, total, level = 0
    cdef Py_ssize_t* flow_of = s.flow_of
    cdef int64_t* res_of = s.res_of
    cdef double* weight = s.weight
    cdef double* cap = s.cap
    cdef double* residual = s.residual
    cdef double* load = s.load
    cdef Py_ssize_t* used = s.used
    cdef char* moving = s.moving
    cdef Py_ssize_t* entry_at = s.entry_at
    cdef Py_ssize_t* first_at = s.first_at
    cdef Py_ssize_t* end_at = s.end_at
    cdef Py_ssize_t* degree = s.degree
    cdef char* touched = s.touched
    cdef Py_ssize_t* touched_list = s.touched_list
    cdef Py_ssize_t* route_first = s.route_first
    # per resource, its entries ascending (a counting sort; `used` lists the resources met, in entry order)
    for j in range(entries):
        q = res_of[j]
        if degree[q] == 0:
            used[num_res] = q
            num_res += 1
        degree[q] += 1
    k = 0
    for u in range(num_res):
        q = used[u]
        first_at[q] = k
        end_at[q] = k
        k += degree[q]
        degree[q] = 0
    for j in range(entries):
        q = res_of[j]
        entry_at[end_at[q]] = j
        end_at[q] += 1
    # the first round's loads: every entry live
    num_used = 0
    for u in range(num_res):
        q = used[u]
        total = 0
        for k in range(first_at[q], end_at[q]):
            total += weight[entry_at[k]]
        load[q] = total
        if total > 0:
            used[num_used] = q
            num_used += 1
    while still > 0:
        if num_used == 0:
            for i in range(m):
                if moving[i]:
                    out[i] = INFINITY  # crosses nothing loaded: unbounded
            break
        delta = residual[used[0]] / load[used[0]]
        for u in range(1, num_used):
            quotient = residual[used[u]] / load[used[u]]
            if quotient < delta:
                delta = quotient
        level = level + delta  # every moving flow's rate so far
        num_touched = 0
        for u in range(num_used):
            q = used[u]
            left = residual[q] - delta * load[q]
            if left <= _REL_EPS * cap[q]:
                left = 0
                for k in range(first_at[q], end_at[q]):  # its flows freeze; their resources lose entries
                    i = flow_of[entry_at[k]]
                    if moving[i]:
                        moving[i] = 0
                        out[i] = level
                        still -= 1
                        for e in range(route_first[i], route_first[i + 1]):
                            q2 = res_of[e]
                            if not touched[q2]:
                                touched[q2] = 1
                                touched_list[num_touched] = q2
                                num_touched += 1
            residual[q] = left
        for u in range(num_touched):  # their loads over their live entries, ascending (the others dropped)
            q = touched_list[u]
            touched[q] = 0
            total = 0
            n = first_at[q]
            for k in range(first_at[q], end_at[q]):
                j = entry_at[k]
                if moving[flow_of[j]]:
                    total += weight[j]
                    entry_at[n] = j
                    n += 1
            end_at[q] = n
            load[q] = total
        n = 0
        for u in range(num_used):  # the resources still loaded
            q = used[u]
            if load[q] > 0:
                used[n] = q
                n += 1
        num_used = n


cdef void _sort_ids(int64_t* ids, Py_ssize_t m, int64_t* tmp) noexcept:
    """``ids`` (distinct route ids, >= 0) ascending - the order qsort with _ascending leaves them in, without a
    comparison call per step: an insertion sort when few, else a radix sort by bytes (``tmp``: room for ``m``)."""
    cdef Py_ssize_t i, j, at
    cdef int64_t x, top = 0
    cdef Py_ssize_t counts[256]
    cdef int shift = 0
    cdef int64_t* src = ids
    cdef int64_t* dst = tmp
    cdef int64_t* swap
    if m < 32:
        for i in range(1, m):
            x = ids[i]
            j = i
            while j > 0 and ids[j - 1] > x:
                ids[j] = ids[j - 1]
                j -= 1
            ids[j] = x
        return
    for i in range(m):
        if ids[i] > top:
            top = ids[i]
    while (top >> shift) > 0:
        memset(counts, 0, sizeof(counts))
        for i in range(m):
            counts[(src[i] >> shift) & 255] += 1
        at = 0
        for j in range(256):
            i = counts[j]
            counts[j] = at
            at += i
        for i in range(m):
            j = (src[i] >> shift) & 255
            dst[counts[j]] = src[i]
            counts[j] += 1
        swap = src
        src = dst
        dst = swap
        shift += 8
    if src != ids:
        memcpy(ids, src, m * sizeof(int64_t))
