# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The congestion-aware backend's hot loop, compiled: one event queue, the link network and the live
ring-family phases (``ring``, ``direct``, ``halvingDoubling`` and their ``one*`` forms).

This is a port, event for event, of the pure Python reference - :class:`~astra_adapter.links.LinkNetwork`,
:class:`~astra_adapter.live_phases.LivePhases` and :class:`~astra_adapter.phase_sim.RingFamily` driven by
:meth:`~astra_adapter.engine.Engine.run`'s heap: every event is scheduled in the same order with the same tick,
so that same-tick events run in the same FIFO order and every result is identical. What it does not model
(a double-binary-tree phase, two phases of one stream waiting on one rank for the same message) raises
:class:`Unsupported` and the engine reruns the whole estimate on the reference path.

The engine's own events (compute ends, remote memory, calls) go into the same queue as opaque objects and come
back through ``dispatch(tick, event)``.
"""

from libc.stdlib cimport malloc, realloc, free
from libc.stdint cimport int32_t, int64_t

from genie.core.errors import GenieError

from astra_adapter.collective_plan import DIRECT_LIKE, HD_LIKE, CommKind
from astra_adapter.config import ImplKind, TopologyKind


class Unsupported(Exception):
    """The compiled loop does not model this run; the reference path does."""


# event kinds
cdef enum:
    EV_PY = 0
    EV_BUS = 1
    EV_REDUCED = 2
    EV_RECEIVED = 3
    EV_ARRIVED = 4
    EV_FREED = 5

# algorithm families and collectives
cdef enum:
    FAM_RING = 0
    FAM_DIRECT = 1
    FAM_HD = 2

cdef enum:
    C_AR = 0
    C_RS = 1
    C_AG = 2
    C_A2A = 3

# topologies
cdef enum:
    T_RING = 0
    T_SWITCH = 1
    T_FC = 2


cdef struct Event:
    int64_t t
    int64_t seq
    int32_t kind
    int32_t a
    int64_t b


cdef struct Chunk:
    int64_t size
    int64_t src
    int64_t dst
    int64_t hop
    int64_t hops
    int64_t step
    int64_t next        # next chunk in a link's queue, -1 at the tail
    int py              # 1: an engine message (on_arrival called with its object), 0: a phase's message
    int64_t key         # engine messages: object slot
    int64_t frm         # phase messages: matching source rank
    void *box           # phase messages: the receiver's _Box (borrowed: the core keeps every box)


include "aware_queue.pxi"
include "aware_members.pxi"


cdef class AwareCore:
    """The event queue, links and live phases of one congestion-aware run (see the module docstring).

    Duck-types :class:`~astra_adapter.links.LinkNetwork` (``send``) and :class:`~astra_adapter.live_phases.
    LivePhases` (``start``, ``started_phases``, ``waiting_description``)."""

    cdef _Queue queue
    cdef int64_t seq, cur_t, cur_seq  # cur: the event being run
    cdef Chunk *chunks
    cdef int64_t chunks_len, chunks_cap, chunk_free
    cdef int64_t *free_t      # per link: the tick and sequence number of its free event (ends its busy time)
    cdef int64_t *free_seq
    cdef char *freed_queued   # that event is in the queue (only when chunks wait: else nobody needs it)
    cdef int64_t *head
    cdef int64_t *tail
    cdef int64_t n, links_count
    cdef int topo
    cdef double latency_ns, bw
    cdef object local_mem_bw
    cdef int64_t endpoint_delay_ns, local_bus_ns, last_red_size, last_red
    cdef bint mirror
    cdef object phase_ended, dispatch_fn
    cdef list objs, free_objs, members
    cdef dict boxes, key_ids, reductions
    cdef public int64_t started_phases

    def __cinit__(self):
        self.chunks = NULL
        self.free_t = NULL
        self.free_seq = NULL
        self.freed_queued = NULL
        self.head = NULL
        self.tail = NULL

    def __init__(self, links, env, phase_ended, mirror=False):
        """``links``: the :class:`~astra_adapter.links.LinkNetwork` to follow (kind, NPUs, latency, bandwidth);
        ``env``: the :class:`~astra_adapter.phase_sim.PhaseEnv`; ``phase_ended(tick, rank, stream)``."""
        cdef int64_t i
        self.n = links.npus_count
        kind = links.kind
        if kind is TopologyKind.RING:
            self.topo, self.links_count = T_RING, 2 * self.n
        elif kind is TopologyKind.SWITCH:
            self.topo, self.links_count = T_SWITCH, 2 * self.n
        elif kind is TopologyKind.FULLY_CONNECTED:
            self.topo, self.links_count = T_FC, self.n * self.n
        else:
            raise Unsupported(f"topology {kind}")
        self.latency_ns, self.bw = links.latency_ns, links.bw_bytes_per_ns
        self.endpoint_delay_ns, self.local_bus_ns = env.bus_delay_ns(False), env.bus_delay_ns(True)
        self.local_mem_bw = env.local_mem_bw_gb_per_s
        self.phase_ended, self.mirror = phase_ended, mirror
        self.queue = _Queue()
        self.chunks_cap = 1024
        self.chunks = <Chunk *> malloc(self.chunks_cap * sizeof(Chunk))
        self.free_t = <int64_t *> malloc(self.links_count * sizeof(int64_t))
        self.free_seq = <int64_t *> malloc(self.links_count * sizeof(int64_t))
        self.freed_queued = <char *> malloc(self.links_count * sizeof(char))
        self.head = <int64_t *> malloc(self.links_count * sizeof(int64_t))
        self.tail = <int64_t *> malloc(self.links_count * sizeof(int64_t))
        if self.chunks == NULL or self.free_t == NULL or self.free_seq == NULL or \
                self.freed_queued == NULL or self.head == NULL or self.tail == NULL:
            raise MemoryError()
        for i in range(self.links_count):
            self.free_t[i], self.free_seq[i], self.freed_queued[i], self.head[i], self.tail[i] = -1, -1, 0, -1, -1
        self.seq = self.chunks_len = 0
        self.cur_t = self.cur_seq = -1
        self.chunk_free = -1
        self.objs, self.free_objs, self.members = [], [], []
        self.boxes, self.key_ids, self.reductions = {}, {}, {}
        self.started_phases = 0
        self.last_red_size = -1

    def __dealloc__(self):
        free(self.chunks)
        free(self.free_t)
        free(self.free_seq)
        free(self.freed_queued)
        free(self.head)
        free(self.tail)

    # ---- the event queue: (tick, sequence) order, FIFO per tick ----------------------------------------------
    cdef int push(self, int64_t t, int kind, int64_t a, int64_t b) except -1:
        self.seq += 1
        return self.push_at(t, self.seq, kind, a, b)

    cdef int push_at(self, int64_t t, int64_t seq, int kind, int64_t a, int64_t b) except -1:
        if t < self.cur_t:
            raise Unsupported("an event scheduled in the past")
        return self.queue.push(t, seq, kind, a, b)

    cdef int64_t keep(self, obj) except -1:
        cdef int64_t slot
        if self.free_objs:
            slot = self.free_objs.pop()
            self.objs[slot] = obj
        else:
            slot = len(self.objs)
            self.objs.append(obj)
        return slot

    cdef object take(self, int64_t slot):
        obj = self.objs[slot]
        self.objs[slot] = None
        self.free_objs.append(slot)
        return obj

    def at(self, int64_t t, event):
        """Schedule one of the engine's events; ``run`` hands it to ``dispatch(t, event)``."""
        self.push(t, EV_PY, self.keep(event), 0)

    def run(self, dispatch):
        """Run every event in order; ``dispatch(tick, event)`` runs the engine's own ones."""
        cdef Event ev
        cdef _Member m
        cdef int64_t red
        while self.queue.length > 0:
            ev = self.queue.pop()
            self.cur_t, self.cur_seq = ev.t, ev.seq
            if ev.kind == EV_ARRIVED:
                self.arrived(ev.t, ev.a)
            elif ev.kind == EV_FREED:
                self.freed(ev.t, ev.a)
            elif ev.kind == EV_BUS:
                m = <_Member> self.members[ev.a]
                if ev.b < 0:
                    self.on_general(m, ev.t)
                else:
                    self.push(ev.t + self.reduction_ns(ev.b), EV_REDUCED, ev.a, 0)
            elif ev.kind == EV_REDUCED:
                self.on_general(<_Member> self.members[ev.a], ev.t)
            elif ev.kind == EV_RECEIVED:
                self.on_received(<_Member> self.members[ev.a], ev.t)
            else:
                dispatch(ev.t, self.take(ev.a))

    cdef int64_t reduction_ns(self, int64_t size) except -1:
        if size == self.last_red_size:
            return self.last_red
        red = self.reductions.get(size)
        if red is None:
            if self.local_mem_bw is None:
                red = 30
            else:
                red = 3 * int(size / self.local_mem_bw)
            self.reductions[size] = red
        self.last_red_size, self.last_red = size, red
        return red

    # ---- links ---------------------------------------------------------------------------------------------
    cdef int64_t new_chunk(self) except -1:
        cdef int64_t c
        if self.chunk_free >= 0:
            c = self.chunk_free
            self.chunk_free = self.chunks[c].next
            return c
        if self.chunks_len == self.chunks_cap:
            self.chunks_cap *= 2
            self.chunks = <Chunk *> realloc(self.chunks, self.chunks_cap * sizeof(Chunk))
            if self.chunks == NULL:
                raise MemoryError()
        c = self.chunks_len
        self.chunks_len += 1
        return c

    cdef int inject(self, int64_t t, int64_t src, int64_t dst, int64_t size, int py, int64_t key, int64_t frm,
                    void *box) except -1:
        cdef int64_t c = self.new_chunk(), clockwise, n = self.n
        cdef Chunk *ch = &self.chunks[c]
        ch.size, ch.src, ch.dst, ch.hop, ch.next = size, src, dst, 0, -1
        ch.py, ch.key, ch.frm, ch.box = py, key, frm, box
        if self.topo == T_RING:
            clockwise = _mod(dst - src, n)
            if n - clockwise < clockwise:
                ch.step, ch.hops = -1, n - clockwise
            else:
                ch.step, ch.hops = 1, clockwise
            if ch.hops == 0:
                raise Unsupported("a chunk to its own NPU")
        elif self.topo == T_SWITCH:
            ch.step, ch.hops = 0, 2
        else:
            if src == dst:
                raise Unsupported("a chunk to its own NPU")
            ch.step, ch.hops = 0, 1
        self.enter(t, c)
        return 0

    cdef inline int64_t link_of(self, Chunk *ch) noexcept:
        cdef int64_t cur
        if self.topo == T_RING:
            cur = _mod(ch.src + ch.step * ch.hop, self.n)
            return cur if ch.step == 1 else self.n + cur
        if self.topo == T_SWITCH:
            return ch.src if ch.hop == 0 else self.n + ch.dst
        return ch.src * self.n + ch.dst

    cdef int enter(self, int64_t t, int64_t c) except -1:
        cdef int64_t link = self.link_of(&self.chunks[c])
        # busy until its free event has run, i.e. while that event comes after the one being run
        if self.free_t[link] > self.cur_t or (self.free_t[link] == self.cur_t and
                                              self.free_seq[link] > self.cur_seq):
            self.chunks[c].next = -1
            if self.tail[link] < 0:
                self.head[link] = c
            else:
                self.chunks[self.tail[link]].next = c
            self.tail[link] = c
            self.queue_freed(link)
        else:
            self.transmit(t, link, c)
        return 0

    cdef int queue_freed(self, int64_t link) except -1:
        """Put the link's free event in the queue, with the sequence number it was given when scheduled."""
        if not self.freed_queued[link]:
            self.freed_queued[link] = 1
            self.push_at(self.free_t[link], self.free_seq[link], EV_FREED, link, 0)
        return 0

    cdef int transmit(self, int64_t t, int64_t link, int64_t c) except -1:
        cdef double ser = self.chunks[c].size / self.bw
        self.push(t + <int64_t> (self.latency_ns + ser), EV_ARRIVED, c, 0)
        # the free event, numbered now; it only enters the queue once a chunk waits for it (queue_freed)
        self.seq += 1
        self.free_t[link], self.free_seq[link], self.freed_queued[link] = t + <int64_t> ser, self.seq, 0
        return 0

    cdef int freed(self, int64_t t, int64_t link) except -1:
        cdef int64_t c
        self.freed_queued[link] = 0
        c = self.head[link]
        if c >= 0:
            self.head[link] = self.chunks[c].next
            if self.head[link] < 0:
                self.tail[link] = -1
            self.transmit(t, link, c)
            if self.head[link] >= 0:
                self.queue_freed(link)
        return 0

    cdef int arrived(self, int64_t t, int64_t c) except -1:
        cdef Chunk *ch = &self.chunks[c]
        cdef int64_t key, frm, size
        cdef int py
        cdef void *box
        ch.hop += 1
        if ch.hop < ch.hops:
            return self.enter(t, c)
        py, key, frm, box, size = ch.py, ch.key, ch.frm, ch.box, ch.size
        ch.next = self.chunk_free  # the chunk's slot is free again (ch may move: the table can grow below)
        self.chunk_free = c
        if py:
            on_arrival, argument = self.take(key)
            on_arrival(t, argument)
        else:
            self.message_arrived(t, <_Box> box, frm, size)
        return 0

    def send(self, int64_t t, int64_t src, int64_t dst, int64_t size, on_arrival, argument):
        """:meth:`LinkNetwork.send`: ``on_arrival(tick, argument)`` when the chunk reaches ``dst``."""
        self.inject(t, src, dst, size, 1, self.keep((on_arrival, argument)), 0, NULL)

    # ---- live phases ---------------------------------------------------------------------------------------
    def start(self, int64_t rank, stream, stream_key, spec, members, int64_t index, tree, int64_t t):
        """:meth:`LivePhases.start`: member ``index`` (rank ``rank``) starts ``spec`` at ``t``."""
        cdef _Member m = _Member()
        cdef int64_t n = len(members), i, data = spec.data_size_bytes, window, steps
        kind = spec.impl.kind
        if kind is ImplKind.DOUBLE_BINARY_TREE:
            raise Unsupported("doubleBinaryTree phases run on the reference path")
        self.started_phases += 1
        comm = spec.comm
        m.comm = (C_AR if comm is CommKind.ALL_REDUCE else C_RS if comm is CommKind.REDUCE_SCATTER else
                  C_AG if comm is CommKind.ALL_GATHER else C_A2A)
        m.fam = FAM_DIRECT if kind in DIRECT_LIKE else FAM_HD if kind in HD_LIKE else FAM_RING
        m.local = bool(spec.local)
        m.members = <int64_t *> malloc(n * sizeof(int64_t))
        if m.members == NULL:
            raise MemoryError()
        for i in range(n):
            m.members[i] = members[i]
        m.n, m.index, m.rank = n, index, members[index]
        m.parallel = 1
        m.stream_count = 2 * (n - 1) if m.comm == C_AR else ((n - 1) * n // 2 if m.comm == C_A2A else n - 1)
        m.msg_size = data if m.comm == C_AG else data // n
        m.receiver, m.sender = (index + 1) % n, _mod(index - 1, n)
        m.non_zero_total = m.middle = n - 1
        if m.fam == FAM_DIRECT:
            window = spec.impl.window
            m.parallel = n - 1 if window == -1 else min(window, n - 1)
            if m.comm == C_A2A:
                m.stream_count = n - 1
            m.non_zero_total = (n - 1) * m.parallel if m.local else m.parallel
        elif m.fam == FAM_HD:
            steps = (<object> n).bit_length() - 1
            m.stream_count = 2 * steps if m.comm == C_AR else steps
            m.non_zero_total = steps - 1
            if m.comm == C_AG:
                m.msg_size, m.rank_offset, m.multiplier = data, n // 2, 0.5
            else:
                m.msg_size, m.rank_offset, m.multiplier = data // 2, 1, 2.0
            m.hd_peer()
        m.sends = m.stream_count
        m.zero = m.non_zero = m.free = m.received = 0
        m.toggle = m.done = False
        m.pk_head = m.pk_count = m.pk_cap = 0
        m.stream, m.ctx_rank = stream, rank
        key = self.key_ids.get(stream_key)
        if key is None:
            key = self.key_ids[stream_key] = len(self.key_ids)
        m.key = key
        m.own_box = self.box(key, m.rank)
        m.last_to, m.last_box = -1, None
        m.bus_ns = self.local_bus_ns if spec.local else self.endpoint_delay_ns
        m.id = len(self.members)
        self.members.append(m)
        for i in range(m.parallel):
            self.insert(m, t)

    cdef int insert(self, _Member m, int64_t t) except -1:
        cdef bint processed
        if m.zero == 0 and m.non_zero == 0:
            m.zero, m.non_zero, m.toggle = m.parallel, m.non_zero_total, not m.toggle
        if m.zero > 0:
            processed = False
            m.zero -= 1
        elif m.non_zero > 0:
            processed = m.comm == C_RS or (m.comm == C_AR and m.toggle)
            m.non_zero -= 1
        else:
            raise GenieError("collective phase injected a packet it does not have (ASTRA-sim panics here)")
        m.push_packet(m.receiver, m.sender, m.msg_size)
        self.push(t + m.bus_ns, EV_BUS, m.id, m.msg_size if processed else -1)
        m.advance()
        return 0

    cdef int on_received(self, _Member m, int64_t t) except -1:
        m.received += 1
        return self.insert(m, t)

    cdef int on_general(self, _Member m, int64_t t) except -1:
        cdef int64_t i
        m.free += 1
        if m.fam == FAM_DIRECT and m.comm == C_AR and m.stream_count <= m.middle:
            if m.received < m.middle:
                return 0
            for i in range(m.parallel):
                self.ready(m, t)
        else:
            self.ready(m, t)
        if m.stream_count == 0 and m.free == m.parallel and not m.done:
            m.done = True
            self.phase_ended(t, m.ctx_rank, m.stream)
        return 0

    cdef int ready(self, _Member m, int64_t t) except -1:
        cdef int64_t dst, src, size, j
        if m.pk_count == 0 or m.stream_count == 0 or m.free == 0:
            return 0
        j = m.pk_head
        dst, src, size = m.pk_dst[j], m.pk_src[j], m.pk_size[j]
        m.pk_head = (j + 1) % m.pk_cap
        m.pk_count -= 1
        self.send_message(m, t, dst, size)
        self.post_recv(m, t, src, size)
        m.stream_count -= 1
        m.free -= 1
        return 0

    cdef int send_message(self, _Member m, int64_t t, int64_t dst, int64_t size) except -1:
        cdef int64_t src = m.rank, to = m.members[dst]
        if self.mirror:  # the message from the rank mirrored through the representative reaches it
            return self.inject(t, src, to, size, 0, 0, m.members[_mod(2 * m.index - dst, m.n)],
                               <void *> m.own_box)
        if to != m.last_to:
            m.last_to, m.last_box = to, self.box(m.key, to)
        return self.inject(t, src, to, size, 0, 0, src, <void *> m.last_box)

    cdef _Box box(self, int64_t key, int64_t to):
        cdef object k = key * (self.n + 1) + to
        box = self.boxes.get(k)
        if box is None:
            box = self.boxes[k] = _Box()
        return <_Box> box

    cdef int message_arrived(self, int64_t t, _Box box, int64_t frm, int64_t size) except -1:
        cdef Entry *e = box.find(frm, size)
        cdef int64_t waiter
        e.balance += 1
        if e.balance <= 0:
            waiter = e.waiter
            if e.balance == 0:
                box.drop(e)
            return self.on_received(<_Member> self.members[waiter], t)
        return 0

    cdef int post_recv(self, _Member m, int64_t t, int64_t src, int64_t size) except -1:
        cdef _Box box = m.own_box
        cdef Entry *e = box.find(m.members[src], size)
        if e.balance > 0:
            e.balance -= 1
            if e.balance == 0:
                box.drop(e)
            return self.push(t, EV_RECEIVED, m.id, 0)
        if e.balance < 0 and e.waiter != m.id:
            raise Unsupported("two members wait for one message")
        e.balance -= 1
        e.waiter = m.id
        return 0

    def waiting_description(self):
        """The deadlock detail; the reference path's words (the engine reruns there before reporting)."""
        cdef _Box box
        cdef int i
        for k, b in self.boxes.items():
            box = <_Box> b
            for i in range(box.count):
                if box.entries[i].balance < 0:
                    return (f"rank {k % (self.n + 1)} waits for a {box.entries[i].size}-byte collective message "
                            f"from rank {box.entries[i].frm}")
        return ""
