# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The flat flow engine's rate solve, compiled: the max-min fair rates of the moving flows of every op in flight,
from their routes, in one call (issue #36 item 6).

It is :meth:`astra_adapter.fabric.flows.FlowEngine._solve` followed by
:func:`astra_adapter.fabric.fairshare.max_min_rates_compacting` and the scatter back to the flows
(:meth:`astra_adapter.fabric.flat_flows.FlatFlowEngine._rate_flows`), operation for operation: the distinct
moving routes in ascending order, each weighted by its multiplicity; their loads gathered route by route in path
order; the contention-scaled capacities; then progressive filling, each round summing every resource's load
over the same live entries in the same order, the same division, minimum, subtraction and threshold, the flows
crossing a saturated resource frozen and their entries dropped. So every rate is the same float as the numpy
path's (``tests/test_fabric_rates_compiled.py`` compares them); it is built with ``-ffp-contract=off`` so that
no ``a - b * c`` becomes a fused multiply-add. What it saves is the numpy calls' overhead: a solve has a few
rounds over a few thousand entries, which numpy pays for in dozens of small calls and temporaries.
"""

from libc.stdlib cimport malloc, calloc, free, qsort
from libc.string cimport memset
from libc.math cimport INFINITY
from libc.stdint cimport int64_t

import numpy as np

cdef double _REL_EPS = 1e-9  # fairshare._REL_EPS


cdef int _ascending(const void* a, const void* b) noexcept nogil:
    cdef int64_t x = (<const int64_t*>a)[0]
    cdef int64_t y = (<const int64_t*>b)[0]
    return (x > y) - (x < y)


cdef class MovingRates:
    """The solve over one fabric's resources (capacities in bytes per ns, the flow contention), with its
    scratch space kept between calls."""

    cdef double[::1] capacity
    cdef double contention
    cdef int64_t[::1] slot  # route id -> its index among the distinct moving routes of the call (-1 between calls)

    def __init__(self, double[::1] capacity, double contention):
        self.capacity = capacity.copy()
        self.contention = contention
        self.slot = np.full(0, -1, dtype=np.int64)

    def rates(self, const int64_t[::1] routes, const unsigned char[::1] active, const int64_t[::1] ptr,
              const int64_t[::1] res, const double[::1] w):
        """Each flow's max-min rate (0 where ``active`` is 0); ``ptr``/``res``/``w``: the routes' loads as CSR
        (:meth:`astra_adapter.fabric.flows.FlowEngine._route_table`), covering every route in ``routes``."""
        cdef Py_ssize_t n = routes.shape[0]
        cdef Py_ssize_t num_resources = self.capacity.shape[0]
        out = np.zeros(n)
        cdef double[::1] rate = out
        cdef Py_ssize_t f, k, j, e, m, u, num_routes = 0, entries = 0, live, num_used, still
        cdef int64_t r, q
        if ptr.shape[0] - 1 > self.slot.shape[0]:
            self.slot = np.full(ptr.shape[0] - 1 + 1024, -1, dtype=np.int64)
        cdef int64_t[::1] slot = self.slot
        cdef int64_t* distinct = <int64_t*>malloc(max(n, 1) * sizeof(int64_t))
        cdef int64_t* count = NULL
        cdef Py_ssize_t* flow_of = NULL
        cdef int64_t* res_of = NULL
        cdef double* weight = NULL
        cdef double* cap = NULL
        cdef double* residual = NULL
        cdef double* load = NULL
        cdef double* per_route = NULL
        cdef char* moving = NULL
        cdef char* saturated = NULL
        cdef Py_ssize_t* used = NULL
        cdef double delta, quotient, left, x
        try:
            # the distinct moving routes, ascending (np.unique), and how many flows take each
            for f in range(n):
                if active[f]:
                    r = routes[f]
                    if slot[r] < 0:
                        slot[r] = num_routes
                        distinct[num_routes] = r
                        num_routes += 1
            if num_routes == 0:
                return out
            qsort(distinct, num_routes, sizeof(int64_t), _ascending)
            count = <int64_t*>calloc(num_routes, sizeof(int64_t))
            for k in range(num_routes):
                slot[distinct[k]] = k
                entries += ptr[distinct[k] + 1] - ptr[distinct[k]]
            for f in range(n):
                if active[f]:
                    count[slot[routes[f]]] += 1
            # the incidence, route by route in path order, each load times the route's multiplicity
            flow_of = <Py_ssize_t*>malloc(max(entries, 1) * sizeof(Py_ssize_t))
            res_of = <int64_t*>malloc(max(entries, 1) * sizeof(int64_t))
            weight = <double*>malloc(max(entries, 1) * sizeof(double))
            j = 0
            for k in range(num_routes):
                r = distinct[k]
                for e in range(ptr[r], ptr[r + 1]):
                    flow_of[j] = k
                    res_of[j] = res[e]
                    weight[j] = w[e] * <double>count[k]
                    j += 1
            cap = <double*>malloc(num_resources * sizeof(double))
            residual = <double*>malloc(num_resources * sizeof(double))
            load = <double*>calloc(num_resources, sizeof(double))
            for q in range(num_resources):
                cap[q] = self.capacity[q]
            if self.contention > 0:  # a link crossed by n flows delivers 1 / (1 + c (n - 1)) of its rate
                for j in range(entries):
                    load[res_of[j]] += weight[j]
                for q in range(num_resources):
                    x = load[q] - 1
                    if x < 0:
                        x = 0
                    cap[q] = cap[q] / (1 + self.contention * x)
            for q in range(num_resources):
                residual[q] = cap[q]
            # progressive filling (fairshare.max_min_rates_compacting)
            per_route = <double*>calloc(num_routes, sizeof(double))
            moving = <char*>malloc(num_routes)
            memset(moving, 1, num_routes)
            saturated = <char*>calloc(num_resources, 1)
            used = <Py_ssize_t*>malloc(num_resources * sizeof(Py_ssize_t))
            live = entries
            still = num_routes
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
                    for k in range(num_routes):
                        if moving[k]:
                            per_route[k] = INFINITY  # crosses nothing: unbounded
                    break
                delta = residual[used[0]] / load[used[0]]
                for u in range(1, num_used):
                    quotient = residual[used[u]] / load[used[u]]
                    if quotient < delta:
                        delta = quotient
                for k in range(num_routes):
                    if moving[k]:
                        per_route[k] += delta
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
                m = 0
                for j in range(live):
                    if moving[flow_of[j]]:
                        flow_of[m] = flow_of[j]
                        res_of[m] = res_of[j]
                        weight[m] = weight[j]
                        m += 1
                live = m
                for u in range(num_used):
                    saturated[used[u]] = 0
            for f in range(n):
                if active[f]:
                    rate[f] = per_route[slot[routes[f]]]
            return out
        finally:
            for k in range(num_routes):
                slot[distinct[k]] = -1
            free(distinct)
            free(count)
            free(flow_of)
            free(res_of)
            free(weight)
            free(cap)
            free(residual)
            free(load)
            free(per_route)
            free(moving)
            free(saturated)
            free(used)


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
