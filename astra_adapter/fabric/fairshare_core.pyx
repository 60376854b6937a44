# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The flat flow engine's rate solve, compiled: the max-min fair rates of the moving flows of every op in flight,
from their routes, in one call, solved per connected component and only where something changed (issue #36
item 6).

The flows whose routes share no resource do not change each other's max-min rates, so the solve splits the moving
routes into the connected components of the route-resource graph (union-find over the resources each route
loads) and fills each component on its own: :meth:`astra_adapter.fabric.flows.FlowEngine._solve` followed by
:func:`astra_adapter.fabric.fairshare.max_min_rates_compacting`, operation for operation, on the component's
distinct moving routes in ascending order (each weighted by its multiplicity, its loads in path order), the
contention-scaled capacities, then progressive filling, each round summing every resource's load over the same
live entries in the same order, the same division, minimum, subtraction and threshold, the flows crossing a
saturated resource frozen and their entries dropped (walked by resource: fairshare_fill.pxi). So each
component's rates are, bit for bit, what the numpy solve gives for that component's flows alone
(``tests/test_fabric_rates_compiled.py`` checks it); built with ``-ffp-contract=off`` so that no ``a - b * c``
becomes a fused multiply-add.

Against one solve of all the moving flows (the reference engine's, and the numpy path's) the rates are the same
max-min allocation but not always the same floats: there a component's flows grow by the increments of every
round, including the rounds other components saturate in, so their rate is a sum of several deltas where here it
is one; they agree to a relative 1e-12 or so (the tests assert 1e-9 on rates and on whole plays' times).

Incremental: the solve keeps the last call's routes, multiplicities and per-route rates. A component of this call
none of whose resources is loaded by a route whose multiplicity changed since (a route that appeared, left, or
gained or lost flows) is exactly a component of the last call - the same routes with the same multiplicities - so
its rates are kept, not solved again; each component's rates are a function of its own routes only, so keeping
them gives the floats a fresh solve would. In an MoE play the expert groups share no link while no data-parallel
ring moves, so a flow's end re-solves its group's few dozen flows instead of every flow in flight.

One solve of every moving route (``by_component`` False: the chain engine's, bit for bit the numpy path's) has
none of that to do - every route is in its one component, solved at every call - so it skips the union-find and
the record of the call, and keeps its working space between calls (:meth:`MovingRates._rates_one`); the chain
engine binds its route table once (:meth:`MovingRates.bind_table`) instead of passing it at every call.
"""

from libc.stdlib cimport malloc, calloc, realloc, free, qsort
from libc.string cimport memcpy, memset
from libc.math cimport INFINITY, NAN, fabs, nextafter
from libc.stdint cimport int64_t, INT64_MAX

import numpy as np

cdef double _REL_EPS = 1e-9  # fairshare._REL_EPS


cdef int _ascending(const void* a, const void* b) noexcept nogil:
    cdef int64_t x = (<const int64_t*>a)[0]
    cdef int64_t y = (<const int64_t*>b)[0]
    return (x > y) - (x < y)


cdef inline int64_t _root(int64_t* parent, int64_t q) noexcept nogil:
    while parent[q] != q:
        parent[q] = parent[parent[q]]  # path halving
        q = parent[q]
    return q


cdef struct _Scratch:  # progressive filling's working space: per incidence entry, per resource, per route
    Py_ssize_t* flow_of
    int64_t* res_of
    double* weight
    double* cap
    double* residual
    double* load
    char* saturated
    Py_ssize_t* used
    char* moving
    Py_ssize_t* entry_at  # _fill_by_resource: per resource, its entries ascending (CSR by `first_at`..`end_at`)
    Py_ssize_t* first_at  # per resource: its first place in `entry_at`
    Py_ssize_t* end_at  # per resource: one past its last live entry in `entry_at`
    Py_ssize_t* degree  # per resource: entries on it (zero between calls)
    char* touched  # per resource: lost a live entry this round (zero between calls)
    Py_ssize_t* touched_list
    Py_ssize_t* route_first  # per route and one more: its first incidence entry
    Py_ssize_t entries
    Py_ssize_t resources
    Py_ssize_t routes


cdef void _scratch_free(_Scratch* s) noexcept:
    free(s.flow_of)
    free(s.res_of)
    free(s.weight)
    free(s.cap)
    free(s.residual)
    free(s.load)
    free(s.saturated)
    free(s.used)
    free(s.moving)
    free(s.entry_at)
    free(s.first_at)
    free(s.end_at)
    free(s.degree)
    free(s.touched)
    free(s.touched_list)
    free(s.route_first)
    memset(s, 0, sizeof(_Scratch))


cdef int _scratch_alloc(_Scratch* s, Py_ssize_t entries, Py_ssize_t resources, Py_ssize_t routes) except -1:
    """Room for ``entries`` incidence entries over ``resources`` resources and ``routes`` routes (``load`` and
    ``saturated`` zeroed: _fill leaves them zero)."""
    _scratch_free(s)
    entries, resources, routes = max(entries, 1), max(resources, 1), max(routes, 1)
    s.flow_of = <Py_ssize_t*>malloc(entries * sizeof(Py_ssize_t))
    s.res_of = <int64_t*>malloc(entries * sizeof(int64_t))
    s.weight = <double*>malloc(entries * sizeof(double))
    s.cap = <double*>malloc(resources * sizeof(double))
    s.residual = <double*>malloc(resources * sizeof(double))
    s.load = <double*>calloc(resources, sizeof(double))
    s.saturated = <char*>calloc(resources, 1)
    s.used = <Py_ssize_t*>malloc(resources * sizeof(Py_ssize_t))
    s.moving = <char*>calloc(routes, 1)
    s.entry_at = <Py_ssize_t*>malloc(entries * sizeof(Py_ssize_t))
    s.first_at = <Py_ssize_t*>malloc(resources * sizeof(Py_ssize_t))
    s.end_at = <Py_ssize_t*>malloc(resources * sizeof(Py_ssize_t))
    s.degree = <Py_ssize_t*>calloc(resources, sizeof(Py_ssize_t))
    s.touched = <char*>calloc(resources, 1)
    s.touched_list = <Py_ssize_t*>malloc(resources * sizeof(Py_ssize_t))
    s.route_first = <Py_ssize_t*>malloc((routes + 1) * sizeof(Py_ssize_t))
    s.entries, s.resources, s.routes = entries, resources, routes
    if not (s.flow_of and s.res_of and s.weight and s.cap and s.residual and s.load and s.saturated and s.used
            and s.moving and s.entry_at and s.first_at and s.end_at and s.degree and s.touched and s.touched_list
            and s.route_first):
        _scratch_free(s)
        raise MemoryError()
    return 0


cdef void _fill(const int64_t* ids, const int64_t* mult, Py_ssize_t m, const int64_t* ptr, const int64_t* res,
                const double* w, const double* capacity, double contention, _Scratch* s, double* out,
                bint scan_entries) noexcept:
    """The max-min rates ``out[i]`` of one flow on route ``ids[i]`` (``ids`` ascending, ``mult[i]`` flows on it):
    the incidence route by route in path order, each load times the route's multiplicity, the contention-scaled
    capacities, then progressive filling (fairshare.max_min_rates_compacting, operation for operation): its rounds
    by resource (_rounds_by_resource, fairshare_fill.pxi), or ``scan_entries``: each round scanning every live
    entry (_rounds_scanning, as the numpy code does; session 21's fill) - the same floats either way."""
    cdef Py_ssize_t i, j, e, entries = 0
    cdef int64_t r, q
    cdef double x
    cdef Py_ssize_t* flow_of = s.flow_of
    cdef int64_t* res_of = s.res_of
    cdef double* weight = s.weight
    cdef double* cap = s.cap
    cdef double* residual = s.residual
    cdef double* load = s.load
    cdef char* saturated = s.saturated
    cdef char* moving = s.moving
    for i in range(m):
        out[i] = 0
        s.route_first[i] = entries
        r = ids[i]
        for e in range(ptr[r], ptr[r + 1]):
            flow_of[entries] = i
            res_of[entries] = res[e]
            weight[entries] = w[e] * <double>mult[i]
            entries += 1
    s.route_first[m] = entries
    for j in range(entries):
        q = res_of[j]
        cap[q] = capacity[q]
        load[q] = 0
    if contention > 0:  # a link crossed by n flows delivers 1 / (1 + c (n - 1)) of its rate
        for j in range(entries):
            load[res_of[j]] += weight[j]
        for j in range(entries):
            q = res_of[j]
            if not saturated[q]:  # `saturated` marks the resources scaled already
                saturated[q] = 1
                x = load[q] - 1
                if x < 0:
                    x = 0
                cap[q] = capacity[q] / (1 + contention * x)
        for j in range(entries):
            saturated[res_of[j]] = 0
    for j in range(entries):
        residual[res_of[j]] = cap[res_of[j]]
    for i in range(m):
        moving[i] = 1
    if scan_entries:
        _rounds_scanning(s, m, entries, out)
    else:
        _rounds_by_resource(s, m, entries, out)
    for i in range(m):
        moving[i] = 0


cdef Py_ssize_t _distinct_routes(const int64_t[::1] routes, const unsigned char[::1] active, int64_t[::1] slot,
                                 int64_t* distinct) noexcept:
    """The distinct routes of the moving flows into ``distinct``, in the order first met, each marked with its
    place in ``slot`` (-1 where not marked: the caller unmarks them); returns how many."""
    cdef Py_ssize_t f, num = 0
    cdef int64_t r
    for f in range(routes.shape[0]):
        if active[f]:
            r = routes[f]
            if slot[r] < 0:
                slot[r] = num
                distinct[num] = r
                num += 1
    return num


cdef class MovingRates:
    """The solve over one fabric's resources (capacities in bytes per ns, the flow contention), with its
    scratch space and the last call's per-route state kept between calls."""

    cdef double[::1] capacity
    cdef double contention
    cdef int64_t[::1] slot  # route id -> its index among the distinct moving routes of the call (-1 between calls)
    cdef int64_t[::1] last_count  # route id -> its multiplicity in the last call (0: not moving then)
    cdef double[::1] last_rate  # route id -> its per-flow rate in the last call (where last_count > 0)
    cdef int64_t[::1] last_routes  # the last call's distinct moving routes
    cdef Py_ssize_t num_last
    cdef readonly bint by_component  # False: one solve of every moving route, every call (the numpy path's floats)
    cdef public int64_t components_solved  # components filled (counters for the benchmarks)
    cdef public int64_t components_kept  # components whose last rates were kept
    cdef public bint scan_entries  # fill each round scanning every live entry (_rounds_scanning; the same floats)
    # one solve of every moving route (by_component False): its working space kept between calls, grown as needed
    cdef _Scratch one_scratch
    cdef int64_t* one_ids  # the distinct moving routes (then those crossing a resource), ascending
    cdef int64_t* one_mult  # their multiplicities
    cdef double* one_filled  # their per-flow rates
    cdef double* one_rate  # per distinct route (index: `slot`) its per-flow rate
    cdef Py_ssize_t one_cap  # routes the four arrays above hold
    cdef const int64_t[::1] t_ptr  # the route table bound by bind_table, read by rates_bound
    cdef const int64_t[::1] t_res
    cdef const double[::1] t_w
    cdef bint t_bound  # a table is bound

    def __cinit__(self, *args, **kwargs):
        memset(&self.one_scratch, 0, sizeof(_Scratch))
        self.one_ids = self.one_mult = NULL
        self.one_filled = self.one_rate = NULL
        self.one_cap = 0
        self.t_bound = False

    def __dealloc__(self):
        _scratch_free(&self.one_scratch)
        free(self.one_ids)
        free(self.one_mult)
        free(self.one_filled)
        free(self.one_rate)

    def __init__(self, double[::1] capacity, double contention, bint by_component=True):
        self.capacity = capacity.copy()
        self.contention = contention
        self.by_component = by_component
        self.slot = np.full(0, -1, dtype=np.int64)
        self.last_count = np.zeros(0, dtype=np.int64)
        self.last_rate = np.zeros(0)
        self.last_routes = np.zeros(0, dtype=np.int64)
        self.num_last = 0
        self.components_solved = 0
        self.components_kept = 0

    def set_capacity(self, const double[::1] capacity):
        """New capacities (HTB's credit: astra_adapter.fabric.credit); every component is solved again."""
        self.capacity[:] = capacity
        self.last_count[:] = 0
        self.num_last = 0

    cdef void _grow(self, Py_ssize_t num_route_ids):
        cdef Py_ssize_t size = num_route_ids + 1024
        slot = np.full(size, -1, dtype=np.int64)
        count = np.zeros(size, dtype=np.int64)
        rate = np.zeros(size)
        old = self.last_count.shape[0]
        slot[:old] = self.slot
        count[:old] = self.last_count
        rate[:old] = self.last_rate
        self.slot, self.last_count, self.last_rate = slot, count, rate

    def rates(self, const int64_t[::1] routes, const unsigned char[::1] active, const int64_t[::1] ptr,
              const int64_t[::1] res, const double[::1] w):
        """Each flow's max-min rate (0 where ``active`` is 0); ``ptr``/``res``/``w``: the routes' loads as CSR
        (:meth:`astra_adapter.fabric.flows.FlowEngine._route_table`), covering every route in ``routes``."""
        cdef Py_ssize_t n = routes.shape[0]
        cdef Py_ssize_t num_resources = self.capacity.shape[0]
        out = np.zeros(n)
        cdef double[::1] rate = out
        if not self.by_component:
            self._rates_one(routes, active, ptr, res, w, rate)
            return out
        cdef Py_ssize_t f, k, i, e, c, num_routes = 0, entries, num_comps = 0
        cdef int64_t r, q, a, b, top
        if ptr.shape[0] - 1 > self.slot.shape[0]:
            self._grow(ptr.shape[0] - 1)
        cdef int64_t[::1] slot = self.slot
        cdef int64_t[::1] last_count = self.last_count
        cdef double[::1] last_rate = self.last_rate
        cdef int64_t* distinct = <int64_t*>malloc(max(n, 1) * sizeof(int64_t))
        cdef int64_t* count = NULL
        cdef int64_t* parent = NULL
        cdef int64_t* comp_of_root = NULL  # a component's root resource -> its index (-1: none yet)
        cdef int64_t* comp_of = NULL  # distinct route index -> its component (-1: crosses nothing)
        cdef int64_t* comp_start = NULL  # per component: its first place in `order`
        cdef int64_t* order = NULL  # distinct route indices grouped by component
        cdef int64_t* sorted_ids = NULL  # a component's route ids, ascending
        cdef char* dirty = NULL  # per resource: loaded by a route whose multiplicity changed; then per component
        cdef double* per_route = NULL
        cdef int64_t* mult = NULL  # a component's routes' multiplicities (in sorted_ids' order)
        cdef double* filled = NULL  # a component's per-flow rates (in sorted_ids' order)
        cdef _Scratch scratch
        memset(&scratch, 0, sizeof(_Scratch))
        try:
            # the distinct moving routes and how many flows take each (each dirty component's sorted when it is
            # filled; one solve of them all: _rates_one)
            num_routes = _distinct_routes(routes, active, slot, distinct)
            count = <int64_t*>calloc(max(num_routes, 1), sizeof(int64_t))
            for k in range(num_routes):
                slot[distinct[k]] = k
            for f in range(n):
                if active[f]:
                    count[slot[routes[f]]] += 1
            # the resources of the routes whose multiplicity changed since the last call (or that left)
            dirty = <char*>calloc(max(num_resources, 1), 1)
            for k in range(num_routes):
                r = distinct[k]
                if last_count[r] != count[k]:
                    for e in range(ptr[r], ptr[r + 1]):
                        dirty[res[e]] = 1
            for i in range(self.num_last):
                r = self.last_routes[i]
                if slot[r] < 0:
                    for e in range(ptr[r], ptr[r + 1]):
                        dirty[res[e]] = 1
            # the connected components: union-find over the resources each route loads
            parent = <int64_t*>malloc(max(num_resources, 1) * sizeof(int64_t))
            for q in range(num_resources):
                parent[q] = q
            for k in range(num_routes):
                r = distinct[k]
                if ptr[r + 1] > ptr[r]:
                    top = _root(parent, res[ptr[r]])
                    for e in range(ptr[r] + 1, ptr[r + 1]):
                        q = _root(parent, res[e])
                        if q != top:
                            parent[q] = top
            for q in range(num_resources):  # every resource pointing at its root; a component is dirty where one
                parent[q] = _root(parent, q)  # of its resources is
                if dirty[q]:
                    dirty[q] = 0
                    dirty[parent[q]] = 2
            comp_of_root = <int64_t*>malloc(max(num_resources, 1) * sizeof(int64_t))
            for q in range(num_resources):
                comp_of_root[q] = -1
            comp_of = <int64_t*>malloc(max(num_routes, 1) * sizeof(int64_t))
            comp_start = <int64_t*>calloc(num_routes + 2, sizeof(int64_t))
            for k in range(num_routes):
                r = distinct[k]
                if ptr[r + 1] > ptr[r]:
                    q = parent[res[ptr[r]]]
                    if comp_of_root[q] < 0:
                        comp_of_root[q] = num_comps
                        num_comps += 1
                    comp_of[k] = comp_of_root[q]
                    comp_start[comp_of[k] + 1] += 1
                else:
                    comp_of[k] = -1
            for c in range(num_comps):
                comp_start[c + 1] += comp_start[c]
            order = <int64_t*>malloc(max(num_routes, 1) * sizeof(int64_t))
            sorted_ids = <int64_t*>malloc(max(num_routes, 1) * sizeof(int64_t))
            for k in range(num_routes):
                if comp_of[k] >= 0:
                    order[comp_start[comp_of[k]]] = k
                    comp_start[comp_of[k]] += 1
            for c in range(num_comps - 1, 0, -1):
                comp_start[c] = comp_start[c - 1]
            if num_comps:
                comp_start[0] = 0
            per_route = <double*>calloc(max(num_routes, 1), sizeof(double))
            for k in range(num_routes):
                if comp_of[k] < 0:
                    per_route[k] = INFINITY  # crosses nothing: unbounded
            # per component: its last rates kept, or progressive filling on it alone
            entries = 0  # the most a component can have: every moving route's entries
            for k in range(num_routes):
                entries += ptr[distinct[k] + 1] - ptr[distinct[k]]
            _scratch_alloc(&scratch, entries, num_resources, num_routes)
            mult = <int64_t*>malloc(max(num_routes, 1) * sizeof(int64_t))
            filled = <double*>malloc(max(num_routes, 1) * sizeof(double))
            for c in range(num_comps):
                a = comp_start[c]
                b = comp_start[c + 1]
                r = distinct[order[a]]
                if dirty[parent[res[ptr[r]]]] != 2:
                    for i in range(a, b):
                        per_route[order[i]] = last_rate[distinct[order[i]]]
                    self.components_kept += 1
                    continue
                self.components_solved += 1
                for i in range(a, b):  # its routes ascending (np.unique of its routes alone)
                    sorted_ids[i - a] = distinct[order[i]]
                qsort(sorted_ids, b - a, sizeof(int64_t), _ascending)
                for i in range(a, b):
                    mult[i - a] = count[slot[sorted_ids[i - a]]]
                _fill(sorted_ids, mult, b - a, &ptr[0], &res[0], &w[0], &self.capacity[0], self.contention, &scratch,
                      filled, self.scan_entries)
                for i in range(a, b):
                    per_route[slot[sorted_ids[i - a]]] = filled[i - a]
            for f in range(n):
                if active[f]:
                    rate[f] = per_route[slot[routes[f]]]
            # this call's routes, multiplicities and rates, for the next
            for i in range(self.num_last):
                last_count[self.last_routes[i]] = 0
            if self.last_routes.shape[0] < num_routes:
                self.last_routes = np.zeros(num_routes + 1024, dtype=np.int64)
            for k in range(num_routes):
                r = distinct[k]
                last_count[r] = count[k]
                last_rate[r] = per_route[k]
                self.last_routes[k] = r
            self.num_last = num_routes
            return out
        finally:
            for k in range(num_routes):
                slot[distinct[k]] = -1
            free(distinct)
            free(count)
            free(parent)
            free(comp_of_root)
            free(comp_of)
            free(comp_start)
            free(order)
            free(sorted_ids)
            free(dirty)
            _scratch_free(&scratch)
            free(per_route)
            free(mult)
            free(filled)


    def bind_table(self, const int64_t[::1] ptr, const int64_t[::1] res, const double[::1] w):
        """The routes' loads as CSR (:meth:`astra_adapter.fabric.flows.FlowEngine._route_table`) that
        :meth:`rates_bound` reads, held as typed views (bound again whenever the table grows)."""
        self.t_ptr, self.t_res, self.t_w = ptr, res, w
        self.t_bound = True

    def rates_bound(self, const int64_t[::1] routes, const unsigned char[::1] active):
        """:meth:`rates` on the route table bound last (:meth:`bind_table`), which covers every route in
        ``routes``; ``active`` may be any buffer of bytes (a moving set's flags as one ``bytes``)."""
        if not self.t_bound:
            raise ValueError("no route table bound (bind_table)")
        if self.by_component:
            return self.rates(routes, active, self.t_ptr, self.t_res, self.t_w)
        out = np.zeros(routes.shape[0])
        self._rates_one(routes, active, self.t_ptr, self.t_res, self.t_w, out)
        return out

    cdef int _grow_one(self, Py_ssize_t routes) except -1:
        """Room for ``routes`` distinct routes in the one-solve arrays (their contents not kept)."""
        cdef Py_ssize_t size = max(routes, 2 * self.one_cap, 1024)
        free(self.one_ids)
        free(self.one_mult)
        free(self.one_filled)
        free(self.one_rate)
        self.one_ids = <int64_t*>malloc(size * sizeof(int64_t))
        self.one_mult = <int64_t*>malloc(size * sizeof(int64_t))
        self.one_filled = <double*>malloc(size * sizeof(double))
        self.one_rate = <double*>malloc(size * sizeof(double))
        self.one_cap = size
        if not (self.one_ids and self.one_mult and self.one_filled and self.one_rate):
            self.one_cap = 0
            raise MemoryError()
        return 0

    cdef int _rates_one(self, const int64_t[::1] routes, const unsigned char[::1] active, const int64_t[::1] ptr,
                        const int64_t[::1] res, const double[::1] w, double[::1] rate) except -1:
        """:meth:`rates` as one solve of every moving route (``by_component`` False), written into ``rate``: the
        distinct moving routes ascending (as np.unique), each with its multiplicity, those crossing a resource
        filled together by :func:`_fill` (a route crossing nothing: unbounded) - the calls the general path makes
        for its one component, on working space kept between calls instead of allocated per call, without its
        union-find (every route is in the one component) and its record of the last call (which only a solve
        per component reads)."""
        cdef Py_ssize_t n = routes.shape[0], f, k, m = 0, num_routes = 0, entries = 0
        cdef int64_t r
        if ptr.shape[0] - 1 > self.slot.shape[0]:
            self._grow(ptr.shape[0] - 1)
        cdef int64_t[::1] slot = self.slot
        if n > self.one_cap:
            self._grow_one(n)
        cdef int64_t* ids = self.one_ids
        cdef int64_t* mult = self.one_mult
        cdef double* per_route = self.one_rate
        try:
            num_routes = _distinct_routes(routes, active, slot, ids)
            qsort(ids, num_routes, sizeof(int64_t), _ascending)
            for k in range(num_routes):
                slot[ids[k]] = k
                mult[k] = 0
                per_route[k] = INFINITY  # crosses nothing: unbounded (else filled below)
            for f in range(n):
                if active[f]:
                    mult[slot[routes[f]]] += 1
            for k in range(num_routes):  # the routes crossing a resource, ascending, with their multiplicities
                r = ids[k]
                if ptr[r + 1] > ptr[r]:
                    ids[m] = r
                    mult[m] = mult[k]
                    entries += ptr[r + 1] - ptr[r]
                    m += 1
            if m:
                self.components_solved += 1
                if entries > self.one_scratch.entries or m > self.one_scratch.routes \
                        or self.capacity.shape[0] > self.one_scratch.resources:
                    _scratch_alloc(&self.one_scratch, max(entries, 2 * self.one_scratch.entries),
                                   self.capacity.shape[0], max(m, 2 * self.one_scratch.routes))
                _fill(ids, mult, m, &ptr[0], &res[0], &w[0], &self.capacity[0], self.contention, &self.one_scratch,
                      self.one_filled, self.scan_entries)
                for k in range(m):
                    per_route[slot[ids[k]]] = self.one_filled[k]
            for f in range(n):
                if active[f]:
                    rate[f] = per_route[slot[routes[f]]]
        finally:
            for f in range(n):  # (every route slotted above: the moving ones)
                if active[f]:
                    slot[routes[f]] = -1
        return 0


def busy_ranks_of(const int64_t[:] src, const int64_t[:] dst, const unsigned char[:] moving, const double[:] left,
                  double done_below):
    """The ranks sending or receiving a flow of a step that moves and is not done: ``StepFlows.busy_of(moving &
    (left > done_below))`` for a step of flows (not a coflow step's), the same set."""
    cdef set out = set()
    cdef Py_ssize_t i
    for i in range(src.shape[0]):
        if moving[i] and left[i] > done_below:
            out.add(src[i])
            out.add(dst[i])
    return out


def earliest_end_ns(const double[::1] left, const double[::1] rate, const unsigned char[::1] active):
    """The least ``left / rate`` over the moving flows (``np.min(left[active] / rate[active])``: the same
    quotients, and a minimum is exact); inf where none moves."""
    cdef Py_ssize_t i
    cdef double best = INFINITY, quotient
    for i in range(left.shape[0]):
        if active[i]:
            quotient = left[i] / rate[i]
            if quotient < best:
                best = quotient
    return best


def move_flows(double[::1] left, const double[::1] rate, unsigned char[::1] active, const double[::1] done_below,
               const int64_t[::1] starts, double dt_ns):
    """The flows moved by ``dt_ns`` in place - ``left -= rate * dt_ns`` (every flow: the same product and
    difference), ``active &= left > done_below`` - and each op's count of moving flows (its flows from
    ``starts[k]`` to the next op's start: ``np.add.reduceat(active, starts)``)."""
    cdef Py_ssize_t i, k, n = left.shape[0], num_ops = starts.shape[0]
    counts_out = np.zeros(num_ops, dtype=np.int64)
    cdef int64_t[::1] counts = counts_out
    cdef Py_ssize_t end
    cdef int64_t c
    for k in range(num_ops):
        end = starts[k + 1] if k + 1 < num_ops else n
        c = 0
        for i in range(starts[k], end):
            left[i] = left[i] - rate[i] * dt_ns
            if active[i] and not left[i] > done_below[i]:
                active[i] = 0
            c += active[i]
        counts[k] = c
    return counts_out


include "fairshare_fill.pxi"
include "fairshare_levels.pxi"
include "fairshare_levels_add.pxi"
include "fairshare_live.pxi"
include "fairshare_events.pxi"
