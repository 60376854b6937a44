# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The link emulator's per-packet path, compiled (issue #36; benchmarks/README.md "The link emulator's
per-packet path compiled"): read the queued packets from the NFQUEUE socket, admit each to the delay line,
release the due ones and answer them, in one call per wake-up with no Python per packet.

`CompiledLine` is `genie.linkemu.line.DelayLine` (the reference, pure Python, which runs wherever this module is
not built or the config asks for it) with the stages' state and the heap as C arrays, and
`genie.linkemu.nfqueue`'s parsing and verdict packing in C. The random draws stay the reference's: a stage with
loss calls its Python loss model, a stage with jitter its Python delay draw (the same `genie.linkemu.line.Stage`
objects, so the same seeds give the same sequences); live overrides go through the reference's own
`DelayLine.apply_overrides` and are copied into the arrays. Everything else (serialization on a wire with its
slack, the delay, FIFO without reordering, the limit, chains and routes by source MAC, release order) is the
reference's arithmetic on int64 nanoseconds; tests/test_linkemu_compiled.py drives both with the same packets.
"""

from libc.errno cimport errno, EAGAIN, EINTR, ENOBUFS
from libc.stdint cimport int64_t, uint16_t, uint32_t, uint64_t, INT64_MAX
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, memset

from genie.linkemu.line import DelayLine, DropReason, Released, mac_bytes

include "nfqueue_messages.pxi"
include "wake_planner.pxi"

cdef extern from "<sys/socket.h>" nogil:
    ssize_t c_send "send" (int fd, const void *buf, size_t n, int flags)
    ssize_t c_recv "recv" (int fd, void *buf, size_t n, int flags)

# the wire's framing (genie/linkemu/line.py: TCP_IP_HEADER_BYTES, ETHERNET_HEADER_BYTES), what `admit` returns
# for a drop, and the read lags kept
cdef enum:
    TCP_IP_HEADER_BYTES = 52
    ETHERNET_HEADER_BYTES = 14
    LOSS = -1
    LIMIT = -2
    LAG_SAMPLES = 4096


cdef struct Held:
    int64_t release_ns
    int64_t order
    int64_t length_bytes
    uint32_t packet_id
    int queue_num
    int chain


cdef inline int64_t _segments(int64_t length_bytes, int64_t mtu_bytes) noexcept nogil:
    cdef int64_t count = (length_bytes + mtu_bytes - 1) // mtu_bytes if length_bytes > 0 else 0
    return count if count > 1 else 1


cdef inline int64_t _wire_segments(int64_t length_bytes, int64_t mtu_bytes) noexcept nogil:
    cdef int64_t payload = length_bytes - TCP_IP_HEADER_BYTES
    cdef int64_t per = mtu_bytes - TCP_IP_HEADER_BYTES
    if payload < 0:
        payload = 0
    cdef int64_t count = (payload + per - 1) // per
    return count if count > 1 else 1


cdef inline int64_t _max(int64_t a, int64_t b) noexcept nogil:
    return a if a > b else b


cdef class CompiledLine:
    """A `DelayLine` with the per-packet work in C (see the module's docstring). The same interface for tests
    (`admit`, `due`, `drain`, `next_release_ns`, `len`, `apply_overrides`, `counters`, `passed_through`), plus
    the emulator's cycle: `read_admit` (every queued packet, from a non-blocking netlink socket) and `release`
    (the due packets, answered together with the drops in batched verdicts)."""

    cdef object _reference  # the pure DelayLine: its Stage objects draw the random numbers and take overrides
    cdef list _stage_objects
    cdef int stage_count
    cdef int64_t *delay_ns
    cdef int64_t *jitter_ns
    cdef char *reorder
    cdef int64_t *limit_packets
    cdef int64_t *mtu_bytes
    cdef int64_t *rate_bps
    cdef int64_t *slack_ns
    cdef char *lossy
    cdef int64_t *held
    cdef int64_t *last_exit_ns
    cdef int64_t *free_ns
    cdef int64_t *packets
    cdef int64_t *lost
    cdef int64_t *overflow
    # chains: chain i is stages chain_stages[chain_start[i] : chain_start[i] + chain_length[i]]
    cdef int chain_count
    cdef int *chain_start
    cdef int *chain_length
    cdef int *chain_stages
    cdef int route_count
    cdef int *route_queue
    cdef int *route_mac_length
    cdef unsigned char *route_mac  # 8 bytes each
    cdef int *route_chain
    cdef int default_count
    cdef int *default_queue
    cdef int *default_chain
    cdef int empty_chain
    # the heap
    cdef Held *heap
    cdef Py_ssize_t heap_size
    cdef Py_ssize_t heap_capacity
    cdef int64_t order
    cdef readonly int64_t passed_through
    # the cycle
    cdef unsigned char *buffer
    cdef unsigned char *out
    cdef Py_ssize_t out_count
    cdef public uint32_t seq
    cdef readonly int64_t errors
    cdef readonly int64_t overflows
    cdef readonly int64_t accepted
    cdef readonly int64_t dropped
    cdef readonly int64_t first_lag_ns
    cdef int64_t *lags
    cdef int64_t lag_count
    cdef int64_t *lates
    cdef int64_t late_count
    cdef readonly int64_t late_ns_max
    cdef readonly int64_t cycles  # wake-ups of `run` (select or not): the loop never spins

    def __init__(self, config):
        cdef int i, j, position
        self._reference = DelayLine(config)
        self._stage_objects = list(self._reference.stages)
        n = len(self._stage_objects)
        self.stage_count = n
        arrays = n if n > 0 else 1
        self.delay_ns = <int64_t *> self._alloc(arrays * sizeof(int64_t))
        self.jitter_ns = <int64_t *> self._alloc(arrays * sizeof(int64_t))
        self.reorder = <char *> self._alloc(arrays)
        self.limit_packets = <int64_t *> self._alloc(arrays * sizeof(int64_t))
        self.mtu_bytes = <int64_t *> self._alloc(arrays * sizeof(int64_t))
        self.rate_bps = <int64_t *> self._alloc(arrays * sizeof(int64_t))
        self.slack_ns = <int64_t *> self._alloc(arrays * sizeof(int64_t))
        self.lossy = <char *> self._alloc(arrays)
        self.held = <int64_t *> self._alloc(arrays * sizeof(int64_t))
        self.last_exit_ns = <int64_t *> self._alloc(arrays * sizeof(int64_t))
        self.free_ns = <int64_t *> self._alloc(arrays * sizeof(int64_t))
        self.packets = <int64_t *> self._alloc(arrays * sizeof(int64_t))
        self.lost = <int64_t *> self._alloc(arrays * sizeof(int64_t))
        self.overflow = <int64_t *> self._alloc(arrays * sizeof(int64_t))
        self._copy_specs()
        chains = [()]  # chain 0: the empty one
        routes = []
        defaults = []
        for queue in config.queues:
            chains.append(tuple(queue.default_chain))
            defaults.append((queue.queue_num, len(chains) - 1))
            for route in queue.routes:
                chains.append(tuple(route.chain))
                routes.append((queue.queue_num, mac_bytes(route.mac), len(chains) - 1))
        self.empty_chain = 0
        self.chain_count = len(chains)
        self.chain_start = <int *> self._alloc(len(chains) * sizeof(int))
        self.chain_length = <int *> self._alloc(len(chains) * sizeof(int))
        self.chain_stages = <int *> self._alloc((sum(len(c) for c in chains) + 1) * sizeof(int))
        position = 0
        for i, chain in enumerate(chains):
            self.chain_start[i] = position
            self.chain_length[i] = len(chain)
            for j in chain:
                if not 0 <= j < n:
                    raise IndexError(f"stage {j} of a chain is not among the {n} stages")
                self.chain_stages[position] = j
                position += 1
        self.route_count = len(routes)
        self.route_queue = <int *> self._alloc((len(routes) + 1) * sizeof(int))
        self.route_mac_length = <int *> self._alloc((len(routes) + 1) * sizeof(int))
        self.route_mac = <unsigned char *> self._alloc((len(routes) + 1) * 8)
        self.route_chain = <int *> self._alloc((len(routes) + 1) * sizeof(int))
        for i, (queue_num, mac, chain_index) in enumerate(routes):
            self.route_queue[i] = queue_num
            self.route_mac_length[i] = len(mac)
            if len(mac) > 8:
                raise ValueError(f"a route's MAC has {len(mac)} bytes (at most 8)")
            for j in range(len(mac)):
                self.route_mac[i * 8 + j] = mac[j]
            self.route_chain[i] = chain_index
        self.default_count = len(defaults)
        self.default_queue = <int *> self._alloc((len(defaults) + 1) * sizeof(int))
        self.default_chain = <int *> self._alloc((len(defaults) + 1) * sizeof(int))
        for i, (queue_num, chain_index) in enumerate(defaults):
            self.default_queue[i] = queue_num
            self.default_chain[i] = chain_index
        self.heap_capacity = 1024
        self.heap = <Held *> self._alloc(self.heap_capacity * sizeof(Held))
        self.buffer = <unsigned char *> self._alloc(BUFFER_BYTES)
        self.out = <unsigned char *> self._alloc(MAX_VERDICTS_PER_SEND * VERDICT_BYTES)
        self.lags = <int64_t *> self._alloc(LAG_SAMPLES * sizeof(int64_t))
        self.lates = <int64_t *> self._alloc(LATE_SAMPLES * sizeof(int64_t))
        self.first_lag_ns = -1

    cdef void *_alloc(self, size_t size) except NULL:
        cdef void *memory = malloc(size if size > 0 else 1)
        if memory == NULL:
            raise MemoryError()
        memset(memory, 0, size if size > 0 else 1)
        return memory

    def __dealloc__(self):  # free(NULL) is a no-op: a failed __init__ leaves NULLs
        free(self.delay_ns); free(self.jitter_ns); free(self.reorder); free(self.limit_packets)
        free(self.mtu_bytes); free(self.rate_bps); free(self.slack_ns); free(self.lossy)
        free(self.held); free(self.last_exit_ns); free(self.free_ns); free(self.packets)
        free(self.lost); free(self.overflow); free(self.chain_start); free(self.chain_length)
        free(self.chain_stages); free(self.route_queue); free(self.route_mac_length); free(self.route_mac)
        free(self.route_chain); free(self.default_queue); free(self.default_chain); free(self.heap)
        free(self.buffer); free(self.out); free(self.lags); free(self.lates)

    cdef void _copy_specs(self):
        cdef int i
        for i in range(self.stage_count):
            spec = self._stage_objects[i].spec
            self.delay_ns[i] = spec.delay_ns
            self.jitter_ns[i] = spec.jitter_ns
            self.reorder[i] = bool(spec.reorder)
            self.limit_packets[i] = spec.limit_packets
            self.mtu_bytes[i] = spec.mtu_bytes
            self.rate_bps[i] = spec.rate_bps or 0
            self.slack_ns[i] = spec.wire_slack_ns
            self.lossy[i] = spec.loss_pct > 0  # a loss model with no loss draws nothing (line.loss_model)

    cdef int _chain(self, int queue_num, int mac_length, const unsigned char *mac) noexcept:
        """The reference's `DelayLine.chain`: the route of (queue, MAC), else the queue's default (the last
        one configured wins, as in the reference's dicts), else the empty chain."""
        cdef int i, j
        if mac_length >= 0:
            for i in range(self.route_count - 1, -1, -1):
                if self.route_queue[i] != queue_num or self.route_mac_length[i] != mac_length:
                    continue
                for j in range(mac_length):
                    if self.route_mac[i * 8 + j] != mac[j]:
                        break
                else:
                    return self.route_chain[i]
        for i in range(self.default_count - 1, -1, -1):
            if self.default_queue[i] == queue_num:
                return self.default_chain[i]
        return self.empty_chain

    cdef int64_t _admit(self, int queue_num, uint32_t packet_id, int64_t arrival_ns, int64_t length_bytes,
                        int chain) except? -3:
        """The release time, or LOSS / LIMIT (the reference's `DelayLine.admit`)."""
        cdef int start = self.chain_start[chain], count = self.chain_length[chain]
        cdef int k, s
        cdef int64_t first, last, segments, total_ns, segment_ns, slack, begin, wire_end, delay, exit_ns, wires
        for k in range(count):
            s = self.chain_stages[start + k]
            if self.lossy[s] and self._stage_objects[s].loss.lost():
                self.lost[s] += 1
                return LOSS
            if self.held[s] + _segments(length_bytes, self.mtu_bytes[s]) > self.limit_packets[s]:
                self.overflow[s] += 1
                return LIMIT
        first = last = arrival_ns
        for k in range(count):
            s = self.chain_stages[start + k]
            self.packets[s] += 1
            self.held[s] += _segments(length_bytes, self.mtu_bytes[s])
            if self.rate_bps[s]:  # the reference's Stage.pass_ns
                wires = _wire_segments(length_bytes, self.mtu_bytes[s])
                total_ns = length_bytes + (wires - 1) * TCP_IP_HEADER_BYTES + wires * ETHERNET_HEADER_BYTES
                total_ns = (total_ns * 8000000000 + self.rate_bps[s] - 1) // self.rate_bps[s]
                segment_ns = total_ns // wires
                slack = self.slack_ns[s] if k == 0 else 0
                begin = _max(first - slack, self.free_ns[s])
                wire_end = _max(begin + total_ns, last - slack + segment_ns)
                self.free_ns[s] = wire_end
                if k == 0:
                    first = _max(begin + segment_ns, first)
                    last = _max(wire_end, last)
                else:
                    first = begin + segment_ns
                    last = wire_end
            if self.jitter_ns[s]:
                delay = self._stage_objects[s].delay_ns()
            else:
                delay = self.delay_ns[s]
            exit_ns = last + delay
            if self.jitter_ns[s] and not self.reorder[s]:
                exit_ns = _max(exit_ns, self.last_exit_ns[s])
            self.last_exit_ns[s] = _max(self.last_exit_ns[s], exit_ns)
            first = first + (exit_ns - last)
            last = exit_ns
        if count == 0:
            self.passed_through += 1
        self._push(last, queue_num, packet_id, length_bytes, chain)
        return last

    cdef int _push(self, int64_t release_ns, int queue_num, uint32_t packet_id, int64_t length_bytes,
                   int chain) except -1:
        cdef Py_ssize_t i, parent
        cdef Held item
        if self.heap_size == self.heap_capacity:
            grown = <Held *> realloc(self.heap, 2 * self.heap_capacity * sizeof(Held))
            if grown == NULL:
                raise MemoryError()
            self.heap = grown
            self.heap_capacity *= 2
        item.release_ns, item.order, item.length_bytes = release_ns, self.order, length_bytes
        item.packet_id, item.queue_num, item.chain = packet_id, queue_num, chain
        self.order += 1
        i = self.heap_size
        self.heap_size += 1
        while i > 0:
            parent = (i - 1) >> 1
            if not _before(&item, &self.heap[parent]):
                break
            self.heap[i] = self.heap[parent]
            i = parent
        self.heap[i] = item
        return 0

    cdef Held _pop(self) noexcept:
        cdef Held top = self.heap[0]
        cdef Held last
        cdef Py_ssize_t i = 0, child
        self.heap_size -= 1
        if self.heap_size > 0:
            last = self.heap[self.heap_size]
            while True:
                child = 2 * i + 1
                if child >= self.heap_size:
                    break
                if child + 1 < self.heap_size and _before(&self.heap[child + 1], &self.heap[child]):
                    child += 1
                if not _before(&self.heap[child], &last):
                    break
                self.heap[i] = self.heap[child]
                i = child
            self.heap[i] = last
        cdef int start = self.chain_start[top.chain], k, s
        for k in range(self.chain_length[top.chain]):
            s = self.chain_stages[start + k]
            self.held[s] -= _segments(top.length_bytes, self.mtu_bytes[s])
        return top

    # ---- the reference's interface (tests; see DelayLine) ---------------------------------------------------
    def admit(self, int queue_num, packet_id, int64_t arrival_ns, int64_t length_bytes, mac=None):
        cdef bytes key = b"" if mac is None else bytes(mac)
        cdef const unsigned char *address = key
        chain = self._chain(queue_num, -1 if mac is None else len(key), address)
        fate = self._admit(queue_num, packet_id, arrival_ns, length_bytes, chain)
        if fate == LOSS:
            return DropReason.LOSS
        if fate == LIMIT:
            return DropReason.LIMIT
        return fate

    def next_release_ns(self):
        return self.heap[0].release_ns if self.heap_size else None

    def __len__(self):
        return self.heap_size

    def due(self, int64_t now_ns):
        out = []
        cdef Held item
        while self.heap_size and self.heap[0].release_ns <= now_ns:
            item = self._pop()
            out.append(Released(item.queue_num, item.packet_id))
        return out

    def drain(self):
        return self.due(INT64_MAX)

    def apply_overrides(self, overrides):
        self._reference.apply_overrides(overrides)
        self._copy_specs()

    def counters(self):
        cdef int i
        return {self._stage_objects[i].spec.name: {"packets": self.packets[i], "lost": self.lost[i],
                                                  "overflow": self.overflow[i], "held_segments": self.held[i]}
                for i in range(self.stage_count)}

    def lag_samples(self):
        """The last (up to 4096) read lags, in ns: reading time less the kernel's stamp, per stamped packet."""
        cdef int64_t count = self.lag_count if self.lag_count < LAG_SAMPLES else LAG_SAMPLES
        return [self.lags[i % LAG_SAMPLES] for i in range(self.lag_count - count, self.lag_count)]

    # ---- the emulator's cycle ---------------------------------------------------------------------------------
    def read_admit(self, int fd, int64_t now_mono_ns, int64_t realtime_offset_ns, int max_datagrams=256):
        """The reference's `NfQueue.read` then `Emulator._admit` (see `_read_admit`)."""
        return self._read_admit(fd, now_mono_ns, realtime_offset_ns, max_datagrams)

    cdef int _read_admit(self, int fd, int64_t now_mono_ns, int64_t realtime_offset_ns, int max_datagrams) except -1:
        """Read every packet queued on the non-blocking netlink socket `fd` (at most `max_datagrams`
        datagrams) and admit it, arriving at its kernel stamp (CLOCK_REALTIME less `realtime_offset_ns`, no
        later than `now_mono_ns`) or at `now_mono_ns`; drops are answered by the next `release`. Returns the
        packets read; `first_lag_ns` is the first stamped packet's read lag (-1: none)."""
        cdef int datagram, chain
        cdef ssize_t size
        cdef Py_ssize_t offset
        cdef uint32_t length
        cdef uint16_t msg_type
        cdef int64_t arrival, lag, fate
        cdef QueuedPacket packet
        cdef int read = 0
        self.first_lag_ns = -1
        for datagram in range(max_datagrams):
            size = c_recv(fd, self.buffer, BUFFER_BYTES, 0)
            if size < 0:
                if errno == EINTR:
                    continue
                if errno == EAGAIN:
                    break
                if errno == ENOBUFS:
                    self.overflows += 1
                    continue
                raise OSError(errno, "nfqueue read")
            offset = 0
            while offset + NLMSG_BYTES <= size:
                memcpy(&length, self.buffer + offset, 4)
                memcpy(&msg_type, self.buffer + offset + 4, 2)
                if length < NLMSG_BYTES or length > size - offset:  # NLMSG_OK: no header, or past what was read
                    break
                if msg_type == NLMSG_ERROR:
                    self.errors += 1
                elif msg_type == PACKET_TYPE and length >= NLMSG_BYTES + NFGEN_BYTES:
                    _parse_packet(self.buffer, offset, offset + length, &packet)
                    arrival = now_mono_ns
                    if packet.has_stamp:
                        if packet.stamp_ns - realtime_offset_ns < now_mono_ns:
                            arrival = packet.stamp_ns - realtime_offset_ns
                        lag = now_mono_ns - arrival
                        self.lags[self.lag_count % LAG_SAMPLES] = lag
                        self.lag_count += 1
                        if self.first_lag_ns < 0:
                            self.first_lag_ns = lag
                    chain = self._chain(packet.queue_num, packet.mac_length, packet.mac)
                    fate = self._admit(packet.queue_num, packet.packet_id, arrival, packet.length_bytes, chain)
                    read += 1
                    if fate < 0:
                        self.dropped += 1
                        self._verdict(fd, packet.queue_num, packet.packet_id, False)
                offset += (<Py_ssize_t> length + 3) & ~(<Py_ssize_t> 3)  # (in 64 bits: a uint32 near 2**32 wraps to 0)
        return read

    def release(self, int fd, int64_t horizon_ns):
        return self._release(fd, horizon_ns)

    cdef int _release(self, int fd, int64_t horizon_ns) except -1:
        """Release every packet due up to `horizon_ns` and send the verdicts pending (drops first, in the order
        decided, then the releases in release order; 512 per datagram). Returns the packets released."""
        cdef Held item
        cdef int released = 0
        while self.heap_size and self.heap[0].release_ns <= horizon_ns:
            item = self._pop()
            self._verdict(fd, item.queue_num, item.packet_id, True)
            released += 1
        self.accepted += released
        self._flush(fd)
        return released

    def run(self, int fd, int wake_fd, CompiledPlanner planner, int64_t until_ns):
        """The reference's `Emulator._loop` until `until_ns` (monotonic; the next statistics) or a signal's
        wake-up byte on `wake_fd` (-1: none): sleep in select() until the margin before the next release target
        or a packet arrives, read and admit, release what is due, learn the margin and the wake-up lag. Returns
        UNTIL or SIGNALLED (Python then runs the signal handlers, writes statistics, calls again)."""
        return _run(self, fd, wake_fd, planner, until_ns)

    def late_samples(self):
        """The last (up to 4096) release latenesses of `run`, in ns."""
        cdef int64_t count = self.late_count if self.late_count < LATE_SAMPLES else LATE_SAMPLES
        return [self.lates[i % LATE_SAMPLES] for i in range(self.late_count - count, self.late_count)]

    cdef int _verdict(self, int fd, int queue_num, uint32_t packet_id, bint accept) except -1:
        self.seq += 1
        _pack_verdict(self.out + self.out_count * VERDICT_BYTES, self.seq, queue_num, packet_id, accept)
        self.out_count += 1
        if self.out_count == MAX_VERDICTS_PER_SEND:
            self._flush(fd)
        return 0

    cdef int _flush(self, int fd) except -1:
        cdef ssize_t sent
        if self.out_count == 0:
            return 0
        while True:  # the reference's NfQueue._send: the kernel takes verdicts synchronously, a retry is rare
            sent = c_send(fd, self.out, self.out_count * VERDICT_BYTES, 0)
            if sent >= 0:
                break
            if errno != EAGAIN and errno != EINTR:
                self.out_count = 0
                raise OSError(errno, "nfqueue verdict")
        self.out_count = 0
        return 0


cdef inline bint _before(const Held *a, const Held *b) noexcept nogil:
    return a.release_ns < b.release_ns or (a.release_ns == b.release_ns and a.order < b.order)


include "emulator_loop.pxi"
