# The compiled loop's event queue (included by aware_core.pyx): events run in (tick, sequence number) order,
# as a heap of (tick, sequence, ...) tuples runs them. Ranks that move in step schedule hundreds of events on the
# same tick, so events are kept in one bucket per tick, in sequence order (a new event has the highest number
# yet, so it goes at the end; only a link's free event, numbered when it was scheduled, is inserted in place),
# found through a hash of the ticks; a binary heap orders the distinct ticks.

from libc.stdint cimport uint64_t, INT64_MIN


cdef struct Slot:
    int64_t seq
    int32_t kind
    int32_t a
    int64_t b


cdef struct Bucket:
    int64_t t
    Slot *slots
    int64_t head, count, cap   # pending: slots[head:count]


cdef class _Queue:
    cdef Bucket *buckets
    cdef int64_t buckets_len, buckets_cap
    cdef int64_t *free_buckets
    cdef int64_t free_len
    cdef int64_t *ticks           # binary heap of the ticks that have a bucket
    cdef int64_t ticks_len, ticks_cap
    cdef int64_t *ht_keys         # open addressing, linear probing: tick -> bucket
    cdef int64_t *ht_vals
    cdef int64_t ht_mask, ht_used
    cdef int64_t current          # the bucket being run, -1 before the first
    cdef int64_t last_t, last_b   # the bucket the last event went to
    cdef public int64_t length

    def __cinit__(self):
        cdef int64_t i
        self.buckets_cap, self.ticks_cap, self.ht_mask = 64, 64, 255
        self.buckets = <Bucket *> malloc(self.buckets_cap * sizeof(Bucket))
        self.free_buckets = <int64_t *> malloc(self.buckets_cap * sizeof(int64_t))
        self.ticks = <int64_t *> malloc(self.ticks_cap * sizeof(int64_t))
        self.ht_keys = <int64_t *> malloc((self.ht_mask + 1) * sizeof(int64_t))
        self.ht_vals = <int64_t *> malloc((self.ht_mask + 1) * sizeof(int64_t))
        if self.buckets == NULL or self.free_buckets == NULL or self.ticks == NULL or self.ht_keys == NULL or \
                self.ht_vals == NULL:
            raise MemoryError()
        for i in range(self.ht_mask + 1):
            self.ht_keys[i] = INT64_MIN
        self.buckets_len = self.free_len = self.ticks_len = self.ht_used = self.length = 0
        self.current = self.last_b = -1
        self.last_t = INT64_MIN

    def __dealloc__(self):
        cdef int64_t i
        if self.buckets != NULL:
            for i in range(self.buckets_len):
                free(self.buckets[i].slots)
        free(self.buckets)
        free(self.free_buckets)
        free(self.ticks)
        free(self.ht_keys)
        free(self.ht_vals)

    # ---- tick -> bucket --------------------------------------------------------------------------------------
    cdef inline int64_t home(self, int64_t t) noexcept:
        return <int64_t> (((<uint64_t> t) * <uint64_t> 0x9E3779B97F4A7C15ULL) >> 40) & self.ht_mask

    cdef int64_t find(self, int64_t t) noexcept:
        cdef int64_t i = self.home(t)
        while self.ht_keys[i] != INT64_MIN:
            if self.ht_keys[i] == t:
                return self.ht_vals[i]
            i = (i + 1) & self.ht_mask
        return -1

    cdef int put(self, int64_t t, int64_t b) except -1:
        cdef int64_t i, size, old_mask = self.ht_mask
        cdef int64_t *keys
        cdef int64_t *vals
        if 2 * (self.ht_used + 1) > self.ht_mask + 1:
            keys, vals = self.ht_keys, self.ht_vals
            size = 2 * (old_mask + 1)
            self.ht_keys = <int64_t *> malloc(size * sizeof(int64_t))
            self.ht_vals = <int64_t *> malloc(size * sizeof(int64_t))
            if self.ht_keys == NULL or self.ht_vals == NULL:
                raise MemoryError()
            self.ht_mask, self.ht_used = size - 1, 0
            for i in range(size):
                self.ht_keys[i] = INT64_MIN
            for i in range(old_mask + 1):
                if keys[i] != INT64_MIN:
                    self.put(keys[i], vals[i])
            free(keys)
            free(vals)
        i = self.home(t)
        while self.ht_keys[i] != INT64_MIN:
            i = (i + 1) & self.ht_mask
        self.ht_keys[i], self.ht_vals[i] = t, b
        self.ht_used += 1
        return 0

    cdef void remove(self, int64_t t) noexcept:
        """Delete ``t`` (present), shifting back the entries probed past it."""
        cdef int64_t i = self.home(t), j, k
        while self.ht_keys[i] != t:
            i = (i + 1) & self.ht_mask
        j = i
        while True:
            j = (j + 1) & self.ht_mask
            if self.ht_keys[j] == INT64_MIN:
                break
            k = self.home(self.ht_keys[j])
            # the entry at j may move to i unless its home lies cyclically in (i, j]
            if (i <= j and (k <= i or k > j)) or (i > j and k <= i and k > j):
                self.ht_keys[i], self.ht_vals[i] = self.ht_keys[j], self.ht_vals[j]
                i = j
        self.ht_keys[i] = INT64_MIN
        self.ht_used -= 1

    # ---- the heap of ticks -------------------------------------------------------------------------------------
    cdef int tick_push(self, int64_t t) except -1:
        cdef int64_t i, parent
        if self.ticks_len == self.ticks_cap:
            self.ticks_cap *= 2
            self.ticks = <int64_t *> realloc(self.ticks, self.ticks_cap * sizeof(int64_t))
            if self.ticks == NULL:
                raise MemoryError()
        i = self.ticks_len
        self.ticks_len += 1
        while i > 0:
            parent = (i - 1) >> 1
            if self.ticks[parent] <= t:
                break
            self.ticks[i] = self.ticks[parent]
            i = parent
        self.ticks[i] = t
        return 0

    cdef int64_t tick_pop(self) noexcept:
        cdef int64_t top = self.ticks[0], last, i = 0, child, n
        self.ticks_len -= 1
        n = self.ticks_len
        if n > 0:
            last = self.ticks[n]
            while True:
                child = 2 * i + 1
                if child >= n:
                    break
                if child + 1 < n and self.ticks[child + 1] < self.ticks[child]:
                    child += 1
                if last <= self.ticks[child]:
                    break
                self.ticks[i] = self.ticks[child]
                i = child
            self.ticks[i] = last
        return top

    # ---- buckets -------------------------------------------------------------------------------------------
    cdef int64_t bucket(self, int64_t t) except -1:
        """The bucket of tick ``t``, made when it has none."""
        cdef int64_t b
        if t == self.last_t:
            return self.last_b
        b = self.find(t)
        if b < 0:
            if self.free_len:
                self.free_len -= 1
                b = self.free_buckets[self.free_len]
            else:
                if self.buckets_len == self.buckets_cap:
                    self.buckets_cap *= 2
                    self.buckets = <Bucket *> realloc(self.buckets, self.buckets_cap * sizeof(Bucket))
                    self.free_buckets = <int64_t *> realloc(self.free_buckets, self.buckets_cap * sizeof(int64_t))
                    if self.buckets == NULL or self.free_buckets == NULL:
                        raise MemoryError()
                b = self.buckets_len
                self.buckets_len += 1
                self.buckets[b].cap = 16
                self.buckets[b].slots = <Slot *> malloc(16 * sizeof(Slot))
                if self.buckets[b].slots == NULL:
                    raise MemoryError()
            self.buckets[b].t, self.buckets[b].head, self.buckets[b].count = t, 0, 0
            self.put(t, b)
            self.tick_push(t)
        self.last_t, self.last_b = t, b
        return b

    cdef int push(self, int64_t t, int64_t seq, int kind, int64_t a, int64_t b) except -1:
        """Schedule an event; ``seq`` is above every queued event's unless it was numbered earlier."""
        cdef int64_t k = self.bucket(t), i
        cdef Bucket *bk = &self.buckets[k]
        if bk.count == bk.cap:
            if bk.head > 0:  # the bucket being run: drop what has run
                for i in range(bk.head, bk.count):
                    bk.slots[i - bk.head] = bk.slots[i]
                bk.count -= bk.head
                bk.head = 0
            if bk.count == bk.cap:
                bk.cap *= 2
                bk.slots = <Slot *> realloc(bk.slots, bk.cap * sizeof(Slot))
                if bk.slots == NULL:
                    raise MemoryError()
        i = bk.count
        while i > bk.head and bk.slots[i - 1].seq > seq:
            bk.slots[i] = bk.slots[i - 1]
            i -= 1
        bk.slots[i].seq, bk.slots[i].kind, bk.slots[i].a, bk.slots[i].b = seq, kind, a, b
        bk.count += 1
        self.length += 1
        return 0

    cdef Event pop(self) noexcept:
        """The next event (the queue is not empty)."""
        cdef Event ev
        cdef Bucket *bk
        cdef Slot *s
        while True:
            if self.current >= 0:
                bk = &self.buckets[self.current]
                if bk.head < bk.count:
                    s = &bk.slots[bk.head]
                    bk.head += 1
                    self.length -= 1
                    ev.t, ev.seq, ev.kind, ev.a, ev.b = bk.t, s.seq, s.kind, s.a, s.b
                    return ev
                self.remove(bk.t)  # run out: free it
                if self.last_b == self.current:
                    self.last_t, self.last_b = INT64_MIN, -1
                self.free_buckets[self.free_len] = self.current
                self.free_len += 1
                self.current = -1
            self.current = self.find(self.tick_pop())
