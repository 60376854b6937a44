# Included by fairshare_core.pyx: where the fill by levels (fairshare_levels.pxi) changes when flows start, so that
# a solve after flows start (and others end) refills only the region above that point, as after flows end.
#
# The old fill is a sequence of events in ascending key order; each resource's log holds the events that touched it
# (key, F after). The fill from scratch with the new counts makes the same events, with the same floats, up to the
# first key D at which they differ, and D is at least the least of:
# - the old key of every route whose count changed and had flows (its freeze adds its new count to F there);
# - on each resource q of a route that gained flows (its L_q larger, its contention-scaled capacity smaller; every
#   other resource has the same sets, so the same key, until an event differs), between two events touching it in
#   the old fill (the state after the earlier one: F and the last key from the log, the routes growing those frozen
#   after it or new): q's key with the new counts, if below the next event touching q (then the new fill takes
#   q there, an event the old one did not have); and the old fill's own event on q (q takes more routes there, or
#   comes at another key - where only counts change the first rule already holds it: a changed route on q that had
#   flows froze before or at it, and with only new routes on q its key can only fall; a new capacity needs it).
#   After q's last event, its key if a route still grows on it (a new one).
# A resource whose routes only lost flows needs no scan: its L only falls, its capacity only rises, so (IEEE
# rounding being monotone) its key only rises, and its own event is a changed route's freeze (the first rule).
# The region above D is then refilled as after flows end (tests/test_fabric_levels.py checks every solve against
# fairshare.max_min_levels from scratch, bit for bit; /work/scratch/s28 prototype: rates, keys and logs).
# Cost: a scan of the log of each resource a started route crosses, up to D, each step re-summing its L.


cdef inline double _levels_cap(LiveRates live, int64_t q) noexcept:
    """Resource ``q``'s capacity for a fill: with contention, scaled by every moving flow on it (summed in ascending
    route order, as _fill)."""
    cdef Py_ssize_t k
    cdef int64_t r
    cdef double total = 0
    if not live.contention > 0:
        return live.capacity[q]
    for k in range(live.list_len[q]):
        r = live.lists[q][k]
        if live.count[r] > 0:
            total += live.list_w[q][k] * <double>live.count[r]
    total -= 1
    if total < 0:
        total = 0
    return live.capacity[q] / (1 + live.contention * total)


cdef int _add_floor(LiveRates live, int64_t q, double* floor_level, int64_t* floor_at) except -1:
    """The floor (floor_level, floor_at) lowered to where the fill with the new counts departs from the old on
    resource ``q`` (see the comment above); the keys of new routes are (inf, INT64_MAX), above every event."""
    cdef _Levels* v = &live.lv
    cdef Py_ssize_t j, k, n = v.log_len[q]
    cdef _LogEntry* log = v.log[q]
    cdef double cap, frozen = 0, total, raw, last_level = 0, since_level = -INFINITY
    cdef int64_t r, last_at = -1, since_at = -1
    if live.list_unsorted[q]:
        _sort_list(live, q)
    cap = _levels_cap(live, q)
    for j in range(n + 1):  # the state after the old fill's j-th event on q (j = 0: before any)
        if not _before(since_level, since_at, floor_level[0], floor_at[0]):
            return 0  # every later key is above the floor
        total = 0
        for k in range(live.list_len[q]):
            r = live.lists[q][k]
            if live.count[r] > 0 and _before(since_level, since_at, v.key_level[r], v.key_at[r]):  # growing
                total += live.list_w[q][k] * <double>live.count[r]
        if total > 0:
            raw = (cap - frozen) / total
            if not _before(last_level, last_at, raw, q):  # kept above the last event that touched q
                raw = last_level if q > last_at else nextafter(last_level, INFINITY)
            if j == n or _before(raw, q, log[j].level, log[j].at):
                if _before(raw, q, floor_level[0], floor_at[0]):
                    floor_level[0], floor_at[0] = raw, q
                return 0
        if j == n:
            return 0
        if log[j].at == q:  # the old fill's own event on q
            if _before(log[j].level, log[j].at, floor_level[0], floor_at[0]):
                floor_level[0], floor_at[0] = log[j].level, log[j].at
            return 0
        last_level, last_at, frozen = log[j].level, log[j].at, log[j].frozen
        since_level, since_at = last_level, last_at
    return 0
