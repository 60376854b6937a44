# The live phases' members and the message boxes of the compiled loop (included by aware_core.pyx).


cdef struct Entry:
    int64_t frm
    int64_t size
    int64_t balance     # > 0 messages arrived and not received; < 0 receives posted (by ``waiter``)
    int64_t waiter


cdef class _Box:
    """The messages of one stream key to one rank: (source, size) -> balance (the reference's ``arrived`` and
    ``waiting`` deques, which only ever hold arrival ticks nobody reads and one member)."""

    cdef Entry *entries
    cdef int count, cap

    def __cinit__(self):
        self.cap = 4
        self.count = 0
        self.entries = <Entry *> malloc(self.cap * sizeof(Entry))
        if self.entries == NULL:
            raise MemoryError()

    def __dealloc__(self):
        free(self.entries)

    cdef Entry *find(self, int64_t frm, int64_t size) except? NULL:
        cdef int i
        for i in range(self.count):
            if self.entries[i].frm == frm and self.entries[i].size == size:
                return &self.entries[i]
        if self.count == self.cap:
            self.cap *= 2
            self.entries = <Entry *> realloc(self.entries, self.cap * sizeof(Entry))
            if self.entries == NULL:
                raise MemoryError()
        i = self.count
        self.count += 1
        self.entries[i].frm = frm
        self.entries[i].size = size
        self.entries[i].balance = 0
        self.entries[i].waiter = -1
        return &self.entries[i]

    cdef void drop(self, Entry *e) noexcept:
        cdef int i = e - self.entries
        self.count -= 1
        if i != self.count:
            self.entries[i] = self.entries[self.count]


cdef class _Member:
    """One member of a live ring-family phase (:class:`~astra_adapter.phase_sim.RingFamily`), with its
    context (rank, stream, stream key, bus delay)."""

    cdef int fam, comm, local
    cdef int64_t *members
    cdef int64_t n, index, rank, parallel, stream_count, sends, msg_size, receiver, sender
    cdef int64_t non_zero_total, middle, zero, non_zero, free, received, rank_offset
    cdef double multiplier
    cdef bint toggle, done
    cdef int64_t *pk_dst
    cdef int64_t *pk_src
    cdef int64_t *pk_size
    cdef int64_t pk_head, pk_count, pk_cap
    cdef object stream
    cdef int64_t key, bus_ns, id, ctx_rank, last_to
    cdef _Box own_box, last_box  # where its receives are matched; where its last message went

    def __dealloc__(self):
        free(self.members)
        free(self.pk_dst)
        free(self.pk_src)
        free(self.pk_size)

    cdef int push_packet(self, int64_t dst, int64_t src, int64_t size) except -1:
        cdef int64_t i, j, cap
        if self.pk_count == self.pk_cap:
            cap = self.pk_cap * 2 if self.pk_cap else 8
            nd = <int64_t *> malloc(cap * sizeof(int64_t))
            ns = <int64_t *> malloc(cap * sizeof(int64_t))
            nz = <int64_t *> malloc(cap * sizeof(int64_t))
            if nd == NULL or ns == NULL or nz == NULL:
                raise MemoryError()
            for i in range(self.pk_count):
                j = (self.pk_head + i) % self.pk_cap
                nd[i], ns[i], nz[i] = self.pk_dst[j], self.pk_src[j], self.pk_size[j]
            free(self.pk_dst)
            free(self.pk_src)
            free(self.pk_size)
            self.pk_dst, self.pk_src, self.pk_size = nd, ns, nz
            self.pk_head, self.pk_cap = 0, cap
        j = (self.pk_head + self.pk_count) % self.pk_cap
        self.pk_dst[j], self.pk_src[j], self.pk_size[j] = dst, src, size
        self.pk_count += 1
        return 0

    cdef void hd_peer(self) noexcept:
        cdef int64_t offset = self.rank_offset, step
        cdef bint clockwise = offset == 0 or _floordiv(self.index, offset) % 2 == 0
        step = offset if clockwise else -offset
        self.receiver = self.sender = _mod(self.index + step, self.n)

    cdef void advance(self) noexcept:
        cdef int64_t r, s
        if self.fam == FAM_DIRECT:
            r = (self.receiver + 1) % self.n
            if r == self.index:
                r = (r + 1) % self.n
            s = _mod(self.sender - 1, self.n)
            if s == self.index:
                s = _mod(s - 1, self.n)
            self.receiver, self.sender = r, s
        elif self.fam == FAM_HD:
            self.rank_offset = <int64_t> (self.rank_offset * self.multiplier)
            self.msg_size = <int64_t> (self.msg_size / self.multiplier)
            if self.rank_offset == self.n and self.comm == C_AR:
                self.multiplier = 0.5
                self.rank_offset = <int64_t> (self.rank_offset * 0.5)
                self.msg_size = <int64_t> (self.msg_size / 0.5)
            self.hd_peer()


cdef inline int64_t _mod(int64_t a, int64_t n) noexcept:
    cdef int64_t r = a % n
    return r + n if r < 0 else r


cdef inline int64_t _floordiv(int64_t a, int64_t b) noexcept:
    cdef int64_t q = a // b
    return q
