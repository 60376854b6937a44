# NFQUEUE's netlink messages, compiled (included by line_core.pyx): the reference is genie/linkemu/nfqueue.py's
# `_parse_packet` and `NfQueue.verdicts` (the same constants, fields and byte order).

cdef extern from "<arpa/inet.h>" nogil:
    uint16_t ntohs(uint16_t)
    uint32_t ntohl(uint32_t)
    uint16_t htons(uint16_t)
    uint32_t htonl(uint32_t)

cdef extern from "<endian.h>" nogil:
    uint64_t be64toh(uint64_t)

cdef enum:
    NLMSG_BYTES = 16
    NFGEN_BYTES = 4
    NLA_BYTES = 4
    NLMSG_ERROR = 2
    PACKET_TYPE = (3 << 8) | 0
    VERDICT_TYPE = (3 << 8) | 1
    NLM_F_REQUEST = 1
    NLA_TYPE_MASK = 0x3FFF
    NFQA_PACKET_HDR = 1
    NFQA_VERDICT_HDR = 2
    NFQA_TIMESTAMP = 4
    NFQA_HWADDR = 9
    NFQA_PAYLOAD = 10
    NFQA_CAP_LEN = 13
    VERDICT_BYTES = 32
    MAX_VERDICTS_PER_SEND = 512
    BUFFER_BYTES = 1 << 17


cdef struct QueuedPacket:  # the reference's QueuedPacket
    int queue_num
    uint32_t packet_id
    int64_t length_bytes  # NFQA_CAP_LEN, else the payload copied
    int mac_length  # -1: no NFQA_HWADDR
    const unsigned char *mac  # into the read buffer
    bint has_stamp
    int64_t stamp_ns  # CLOCK_REALTIME


cdef void _parse_packet(const unsigned char *buffer, Py_ssize_t offset, Py_ssize_t end,
                        QueuedPacket *packet) noexcept nogil:
    """The packet message at `offset` (its end, clipped to what was read, at `end`)."""
    cdef uint16_t u16
    cdef uint32_t u32
    cdef uint64_t seconds, micros
    cdef int attr_length, attr_type
    cdef Py_ssize_t position, data
    cdef int64_t payload_length = 0, cap_length = 0
    cdef bint has_cap = False
    memcpy(&u16, buffer + offset + NLMSG_BYTES + 2, 2)
    packet.queue_num = ntohs(u16)
    packet.packet_id = 0
    packet.mac_length = -1
    packet.mac = NULL
    packet.has_stamp = False
    packet.stamp_ns = 0
    position = offset + NLMSG_BYTES + NFGEN_BYTES
    while position + NLA_BYTES <= end:
        memcpy(&u16, buffer + position, 2)
        attr_length = u16
        if attr_length < NLA_BYTES:
            break
        memcpy(&u16, buffer + position + 2, 2)
        attr_type = u16 & NLA_TYPE_MASK
        data = position + NLA_BYTES
        if attr_type == NFQA_PACKET_HDR and data + 4 <= end:
            memcpy(&u32, buffer + data, 4)
            packet.packet_id = ntohl(u32)
        elif attr_type == NFQA_PAYLOAD:
            payload_length = attr_length - NLA_BYTES
        elif attr_type == NFQA_CAP_LEN and data + 4 <= end:
            memcpy(&u32, buffer + data, 4)
            cap_length = ntohl(u32)
            has_cap = True
        elif attr_type == NFQA_HWADDR and data + 2 <= end:
            memcpy(&u16, buffer + data, 2)
            packet.mac_length = ntohs(u16) if ntohs(u16) < 8 else 8
            if data + 4 + packet.mac_length > end:
                packet.mac_length = <int> (end - data - 4) if end - data - 4 > 0 else 0
            packet.mac = buffer + data + 4
        elif attr_type == NFQA_TIMESTAMP and data + 16 <= end:
            memcpy(&seconds, buffer + data, 8)
            memcpy(&micros, buffer + data + 8, 8)
            packet.stamp_ns = <int64_t> be64toh(seconds) * 1000000000 + <int64_t> be64toh(micros) * 1000
            packet.has_stamp = True
        position += (attr_length + 3) & ~3
    packet.length_bytes = cap_length if has_cap else payload_length


cdef void _pack_verdict(unsigned char *message, uint32_t seq, int queue_num, uint32_t packet_id,
                        bint accept) noexcept nogil:
    """One verdict message (32 bytes: nlmsghdr, nfgenmsg, NFQA_VERDICT_HDR), as the reference packs it."""
    cdef uint32_t u32
    cdef uint16_t u16
    u32 = VERDICT_BYTES; memcpy(message, &u32, 4)
    u16 = VERDICT_TYPE; memcpy(message + 4, &u16, 2)
    u16 = NLM_F_REQUEST; memcpy(message + 6, &u16, 2)
    memcpy(message + 8, &seq, 4)
    u32 = 0; memcpy(message + 12, &u32, 4)
    message[16] = 0  # AF_UNSPEC
    message[17] = 0  # version
    u16 = htons(<uint16_t> queue_num); memcpy(message + 18, &u16, 2)
    u16 = 12; memcpy(message + 20, &u16, 2)
    u16 = NFQA_VERDICT_HDR; memcpy(message + 22, &u16, 2)
    u32 = htonl(1 if accept else 0); memcpy(message + 24, &u32, 4)
    u32 = htonl(packet_id); memcpy(message + 28, &u32, 4)
