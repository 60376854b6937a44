# Included by fairshare_core.pyx (one extension: it reads LiveRates's C state directly): the max-min fill by levels
# (LiveRates(levels=True), issue #36 item 6), compiled - fairshare.max_min_levels, operation for operation.
#
# Every float of the fill by levels is a function of one resource's own sets: ``L_q`` (the weight times the flows
# of its routes still growing, summed from 0 in ascending route order), ``F_q`` (its frozen routes' load, added as
# they freeze) and the key of the event that last touched it; an event freezes the routes of the resource with the
# least key ``(level, resource)`` at that level, in ascending route order, each adding its load to its resources in
# path order. Events come in ascending key order (a key is kept above the last event that touched its resource).
#
# So when flows end (only decrements since the last solve) the fill need not start again: let k* be the least key
# of the routes whose count fell. Every event before k* sees the same sets as before - a count that falls only
# lowers a nonnegative term of ``L_q`` and of the contention's load on the fallen routes' resources, and IEEE
# rounding is monotone, so their keys can only rise and none of them comes before k* - and the routes frozen at or
# after k* that share no resource with the region R below do not interact with it. R: the routes still moving,
# frozen at or after k*, reachable from the fallen routes' resources through resources and such routes (the
# bottleneck-precedence descendants of Ros-Giralt et al., SIGMETRICS 2020). The refill restores R's resources'
# ``F`` and last key from a per-resource log of the events that touched them (the last entry before k*), and runs
# the events over R alone: every rate and log entry is the float a fill from scratch gives
# (tests/test_fabric_levels.py checks it against fairshare.max_min_levels). When flows start too, the floor is
# lower: where the new counts' fill first departs from the old one (fairshare_levels_add.pxi); the region above it is
# refilled the same way (LiveRates.add_fill; off, such solves fill their components from scratch). New capacities
# fill the components they touch from scratch (a component's events do not interact with another's).
#
# Cost: a removal refills R (at 512 ranks, draw 1, ~4 % of the entries of the component today's fill redoes); an
# addition's region holds ~40 % of the routes of the components it joins (benchmarks/README.md).


cdef struct _LogEntry:  # an event that touched a resource: its key, and the resource's frozen load after it
    double level
    int64_t at
    double frozen


cdef struct _ListEntry:  # a resource's listed route and its fraction there (to sort a list)
    int64_t route
    double w


cdef struct _Levels:
    # per resource
    double* frozen  # F_q: the load of its routes frozen so far
    double* last_level  # the key of the event that last touched it (level, resource; -1: none)
    int64_t* last_at
    double* level  # its key's level (while on the heap)
    double* cap  # its capacity, contention-scaled, for the run
    int64_t* heap_at  # its place on the heap (-1: off it)
    char* touched
    _LogEntry** log  # the events that touched it, in key order
    int64_t* log_len
    int64_t* log_cap
    int64_t* heap  # the resources with routes growing, least key first
    int64_t heap_len
    int64_t* touched_list
    # per route
    double* key_level  # the key of the event that froze it
    int64_t* key_at
    int64_t* solved  # its count at the last solve
    int64_t* fallen  # the routes whose count fell since the last solve (scratch)
    bint full  # the capacities changed: fill the changed routes' components from scratch
    double floor_level  # a refill's k* (no event comes before it; -inf in a fill from scratch)
    int64_t floor_at


cdef int _levels_alloc(_Levels* v, Py_ssize_t n) except -1:
    memset(v, 0, sizeof(_Levels))
    v.frozen = <double*>calloc(n, sizeof(double))
    v.last_level = <double*>calloc(n, sizeof(double))
    v.last_at = <int64_t*>calloc(n, sizeof(int64_t))
    v.level = <double*>calloc(n, sizeof(double))
    v.cap = <double*>calloc(n, sizeof(double))
    v.heap_at = <int64_t*>malloc(n * sizeof(int64_t))
    v.touched = <char*>calloc(n, 1)
    v.log = <_LogEntry**>calloc(n, sizeof(_LogEntry*))
    v.log_len = <int64_t*>calloc(n, sizeof(int64_t))
    v.log_cap = <int64_t*>calloc(n, sizeof(int64_t))
    v.heap = <int64_t*>malloc(n * sizeof(int64_t))
    v.touched_list = <int64_t*>malloc(n * sizeof(int64_t))
    if not (v.frozen and v.last_level and v.last_at and v.level and v.cap and v.heap_at and v.touched and v.log
            and v.log_len and v.log_cap and v.heap and v.touched_list):
        raise MemoryError()
    for q in range(n):
        v.heap_at[q] = -1
        v.last_at[q] = -1
    return 0


cdef void _levels_free(_Levels* v, Py_ssize_t n) noexcept:
    if v.log:
        for q in range(n):
            free(v.log[q])
    free(v.frozen)
    free(v.last_level)
    free(v.last_at)
    free(v.level)
    free(v.cap)
    free(v.heap_at)
    free(v.touched)
    free(v.log)
    free(v.log_len)
    free(v.log_cap)
    free(v.heap)
    free(v.touched_list)
    free(v.key_level)
    free(v.key_at)
    free(v.solved)
    free(v.fallen)
    memset(v, 0, sizeof(_Levels))


cdef int _levels_grow(_Levels* v, Py_ssize_t old, Py_ssize_t size) except -1:
    """The per-route arrays for ``size`` route ids (new entries zero)."""
    v.key_level = <double*>_grown(v.key_level, old, size, sizeof(double))
    v.key_at = <int64_t*>_grown(v.key_at, old, size, sizeof(int64_t))
    v.solved = <int64_t*>_grown(v.solved, old, size, sizeof(int64_t))
    v.fallen = <int64_t*>_grown(v.fallen, old, size, sizeof(int64_t))
    return 0


cdef inline bint _before(double x, int64_t q, double y, int64_t p) noexcept nogil:
    """Key (x, q) < key (y, p)."""
    return x < y or (x == y and q < p)


cdef inline bint _heap_less(_Levels* v, int64_t a, int64_t b) noexcept nogil:
    return _before(v.level[a], a, v.level[b], b)


cdef void _heap_fix(_Levels* v, int64_t i) noexcept nogil:
    """The heap order restored around place ``i`` (its resource's key changed)."""
    cdef int64_t q = v.heap[i], parent, child
    while i > 0:
        parent = (i - 1) >> 1
        if not _heap_less(v, q, v.heap[parent]):
            break
        v.heap[i] = v.heap[parent]
        v.heap_at[v.heap[i]] = i
        i = parent
    while True:
        child = 2 * i + 1
        if child >= v.heap_len:
            break
        if child + 1 < v.heap_len and _heap_less(v, v.heap[child + 1], v.heap[child]):
            child += 1
        if not _heap_less(v, v.heap[child], q):
            break
        v.heap[i] = v.heap[child]
        v.heap_at[v.heap[i]] = i
        i = child
    v.heap[i] = q
    v.heap_at[q] = i


cdef void _heap_drop(_Levels* v, int64_t q) noexcept nogil:
    cdef int64_t i = v.heap_at[q]
    if i < 0:
        return
    v.heap_at[q] = -1
    v.heap_len -= 1
    if i < v.heap_len:
        v.heap[i] = v.heap[v.heap_len]
        v.heap_at[v.heap[i]] = i
        _heap_fix(v, i)


cdef int _sort_list(LiveRates live, int64_t q) except -1:
    """Resource ``q``'s listed routes (with their fractions) in ascending order: the tail appended out of order
    by an insertion sort when short, else everything by qsort."""
    cdef int64_t n = live.list_len[q], i, j, first = 1
    cdef int64_t* r = live.lists[q]
    cdef double* x = live.list_w[q]
    cdef int64_t rr
    cdef double xx
    cdef _ListEntry* tmp
    while first < n and r[first - 1] < r[first]:
        first += 1
    if n - first < 32:
        for i in range(first, n):
            rr, xx = r[i], x[i]
            j = i
            while j > 0 and r[j - 1] > rr:
                r[j], x[j] = r[j - 1], x[j - 1]
                j -= 1
            r[j], x[j] = rr, xx
    else:
        tmp = <_ListEntry*>malloc(n * sizeof(_ListEntry))
        if not tmp:
            raise MemoryError()
        for i in range(n):
            tmp[i].route, tmp[i].w = r[i], x[i]
        qsort(tmp, n, sizeof(_ListEntry), _ascending)  # by route: the struct's first field
        for i in range(n):
            r[i], x[i] = tmp[i].route, tmp[i].w
        free(tmp)
    live.list_unsorted[q] = 0
    return 0


cdef inline void _levels_key(LiveRates live, int64_t q) noexcept:
    """Resource ``q``'s key from its sets now, on the heap (or off it where nothing on it grows):
    fairshare.max_min_levels' ``key_of`` and ``level_key``."""
    cdef _Levels* v = &live.lv
    cdef int64_t k, r
    cdef double total = 0, raw
    cdef int64_t* lst = live.lists[q]
    cdef double* x = live.list_w[q]
    for k in range(live.list_len[q]):
        r = lst[k]
        if live.in_comp[r]:  # growing (and moving)
            total += x[k] * <double>live.count[r]
    if not total > 0:
        _heap_drop(v, q)
        return
    raw = (v.cap[q] - v.frozen[q]) / total
    if not _before(v.last_level[q], v.last_at[q], raw, q):  # kept above the last event that touched q
        raw = v.last_level[q] if q > v.last_at[q] else nextafter(v.last_level[q], INFINITY)
    v.level[q] = raw
    if v.heap_at[q] < 0:  # onto the heap, at its end
        v.heap[v.heap_len] = q
        v.heap_at[q] = v.heap_len
        v.heap_len += 1
    _heap_fix(v, v.heap_at[q])


cdef int _levels_run(LiveRates live, const int64_t* links, Py_ssize_t num_links, const int64_t* routes,
                     Py_ssize_t m, const int64_t* ptr, const int64_t* res, const double* w) except -1:
    """The events over ``routes`` (flagged growing in ``in_comp``), whose resources are ``links`` (their ``frozen``
    and last keys set): each route's rate and key, each resource's log appended."""
    cdef _Levels* v = &live.lv
    cdef Py_ssize_t i, k, e, num_touched
    cdef int64_t q, q2, r, at
    cdef double x
    cdef _LogEntry* entry
    for i in range(num_links):
        q = links[i]
        if live.list_unsorted[q]:
            _sort_list(live, q)
        v.cap[q] = _levels_cap(live, q)  # (contention-scaled: fairshare_levels_add.pxi)
    for i in range(num_links):
        _levels_key(live, links[i])
    while v.heap_len:
        at = v.heap[0]
        x = v.level[at]
        _heap_drop(v, at)
        if _before(x, at, v.floor_level, v.floor_at):
            live.levels_early += 1  # an event before k* in a refill: never (see the comment above)
        num_touched = 0
        for k in range(live.list_len[at]):  # its routes growing freeze at x, ascending
            r = live.lists[at][k]
            if not live.in_comp[r]:
                continue
            live.in_comp[r] = 0
            live._set_rate(r, x)
            v.key_level[r] = x
            v.key_at[r] = at
            for e in range(ptr[r], ptr[r + 1]):
                q2 = res[e]
                v.frozen[q2] = v.frozen[q2] + (w[e] * <double>live.count[r]) * x
                if not v.touched[q2]:
                    v.touched[q2] = 1
                    v.touched_list[num_touched] = q2
                    num_touched += 1
        for i in range(num_touched):
            q2 = v.touched_list[i]
            v.touched[q2] = 0
            v.last_level[q2] = x
            v.last_at[q2] = at
            if v.log_len[q2] == v.log_cap[q2]:
                k = max(4, 2 * v.log_cap[q2])
                v.log[q2] = <_LogEntry*>_grown(v.log[q2], v.log_cap[q2], k, sizeof(_LogEntry))
                v.log_cap[q2] = k
            entry = &v.log[q2][v.log_len[q2]]
            entry.level, entry.at, entry.frozen = x, at, v.frozen[q2]
            v.log_len[q2] += 1
            _levels_key(live, q2)
    for i in range(m):  # crossing nothing loaded: unbounded
        r = routes[i]
        if live.in_comp[r]:
            live.in_comp[r] = 0
            live._set_rate(r, INFINITY)
            v.key_level[r] = INFINITY
            v.key_at[r] = INT64_MAX
    return 0


cdef int _levels_solve(LiveRates live, const int64_t[::1] ptr_v, const int64_t[::1] res_v,
                       const double[::1] w_v) except -1:
    """LiveRates._solve by levels (see the comment above): the changed routes listed; the refill of the region at
    or above the floor (k* where counts only fell); after new capacities (or flows started, without ``add_fill``)
    each changed route's component filled from scratch."""
    cdef _Levels* v = &live.lv
    cdef const int64_t* ptr = &ptr_v[0]
    cdef const int64_t* res = &res_v[0]
    cdef const double* w = &w_v[0]
    cdef Py_ssize_t i, e, k, n, num_fallen = 0, num_reached = 0, num_walk = 0, m = 0, start
    cdef int64_t r, q, q2
    cdef Py_ssize_t num_grown = 0
    cdef bint full = v.full, grew = False
    cdef double floor_level = INFINITY
    cdef int64_t floor_at = INT64_MAX
    cdef _LogEntry* log
    v.full = 0
    for i in range(live.num_changed):  # the routes whose count changed (every route marked, after new capacities)
        r = live.changed_stack[i]
        live.changed[r] = 0
        if live.count[r] > 0 and not live.listed[r]:
            live._list(r, ptr_v, res_v, w_v)
        if ptr[r + 1] == ptr[r]:
            live._set_rate(r, INFINITY)  # crosses nothing: unbounded
        elif live.count[r] != v.solved[r] or full:
            if v.solved[r] > 0:  # the least old key of the changed routes: k* (the floor where flows only end)
                if _before(v.key_level[r], v.key_at[r], floor_level, floor_at):
                    floor_level, floor_at = v.key_level[r], v.key_at[r]
            else:  # new: growing through all the old fill
                v.key_level[r], v.key_at[r] = INFINITY, INT64_MAX
            if live.count[r] > v.solved[r]:
                grew = True
                for e in range(ptr[r], ptr[r + 1]):  # its resources: scanned for the floor below
                    q = res[e]
                    if not live.dirty[q]:
                        live.dirty[q] = 1
                        live.dirty_stack[num_grown] = q
                        num_grown += 1
            v.fallen[num_fallen] = r
            num_fallen += 1
        v.solved[r] = live.count[r]
    live.num_changed = 0
    for i in range(num_grown):  # (by levels `dirty` is scratch for this only)
        q = live.dirty_stack[i]
        live.dirty[q] = 0
        if live.add_fill and not full:
            _add_floor(live, q, &floor_level, &floor_at)
    if full or (grew and not live.add_fill):  # each changed route's component from scratch
        v.floor_level, v.floor_at = -INFINITY, -1
        for i in range(num_fallen):
            r = v.fallen[i]
            for e in range(ptr[r], ptr[r + 1]):
                q = res[e]
                if live.seen[q]:
                    continue
                start = num_reached
                live.seen[q] = 1
                live.reached[num_reached] = q
                num_reached += 1
                live.walk[0] = q
                num_walk = 1
                m = 0
                while num_walk:
                    num_walk -= 1
                    q = live.walk[num_walk]
                    for k in range(live.list_len[q]):
                        q2 = live.lists[q][k]  # (a route)
                        if live.count[q2] > 0 and not live.in_comp[q2]:
                            live.in_comp[q2] = 1
                            live.comp[m] = q2
                            m += 1
                            num_walk = _reach(live, q2, ptr, res, num_walk, &num_reached)
                for k in range(start, num_reached):
                    q = live.reached[k]
                    v.frozen[q], v.last_level[q], v.last_at[q], v.log_len[q] = 0, 0, -1, 0
                if m:
                    _levels_run(live, &live.reached[start], num_reached - start, live.comp, m, ptr, res, w)
                    live.components_solved += 1
                    live.routes_filled += m
    elif num_fallen:  # the region at or above the floor (k*, or lower where flows started), refilled
        v.floor_level, v.floor_at = floor_level, floor_at
        for i in range(num_fallen):
            num_walk = _reach(live, v.fallen[i], ptr, res, num_walk, &num_reached)
        while num_walk:
            num_walk -= 1
            q = live.walk[num_walk]
            for k in range(live.list_len[q]):
                r = live.lists[q][k]
                if live.count[r] > 0 and not live.in_comp[r] and \
                        not _before(v.key_level[r], v.key_at[r], floor_level, floor_at):
                    live.in_comp[r] = 1
                    live.comp[m] = r
                    m += 1
                    num_walk = _reach(live, r, ptr, res, num_walk, &num_reached)
        for k in range(num_reached):  # each resource as it was before k*: its log's last entry before it
            q = live.reached[k]
            n = v.log_len[q]
            log = v.log[q]
            while n > 0 and not _before(log[n - 1].level, log[n - 1].at, floor_level, floor_at):
                n -= 1
            v.log_len[q] = n
            if n:
                v.frozen[q], v.last_level[q], v.last_at[q] = log[n - 1].frozen, log[n - 1].level, log[n - 1].at
            else:
                v.frozen[q], v.last_level[q], v.last_at[q] = 0, 0, -1
        _levels_run(live, live.reached, num_reached, live.comp, m, ptr, res, w)
        live.refills += 1
        live.routes_filled += m
        live.routes_refilled += m
        if grew:
            live.add_refills += 1
            live.routes_add_refilled += m
    for i in range(num_reached):
        live.seen[live.reached[i]] = 0
    if live.num_known > live.num_live + (live.num_live >> 3) + 256:
        live._compact()
    return 0


cdef inline Py_ssize_t _reach(LiveRates live, int64_t r, const int64_t* ptr, const int64_t* res, Py_ssize_t num_walk,
                              Py_ssize_t* num_reached) noexcept:
    """Route ``r``'s resources not reached yet: marked, listed as reached, and onto the walk; the walk's length."""
    cdef Py_ssize_t e
    cdef int64_t q
    for e in range(ptr[r], ptr[r + 1]):
        q = res[e]
        if not live.seen[q]:
            live.seen[q] = 1
            live.reached[num_reached[0]] = q
            num_reached[0] += 1
            live.walk[num_walk] = q
            num_walk += 1
    return num_walk
