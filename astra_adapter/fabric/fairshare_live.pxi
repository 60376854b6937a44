# Included by fairshare_core.pyx (one extension): the flat engine's incremental solve.
#
# LiveRates keeps, between events, what MovingRates rebuilds on every call: each route's count of moving flows
# and its per-flow rate, and per resource the routes that load it. The engine tells it which flows move when it
# lays its arrays out (set_moving: one pass over the flows, counting), and the flows that end as they end (move);
# a solve then fills only the connected components that hold a resource loaded by a route whose count changed,
# each found by a walk from those resources through the routes that move - not a union-find over every moving
# route - and each filled as MovingRates fills a component (_fill on its routes ascending, with their counts), so
# every rate is the float MovingRates gives: a component untouched since the last solve is exactly one of the
# last solve's (its rates kept), the others are solved as MovingRates solves them. With ``levels`` (the flat
# engine's default) the solve fills by levels instead (fairshare_levels.pxi: after flows only end, the region at
# or above k*; the floats of fairshare.max_min_levels, not MovingRates'). Rates are kept per route (each beside
# its inverse: the listed earliest-end sweep multiplies and divides only the flows that can be the least, see
# _NEAR), and the per-event sweeps (earliest_end, move) read them through each flow's route, so no per-flow rate
# array is built either.


cdef class LiveRates:
    """The per-component max-min solve over one fabric's resources, with the moving flows' routes kept between
    calls (see the comment above)."""

    cdef double[::1] capacity
    cdef double contention
    cdef Py_ssize_t num_resources
    cdef Py_ssize_t route_cap  # per-route arrays' size
    cdef int64_t* count  # route -> flows moving on it
    cdef double* rate_pairs  # route r -> at 2r its per-flow rate (where count > 0, as of the last solve), at 2r + 1 its
    # inverse where that is safe (_inverse), else NaN (_earliest_listed's filter): the two on one cache line, as the
    # sweeps read them (the earliest end the inverse, the move the rate), route by route in the flows' order
    cdef int64_t* cands  # _earliest_listed's candidates (flow indices)
    cdef Py_ssize_t cands_cap
    cdef char* listed  # route -> in the lists of its resources (and in `known`)
    cdef char* changed  # route -> its count changed since the last solve (and on `changed_stack`)
    cdef char* in_comp  # route -> in the component being walked
    cdef int64_t* tally  # route -> scratch count (set_moving)
    cdef int64_t* changed_stack
    cdef Py_ssize_t num_changed
    cdef int64_t* known  # the listed routes
    cdef Py_ssize_t num_known
    cdef Py_ssize_t num_live  # routes with count > 0
    cdef int64_t* comp  # a component's routes (then ascending)
    cdef int64_t* mult  # their counts
    cdef double* filled  # their rates
    cdef int64_t** lists  # resource -> the listed routes loading it (some may have count 0)
    cdef int64_t* list_len
    cdef int64_t* list_cap
    cdef double** list_w  # resource -> each listed route's fraction there (fairshare_levels.pxi)
    cdef char* list_unsorted  # resource -> its list is not ascending (fairshare_levels.pxi sorts it when it needs)
    cdef char* dirty  # resource -> loaded by a changed route (and on `walk`... until walked)
    cdef char* seen  # resource -> reached by this solve's walks
    cdef int64_t* dirty_stack
    cdef int64_t* walk  # resources to walk from
    cdef int64_t* reached  # resources reached, to clear `seen`
    cdef _Scratch scratch
    cdef _Levels lv
    cdef readonly bint levels  # filled by levels (fairshare_levels.pxi): after flows end, only the region above k*
    cdef public bint add_fill  # by levels, after flows start too only a region refilled (fairshare_levels_add.pxi)
    cdef public int64_t refills, add_refills  # by levels: the region refills; those with flows started (counters)
    cdef public int64_t routes_refilled, routes_add_refilled  # by levels: the routes in those regions (counters)
    cdef public int64_t levels_early  # by levels: events before k* in a refill (never: a check for the tests)
    cdef public int64_t components_solved, routes_filled  # components filled, the distinct routes in them (counters)
    cdef public int64_t flows_filled  # moving flows in the components filled (a counter for the benchmarks)
    # the arrays bound by bind_slots / bind_table, read by the *_bound calls (no buffer taken per call)
    cdef double[::1] b_left
    cdef unsigned char[::1] b_active
    cdef double[::1] b_done
    cdef int64_t[::1] b_routes
    cdef int64_t[::1] b_starts
    cdef int64_t[::1] b_counts
    cdef int64_t[::1] b_listed
    cdef int64_t[::1] t_ptr
    cdef int64_t[::1] t_res
    cdef double[::1] t_w
    cdef public double end_precision  # relative: a flow whose time left after a move is at most this share of its
    # step's time so far ends with that move (its last bytes dropped; 0: exact, every flow to its own instant)
    cdef public double now  # the clock the moves have reached (the steps' times so far, for end_precision)
    cdef double[::1] b_begun  # per slot: when its step's flows started moving (bind_begun)
    cdef public bint scan_entries  # solve as session 21 did (the routes sorted by qsort, each round of the filling
    # scanning every live entry: _rounds_scanning) - the same floats; for side-by-side timing

    def __cinit__(self, double[::1] capacity, double contention, bint levels=False):
        cdef Py_ssize_t q
        self.capacity = capacity.copy()
        self.contention = contention
        self.levels = self.add_fill = levels
        self.num_resources = capacity.shape[0]
        n = max(self.num_resources, 1)
        self.lists = <int64_t**>calloc(n, sizeof(int64_t*))
        self.list_len = <int64_t*>calloc(n, sizeof(int64_t))
        self.list_cap = <int64_t*>calloc(n, sizeof(int64_t))
        self.list_w = <double**>calloc(n, sizeof(double*))
        self.list_unsorted = <char*>calloc(n, 1)
        self.dirty = <char*>calloc(n, 1)
        self.seen = <char*>calloc(n, 1)
        self.dirty_stack = <int64_t*>malloc(n * sizeof(int64_t))
        self.walk = <int64_t*>malloc(n * sizeof(int64_t))
        self.reached = <int64_t*>malloc(n * sizeof(int64_t))
        if not (self.lists and self.list_len and self.list_cap and self.list_w and self.list_unsorted and self.dirty and self.seen and self.dirty_stack
                and self.walk and self.reached):
            raise MemoryError()
        memset(&self.scratch, 0, sizeof(_Scratch))
        _scratch_alloc(&self.scratch, 1024, self.num_resources, 1024)
        _levels_alloc(&self.lv, n)
        self._grow(1024)

    def __dealloc__(self):
        cdef Py_ssize_t q
        if self.lists:
            for q in range(self.num_resources):
                free(self.lists[q])
                free(self.list_w[q])
        free(self.lists)
        free(self.list_w)
        free(self.list_unsorted)
        _levels_free(&self.lv, self.num_resources)
        free(self.list_len)
        free(self.list_cap)
        free(self.dirty)
        free(self.seen)
        free(self.dirty_stack)
        free(self.walk)
        free(self.reached)
        free(self.count)
        free(self.rate_pairs)
        free(self.cands)
        free(self.listed)
        free(self.changed)
        free(self.in_comp)
        free(self.tally)
        free(self.changed_stack)
        free(self.known)
        free(self.comp)
        free(self.mult)
        free(self.filled)
        _scratch_free(&self.scratch)

    cdef int _grow(self, Py_ssize_t num_route_ids) except -1:
        """Per-route arrays for route ids below ``num_route_ids`` (new entries zero)."""
        cdef Py_ssize_t old = self.route_cap, size, q
        if num_route_ids <= old:
            return 0
        size = max(num_route_ids + 1024, 2 * old)
        self.count = <int64_t*>_grown(self.count, old, size, sizeof(int64_t))
        self.rate_pairs = <double*>_grown(self.rate_pairs, 2 * old, 2 * size, sizeof(double))
        for q in range(old, size):
            self.rate_pairs[2 * q + 1] = _inverse(0.0)
        self.listed = <char*>_grown(self.listed, old, size, 1)
        self.changed = <char*>_grown(self.changed, old, size, 1)
        self.in_comp = <char*>_grown(self.in_comp, old, size, 1)
        self.tally = <int64_t*>_grown(self.tally, old, size, sizeof(int64_t))
        self.changed_stack = <int64_t*>_grown(self.changed_stack, old, size, sizeof(int64_t))
        self.known = <int64_t*>_grown(self.known, old, size, sizeof(int64_t))
        self.comp = <int64_t*>_grown(self.comp, old, size, sizeof(int64_t))
        self.mult = <int64_t*>_grown(self.mult, old, size, sizeof(int64_t))
        self.filled = <double*>_grown(self.filled, old, size, sizeof(double))
        _levels_grow(&self.lv, old, size)
        self.route_cap = size
        return 0

    cdef inline void _mark(self, int64_t r) noexcept:
        if not self.changed[r]:
            self.changed[r] = 1
            self.changed_stack[self.num_changed] = r
            self.num_changed += 1

    cdef inline void _set_rate(self, int64_t r, double x) noexcept:
        self.rate_pairs[2 * r] = x
        self.rate_pairs[2 * r + 1] = _inverse(x)

    cdef inline void _recount(self, int64_t r, int64_t flows) noexcept:
        if (self.count[r] > 0) != (flows > 0):
            self.num_live += 1 if flows > 0 else -1
        self.count[r] = flows
        self._mark(r)

    def set_moving(self, const int64_t[::1] routes, const unsigned char[::1] active, Py_ssize_t num_route_ids):
        """The flows moving now: flow ``f`` on route ``routes[f]`` where ``active[f]`` (route ids below
        ``num_route_ids``); the counts that changed are marked for the next solve."""
        cdef Py_ssize_t f, i, num_touched = 0
        cdef int64_t r
        self._grow(num_route_ids)
        cdef int64_t* tally = self.tally
        cdef int64_t* touched = self.comp  # scratch here: the routes counted
        for f in range(routes.shape[0]):
            if active[f]:
                r = routes[f]
                if tally[r] == 0:
                    touched[num_touched] = r
                    num_touched += 1
                tally[r] += 1
        for i in range(self.num_known):  # the routes listed: their counts now (0 where no flow moves on them)
            r = self.known[i]
            if tally[r] != self.count[r]:
                self._recount(r, tally[r])
        for i in range(self.num_changed):  # the routes counted since the last solve, not listed yet
            r = self.changed_stack[i]
            if not self.listed[r] and tally[r] != self.count[r]:
                self._recount(r, tally[r])
        for i in range(num_touched):  # the routes not listed, which moved no flow: new
            r = touched[i]
            if not self.listed[r]:
                self._recount(r, tally[r])
            tally[r] = 0

    def set_capacity(self, const double[::1] capacity):
        """New capacities (HTB's credit: astra_adapter.fabric.credit): every listed route on a resource whose
        capacity changed is marked, so the next solve fills the components holding those resources again (each as
        a fresh solve of it would: MovingRates.set_capacity's floats, or by levels fairshare.max_min_levels'); the
        others keep their rates."""
        cdef Py_ssize_t q, k
        for q in range(self.num_resources):
            if capacity[q] != self.capacity[q]:
                self.capacity[q] = capacity[q]
                self.lv.full = 1  # (by levels: the components those routes are in, from scratch)
                for k in range(self.list_len[q]):  # a route moving flows and not listed yet is marked already
                    self._mark(self.lists[q][k])

    def moving_routes(self):
        """As of the last solve: the routes flows move on (ascending), their counts of moving flows and their
        per-flow rates - np.unique of the moving flows' routes with its counts, and each route's rate."""
        cdef Py_ssize_t i, m = 0
        cdef int64_t r
        ids = np.empty(self.num_known, dtype=np.int64)
        cdef int64_t[::1] out = ids
        for i in range(self.num_known):  # after a solve every route moving flows is listed
            r = self.known[i]
            if self.count[r] > 0:
                out[m] = r
                m += 1
        if m:
            qsort(&out[0], m, sizeof(int64_t), _ascending)
        ids = ids[:m]
        counts = np.empty(m, dtype=np.int64)
        rates = np.empty(m)
        cdef int64_t[::1] c = counts
        cdef double[::1] x = rates
        for i in range(m):
            r = out[i]
            c[i] = self.count[r]
            x[i] = self.rate_pairs[2 * r]
        return ids, counts, rates

    def count_flows(self, const int64_t[::1] routes, const unsigned char[::1] active, Py_ssize_t a, Py_ssize_t b,
                    int64_t sign, Py_ssize_t num_route_ids):
        """The moving flows among ``a``..``b`` (``active``; on ``routes``, ids below ``num_route_ids``) counted on
        their routes (``sign`` 1: they start moving) or uncounted (-1: they stop); the routes whose counts change are
        marked for the next solve - :meth:`set_moving` of the flows then moving, one slice at a time
        (astra_adapter/fabric/flat_slots.py)."""
        cdef Py_ssize_t f
        cdef int64_t r
        self._grow(num_route_ids)
        for f in range(a, b):
            if active[f]:
                r = routes[f]
                self._recount(r, self.count[r] + sign)

    def solve(self, const int64_t[::1] ptr, const int64_t[::1] res, const double[::1] w):
        """The rates of the routes whose component holds a changed route - by levels, after flows only end, of the
        region at or above k* (``ptr``/``res``/``w``: the routes' loads as CSR,
        :meth:`astra_adapter.fabric.flows.FlowEngine._route_table`)."""
        self._solve(ptr, res, w)

    cdef int _solve(self, const int64_t[::1] ptr, const int64_t[::1] res, const double[::1] w) except -1:
        cdef Py_ssize_t i, e, num_dirty = 0, num_walk, num_reached = 0, m, entries
        cdef int64_t r, q, q2, k
        cdef int64_t* lst
        if self.levels:
            return _levels_solve(self, ptr, res, w)
        for i in range(self.num_changed):  # list the new routes; their resources are dirty
            r = self.changed_stack[i]
            self.changed[r] = 0
            if self.count[r] > 0 and not self.listed[r]:
                self._list(r, ptr, res, w)
            if ptr[r + 1] == ptr[r]:
                self._set_rate(r, INFINITY)  # crosses nothing: unbounded
            for e in range(ptr[r], ptr[r + 1]):
                q = res[e]
                if not self.dirty[q]:
                    self.dirty[q] = 1
                    self.dirty_stack[num_dirty] = q
                    num_dirty += 1
        self.num_changed = 0
        for i in range(num_dirty):  # each dirty resource's component, walked once
            q = self.dirty_stack[i]
            self.dirty[q] = 0
            if self.seen[q]:
                continue
            self.seen[q] = 1
            self.reached[num_reached] = q
            num_reached += 1
            self.walk[0] = q
            num_walk = 1
            m = 0
            entries = 0
            while num_walk:
                num_walk -= 1
                q = self.walk[num_walk]
                lst = self.lists[q]
                for k in range(self.list_len[q]):
                    r = lst[k]
                    if self.count[r] > 0 and not self.in_comp[r]:
                        self.in_comp[r] = 1
                        self.comp[m] = r
                        m += 1
                        entries += ptr[r + 1] - ptr[r]
                        for e in range(ptr[r], ptr[r + 1]):
                            q2 = res[e]
                            if not self.seen[q2]:
                                self.seen[q2] = 1
                                self.reached[num_reached] = q2
                                num_reached += 1
                                self.walk[num_walk] = q2
                                num_walk += 1
            if not m:
                continue  # nothing moves there now
            if self.scan_entries:
                qsort(self.comp, m, sizeof(int64_t), _ascending)
            else:
                _sort_ids(self.comp, m, self.mult)  # the same order; `mult` is filled below
            for k in range(m):
                r = self.comp[k]
                self.in_comp[r] = 0
                self.mult[k] = self.count[r]
            if entries > self.scratch.entries or m > self.scratch.routes:
                _scratch_alloc(&self.scratch, max(entries, 2 * self.scratch.entries), self.num_resources,
                               max(m, 2 * self.scratch.routes))
            _fill(self.comp, self.mult, m, &ptr[0], &res[0], &w[0], &self.capacity[0], self.contention,
                  &self.scratch, self.filled, self.scan_entries)
            for k in range(m):
                self._set_rate(self.comp[k], self.filled[k])
                self.flows_filled += self.mult[k]
            self.routes_filled += m
            self.components_solved += 1
        for i in range(num_reached):
            self.seen[self.reached[i]] = 0
        if self.num_known > (2 * self.num_live + 4096 if self.scan_entries else
                             self.num_live + (self.num_live >> 3) + 256):
            self._compact()  # the walks above step over the listed routes no flow moves on: keep them few
        return 0

    cdef int _list(self, int64_t r, const int64_t[::1] ptr, const int64_t[::1] res, const double[::1] w) except -1:
        cdef Py_ssize_t e
        cdef int64_t q, size
        for e in range(ptr[r], ptr[r + 1]):
            q = res[e]
            if self.list_len[q] == self.list_cap[q]:
                size = max(8, 2 * self.list_cap[q])
                self.lists[q] = <int64_t*>_grown(self.lists[q], self.list_cap[q], size, sizeof(int64_t))
                self.list_w[q] = <double*>_grown(self.list_w[q], self.list_cap[q], size, sizeof(double))
                self.list_cap[q] = size
            if self.list_len[q] and self.lists[q][self.list_len[q] - 1] > r:
                self.list_unsorted[q] = 1
            self.lists[q][self.list_len[q]] = r
            self.list_w[q][self.list_len[q]] = w[e]
            self.list_len[q] += 1
        self.listed[r] = 1
        self.known[self.num_known] = r
        self.num_known += 1
        return 0

    cdef void _compact(self) noexcept:
        """The routes no flow moves on dropped from the lists (they are listed again when flows take them)."""
        cdef Py_ssize_t q, k, m, i
        cdef int64_t r
        for q in range(self.num_resources):
            m = 0
            for k in range(self.list_len[q]):
                r = self.lists[q][k]
                if self.count[r] > 0:
                    self.lists[q][m] = r
                    self.list_w[q][m] = self.list_w[q][k]
                    m += 1
            self.list_len[q] = m
        m = 0
        for i in range(self.num_known):
            r = self.known[i]
            if self.count[r] > 0:
                self.known[m] = r
                m += 1
            else:
                self.listed[r] = 0
        self.num_known = m

    def flow_rates(self, const int64_t[::1] routes, const unsigned char[::1] active):
        """Each flow's rate as of the last solve (its route's; 0 where ``active`` is 0): what MovingRates.rates
        returns for these flows."""
        out = np.zeros(routes.shape[0])
        cdef double[::1] rate = out
        cdef Py_ssize_t f
        for f in range(routes.shape[0]):
            if active[f]:
                rate[f] = self.rate_pairs[2 * routes[f]]
        return out

    def earliest_end(self, const double[::1] left, const unsigned char[::1] active, const int64_t[::1] routes):
        """The least ``left / rate`` over the moving flows, each at its route's rate (earliest_end_ns's
        quotients); inf where none moves."""
        cdef Py_ssize_t i
        cdef double best = INFINITY, quotient
        cdef double* rate = self.rate_pairs
        for i in range(left.shape[0]):
            if active[i]:
                quotient = left[i] / rate[2 * routes[i]]
                if quotient < best:
                    best = quotient
        return best

    def earliest_end_of(self, const double[::1] left, const unsigned char[::1] active, const int64_t[::1] routes,
                        const int64_t[::1] starts, const int64_t[::1] counts):
        """:meth:`earliest_end` over the ops' flows from ``starts[k]`` to the next op's start, skipping the ops
        with no flow moving (``counts[k]`` 0: every flag of theirs 0) - the same quotients, the same minimum."""
        cdef Py_ssize_t i, k, n = left.shape[0], num_ops = starts.shape[0], end
        cdef double best = INFINITY, quotient
        cdef double* rate = self.rate_pairs
        for k in range(num_ops):
            if not counts[k]:
                continue
            end = starts[k + 1] if k + 1 < num_ops else n
            for i in range(starts[k], end):
                if active[i]:
                    quotient = left[i] / rate[2 * routes[i]]
                    if quotient < best:
                        best = quotient
        return best

    def earliest_end_listed(self, const double[::1] left, const int64_t[::1] routes, const int64_t[::1] starts,
                            const int64_t[::1] counts, const int64_t[::1] listed):
        """:meth:`earliest_end_of` reading only the moving flows: op ``k``'s are ``listed[starts[k]:starts[k] +
        counts[k]]`` (their indices, ascending) - the same quotients, the same minimum, without stepping over the
        flows of a slot that ended (a ring step's slot keeps its 1024 entries while its last few flows move)."""
        return self._earliest_listed(left, routes, starts, counts, listed)

    cdef double _earliest_listed(self, const double[::1] left, const int64_t[::1] routes, const int64_t[::1] starts,
                                 const int64_t[::1] counts, const int64_t[::1] listed) noexcept:
        """The least quotient ``left[i] / rate`` over the listed flows, without a division per flow: each flow's
        ``left[i] * inverse`` (within ~2 u of ``left[i] / rate``, where ``_inverse`` is not NaN) filters the flows
        whose quotient can be the least - those within a relative ``_NEAR`` of the least product (and every flow
        whose product is NaN) - and only those are divided, so the minimum is the divided quotients' as before,
        the same float (see the comment at ``_NEAR``)."""
        cdef Py_ssize_t j, k, i, a, n = 0, num_ops = starts.shape[0]
        cdef double near = INFINITY, below = INFINITY, product, best = INFINITY, quotient
        cdef double* inv = self.rate_pairs + 1  # (the inverses: inv[2 * r])
        cdef double* rate = self.rate_pairs
        cdef int64_t* cands = self.cands
        for k in range(num_ops):
            a = starts[k]
            for j in range(a, a + counts[k]):
                i = listed[j]
                product = left[i] * inv[2 * routes[i]]
                if not product > below:  # (NaN too)
                    if n == self.cands_cap:
                        if self._more_cands() < 0:
                            return self._earliest_divided(left, routes, starts, counts, listed)
                        cands = self.cands
                    cands[n] = i
                    n += 1
                    if product < near:
                        near = product
                        below = near + fabs(near) * _NEAR + _NEAR_ABS
        if not near < _SAFE:  # products near overflow (or none finite): every quotient divided
            return self._earliest_divided(left, routes, starts, counts, listed)
        for j in range(n):
            i = cands[j]
            if not left[i] * inv[2 * routes[i]] > below:
                quotient = left[i] / rate[2 * routes[i]]
                if quotient < best:
                    best = quotient
        return best

    cdef int _more_cands(self) noexcept:
        cdef Py_ssize_t size = max(1024, 2 * self.cands_cap)
        cdef int64_t* p = <int64_t*>realloc(self.cands, size * sizeof(int64_t))
        if p == NULL:
            return -1
        self.cands, self.cands_cap = p, size
        return 0

    cdef double _earliest_divided(self, const double[::1] left, const int64_t[::1] routes,
                                  const int64_t[::1] starts, const int64_t[::1] counts,
                                  const int64_t[::1] listed) noexcept:
        """The least quotient by dividing every listed flow's (the sweep as it was; ``_earliest_listed``'s
        fallback)."""
        cdef Py_ssize_t j, k, i, a, num_ops = starts.shape[0]
        cdef double best = INFINITY, quotient
        cdef double* rate = self.rate_pairs
        for k in range(num_ops):
            a = starts[k]
            for j in range(a, a + counts[k]):
                i = listed[j]
                quotient = left[i] / rate[2 * routes[i]]
                if quotient < best:
                    best = quotient
        return best

    def move_listed(self, double[::1] left, unsigned char[::1] active, const double[::1] done_below,
                    const int64_t[::1] starts, const int64_t[::1] routes, int64_t[::1] counts, int64_t[::1] listed,
                    double dt_ns):
        """:meth:`move` over the moving flows listed per op (as :meth:`earliest_end_listed` reads them): the same
        flows moved in the same order, the same ends uncounted in the same order; each op's list keeps its flows
        still moving, in order. The (op index, count) of the ops whose count changed."""
        return self._move_listed(left, active, done_below, starts, routes, counts, listed, dt_ns)

    cdef list _move_listed(self, double[::1] left, unsigned char[::1] active, const double[::1] done_below,
                           const int64_t[::1] starts, const int64_t[::1] routes, int64_t[::1] counts,
                           int64_t[::1] listed, double dt_ns):
        cdef Py_ssize_t j, k, i, a, num_ops = starts.shape[0]
        cdef int64_t c, r
        cdef double* rate = self.rate_pairs
        cdef double end_t = self.now + dt_ns, slack = 0.0
        cdef bint merge = self.end_precision > 0
        changed = []
        for k in range(num_ops):
            if not counts[k]:
                continue
            a = starts[k]
            c = 0
            if merge:  # the time a flow may have left and still end now: a share of its step's time so far
                slack = self.end_precision * (end_t - self.b_begun[k])
            for j in range(a, a + counts[k]):
                i = listed[j]
                r = routes[i]
                left[i] = left[i] - rate[2 * r] * dt_ns
                if not left[i] > done_below[i]:
                    active[i] = 0
                    self._recount(r, self.count[r] - 1)
                elif merge and not left[i] > done_below[i] + rate[2 * r] * slack:
                    left[i] = 0.0  # ends with this move, its last bytes dropped (its ranks then free)
                    active[i] = 0
                    self._recount(r, self.count[r] - 1)
                else:
                    listed[a + c] = i
                    c += 1
            if c != counts[k]:
                counts[k] = c
                changed.append((k, c))
        self.now = end_t
        return changed

    def bind_begun(self, double[::1] begun):
        """Per slot, when its step's flows started moving (FlowSlots: bound with the slots) - read by the moves
        only where ``end_precision`` is set."""
        self.b_begun = begun

    def bind_slots(self, double[::1] left, unsigned char[::1] active, double[::1] done_below, int64_t[::1] routes,
                   int64_t[::1] starts, int64_t[::1] counts, int64_t[::1] listed):
        """Keep the slots' arrays (astra_adapter/fabric/flat_slots.py: bound again whenever its views change) for
        :meth:`earliest_end_bound` and :meth:`move_bound`, which then take no array: a call with arrays takes a
        buffer of each, a few hundred ns apiece, at every event."""
        self.b_left, self.b_active, self.b_done, self.b_routes = left, active, done_below, routes
        self.b_starts, self.b_counts, self.b_listed = starts, counts, listed

    def bind_table(self, int64_t[::1] ptr, int64_t[::1] res, double[::1] w):
        """Keep the routes' loads (CSR, as :meth:`solve` takes them) for :meth:`solve_bound`."""
        self.t_ptr, self.t_res, self.t_w = ptr, res, w

    def earliest_end_bound(self):
        """:meth:`earliest_end_listed` on the bound slots."""
        return self._earliest_listed(self.b_left, self.b_routes, self.b_starts, self.b_counts, self.b_listed)

    def move_bound(self, double dt_ns):
        """:meth:`move_listed` on the bound slots."""
        return self._move_listed(self.b_left, self.b_active, self.b_done, self.b_starts, self.b_routes,
                                 self.b_counts, self.b_listed, dt_ns)

    def solve_bound(self):
        """:meth:`solve` on the bound table."""
        self._solve(self.t_ptr, self.t_res, self.t_w)

    def move(self, double[::1] left, unsigned char[::1] active, const double[::1] done_below,
             const int64_t[::1] starts, const int64_t[::1] routes, int64_t[::1] counts, double dt_ns):
        """move_flows with each moving flow at its route's rate (the others at 0: the same differences), the
        flows that end taken off their routes' counts; each op's count of moving flows updated in ``counts``
        (its flows from ``starts[k]`` to the next op's start, which ``counts[k]`` must count: an op counting 0
        is skipped); the (op index, count) of the ops whose count changed."""
        cdef Py_ssize_t i, k, n = left.shape[0], num_ops = starts.shape[0], end
        cdef int64_t c, r
        cdef double* rate = self.rate_pairs
        changed = []
        for k in range(num_ops):
            if not counts[k]:
                continue  # none of its flows moves (each flag of its 0): nothing to move, its count stays 0
            end = starts[k + 1] if k + 1 < num_ops else n
            c = 0
            for i in range(starts[k], end):
                if active[i]:
                    r = routes[i]
                    left[i] = left[i] - rate[2 * r] * dt_ns
                    if not left[i] > done_below[i]:
                        active[i] = 0
                        self._recount(r, self.count[r] - 1)
                    else:
                        c += 1
            if c != counts[k]:
                counts[k] = c
                changed.append((k, c))
        return changed


# _earliest_listed's filter. With r = fl(1 / rate) for a rate in [_SAFE_RATE_MIN, _SAFE_RATE_MAX] (normal, finite, and so
# is r) and left finite, the product p = fl(left * r) is within (1 + u)^2 - 1 < 2.0001 u (u = 2^-53, relative) of
# left / rate and the quotient q = fl(left / rate) within u of it, so |p - q| <= 3.0002 u |q| where neither
# underflows (where one does, within 2^-1074 absolute: _NEAR_ABS covers it). Let q* be the least quotient, of flow
# f, and P the least product. Then P >= q* (1 - 3.0002 u) for q* >= 0 and p_f <= q* (1 + 3.0002 u), so
# p_f <= P + |P| _NEAR + _NEAR_ABS for any _NEAR >= 7 u: f is among the flows kept and divided, and the minimum of
# their quotients is q*. (Negative quotients - never, left stays above its done threshold - hold by the same
# bounds with |q*|.) A NaN product (a rate outside the range, or infinite: r is NaN) is always kept; the least product
# at or above _SAFE (overflow near) falls back to dividing every flow.
cdef double _NEAR = 1e-12
cdef double _NEAR_ABS = 1e-290
cdef double _SAFE = 1e290
cdef double _SAFE_RATE_MIN = 1e-280
cdef double _SAFE_RATE_MAX = 1e280


cdef inline double _inverse(double rate) noexcept:
    """1 / rate where _earliest_listed's bounds hold (see above), else NaN (its flows' quotients always divided)."""
    if rate >= _SAFE_RATE_MIN and rate <= _SAFE_RATE_MAX:
        return 1.0 / rate
    return NAN


cdef void* _grown(void* p, Py_ssize_t old, Py_ssize_t size, size_t item) except NULL:
    """``p`` (``old`` items) reallocated to ``size`` items, the new ones zero."""
    cdef void* q = realloc(p, size * item)
    if q == NULL:
        raise MemoryError()
    memset(<char*>q + old * item, 0, (size - old) * item)
    return q
