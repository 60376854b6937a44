"""The link emulator's compiled per-packet path (genie/linkemu/line_core.pyx) against the pure Python reference it
stands in for (genie.linkemu.line's DelayLine, nfqueue's parsing and verdicts, the emulator's admission): the same
packets give the same fates, release times, release order, counters and verdict datagrams, for every stage kind
(delay, jitter with and without reordering, independent and bursty loss, the limit, wires with slack, chains,
routes by source MAC, live overrides). An injected clock; netlink messages over socket pairs (no root)."""

from __future__ import annotations

import dataclasses
import os
import random
import socket
import struct
import time

import pytest

from genie.linkemu import emulator as emulator_module
from genie.linkemu.config import EmulatorConfig, QueueSpec, SourceRoute, StageSpec
from genie.linkemu.emulator import MAX_MARGIN_NS, Emulator, WakePlanner, delay_line
from genie.linkemu.line import DelayLine
from genie.linkemu.nfqueue import (_NFGEN, _NLMSG, _PACKET_TYPE, NFQA_CAP_LEN, NFQA_HWADDR, NFQA_PACKET_HDR,
                                   NFQA_PAYLOAD, NFQA_TIMESTAMP, NLMSG_ERROR, NfQueue, _attr)

CompiledLine, CompiledPlanner = emulator_module.CompiledLine, emulator_module.CompiledPlanner
if CompiledLine is not None:
    from genie.linkemu.line_core import SIGNALLED, UNTIL
pytestmark = pytest.mark.skipif(CompiledLine is None and not os.environ.get("CI"),
                                reason="genie.linkemu.line_core is not built (pip install -e . builds it)")

US, MS = 1_000, 1_000_000
MAC_A, MAC_B, MAC_C = bytes.fromhex("020000000001"), bytes.fromhex("020000000002"), bytes.fromhex("0200000000ff")


def test_ci_builds_the_compiled_line() -> None:
    """CI installs a compiler (scripts/setup.sh): there the compiled path must exist, not be skipped."""
    assert CompiledLine is not None


STAGES = (
    StageSpec("wire h0>s0", 20 * US, rate_bps=500_000_000, wire_slack_ns=100 * US, limit_packets=400, seed=1),
    StageSpec("wire s0>h1", 20 * US, rate_bps=400_000_000, limit_packets=300, seed=2),
    StageSpec("jitter fifo", 300 * US, jitter_ns=200 * US, loss_pct=3.0, seed=3),
    StageSpec("jitter reorder", 300 * US, jitter_ns=250 * US, reorder=True, loss_pct=5.0, loss_burst_packets=3.0,
              seed=4),
    StageSpec("tight limit", 2 * MS, limit_packets=60, mtu_bytes=9000, seed=5),
)
CONFIG = EmulatorConfig("genie-t-h1", STAGES, (
    QueueSpec(0, "eth0", default_chain=(2,), routes=(SourceRoute("02:00:00:00:00:01", "h0", (0, 1)),
                                                     SourceRoute("02:00:00:00:00:02", "h2", (3, 4)))),
    QueueSpec(1, "eth1", default_chain=(4, 0)),
))


def _arrivals(seed: int, count: int) -> list[tuple[int, int, int, int, bytes | None]]:
    """(queue, packet id, arrival ns, length, MAC): bursts of GSO and small packets on every route."""
    rng = random.Random(seed)
    t, out = 1_000 * MS, []
    for packet_id in range(count):
        t += rng.choice((0, 1 * US, 30 * US, 700 * US, 3 * MS))
        queue = rng.choice((0, 0, 0, 1, 7))  # 7: no queue spec (no stage: passed through)
        mac = rng.choice((MAC_A, MAC_B, MAC_C, None))
        length = rng.choice((52, 1500, 9000, 36_252, 65_160, rng.randrange(40, 65_536)))
        out.append((queue, packet_id + 1, t, length, mac))
    return out


def _drive(line: object, arrivals: list[tuple[int, int, int, int, bytes | None]],
           overrides: dict[int, dict[str, dict[str, object]]]) -> list[object]:
    """Admit every arrival, releasing what is due before each one; apply overrides at the given packet ids."""
    seen: list[object] = []
    for queue, packet_id, t, length, mac in arrivals:
        if packet_id in overrides:
            line.apply_overrides(overrides[packet_id])  # type: ignore[attr-defined]
        seen.append(("due", t, line.due(t)))  # type: ignore[attr-defined]
        seen.append(("next", line.next_release_ns(), len(line)))  # type: ignore[arg-type, attr-defined]
        seen.append(("fate", packet_id, line.admit(queue, packet_id, t, length, mac)))  # type: ignore[attr-defined]
    seen.append(("drain", line.drain()))  # type: ignore[attr-defined]
    seen.append(("end", line.counters(), line.passed_through, len(line)))  # type: ignore[attr-defined, arg-type]
    return seen


OVERRIDES = {
    400: {"wire h0>s0": {"rate_bps": 200_000_000}, "jitter fifo": {"delay_ns": 50 * US, "loss_pct": 20.0},
          "tight limit": {"limit_packets": 20}},
    900: {"jitter reorder": {"jitter_ns": 0, "loss_pct": 0.0}, "wire s0>h1": {"delay_ns": 5 * MS}},
    1400: {},  # back to the configuration
}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_stage_kind_gives_the_reference_fates_release_times_and_order(seed: int) -> None:
    arrivals = _arrivals(seed, 2000)
    reference = _drive(DelayLine(CONFIG), arrivals, OVERRIDES)
    compiled = _drive(CompiledLine(CONFIG), arrivals, OVERRIDES)
    assert compiled == reference
    fates = [entry[2] for entry in reference if entry[0] == "fate"]
    # the sequence exercised what it claims: releases, both drop reasons, pass-throughs, held packets
    assert {"loss", "limit"} <= set(fates) and any(isinstance(f, int) for f in fates)
    assert reference[-1][2] > 0 and any(entry[0] == "due" and entry[2] for entry in reference)


def test_a_single_wire_with_slack_and_the_chain_of_two_wires_match_to_the_nanosecond() -> None:
    """Back-to-back GSO packets on the routed chain (two wires, the first with slack) up to its limit, released
    while more arrive, then after an idle gap."""
    arrivals = [(0, i + 1, 5 * MS + i * 10 * US + (20 * MS if i >= 20 else 0), 65_160, MAC_A) for i in range(40)]
    reference, compiled = DelayLine(CONFIG), CompiledLine(CONFIG)
    seen: list[tuple[object, object]] = []
    for line in (reference, compiled):
        seen.append(([line.admit(*a) for a in arrivals[:20]], line.due(12 * MS)))
        seen[-1] += ([line.admit(*a) for a in arrivals[20:]], line.drain())
    assert seen[0] == seen[1]
    times = [t for t in seen[0][0] + seen[0][2] if isinstance(t, int)]
    assert "limit" in seen[0][0] and len(times) > 9 and times == sorted(set(times))


# ---- the cycle: netlink messages in, verdict datagrams out ---------------------------------------------------
def _packet(packet_id: int, queue: int, *, length: int | None, mac: bytes | None, stamp_ns: int | None) -> bytes:
    attrs = _attr(NFQA_PACKET_HDR, struct.pack("!IHBx", packet_id, 0x0800, 0))
    if mac is not None:
        attrs += _attr(NFQA_HWADDR, struct.pack("!HH", len(mac), 0) + mac + b"\0" * (8 - len(mac)))
    if stamp_ns is not None:
        attrs += _attr(NFQA_TIMESTAMP, struct.pack("!QQ", stamp_ns // 10**9, stamp_ns % 10**9 // 1000))
    if length is not None:
        attrs += _attr(NFQA_CAP_LEN, struct.pack("!I", length))
    attrs += _attr(NFQA_PAYLOAD, bytes(64 if length is None or length > 64 else length))
    body = _NFGEN.pack(0, 0, socket.htons(queue)) + attrs
    return _NLMSG.pack(_NLMSG.size + len(body), _PACKET_TYPE, 0, 0, 0) + body


def _error_message() -> bytes:
    return _NLMSG.pack(_NLMSG.size + 4, NLMSG_ERROR, 0, 0, 0) + struct.pack("=i", -2)


def _reference_queue(sock: socket.socket) -> NfQueue:
    """The reference's NfQueue on one end of a socket pair (its netlink socket needs root)."""
    queue = object.__new__(NfQueue)
    queue._sock, queue._buffer, queue._seq, queue.errors, queue.overflows = sock, bytearray(1 << 17), 0, 0, 0
    return queue


def _received(sock: socket.socket) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(sock.recv(1 << 17))
        except BlockingIOError:
            return out


class _Horizon:
    """A planner that releases what is due by a fixed time (the cycle asks it nothing else)."""

    def __init__(self, horizon_ns: int) -> None:
        self.horizon = horizon_ns

    def horizon_ns(self, _now_ns: int) -> int:
        return self.horizon


def test_the_cycle_reads_admits_releases_and_answers_as_the_reference_does() -> None:
    """Datagrams of several packet messages (stamped or not, with or without MAC and capture length, an error
    reply between them) read at an injected clock: the compiled `read_admit` + `release` send the very verdict
    datagrams (drops, then releases; 512 per datagram) that the reference's read, admission, due and verdicts
    send, and keep the same counters and read lags."""
    rng = random.Random(7)
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(2)]
    for pair in pairs:
        for sock in pair:
            sock.setblocking(False)
    (ref_in, ref_peer), (com_in, com_peer) = pairs
    offset = 1_700_000_000 * 10**9  # realtime - monotonic
    now, packet_id, lags = 2_000 * MS, 0, []
    reference = Emulator(dataclasses.replace(CONFIG, compiled=False), clock=lambda: now,
                         realtime_clock=lambda: now + offset)
    assert not reference.compiled and isinstance(reference.line, DelayLine)
    queue = _reference_queue(ref_in)
    reads, read_queue = [], queue.read
    queue.read = lambda: reads.append(read_queue()) or reads[-1]  # what each cycle read
    compiled = CompiledLine(CONFIG)
    for round_ in range(60):
        now += rng.choice((10 * US, 400 * US, 3 * MS))
        for _ in range(rng.choice((0, 1, 3))):  # datagrams this round
            messages = []
            for _ in range(rng.choice((1, 2, 5, 40))):
                packet_id += 1
                stamp = rng.choice((None, now - rng.randrange(0, 300 * US), now + 50 * US)) if round_ else None
                messages.append(_packet(packet_id, rng.choice((0, 0, 1, 7)),
                                        length=rng.choice((None, 1500, 36_252, 65_160)),
                                        mac=rng.choice((MAC_A, MAC_B, MAC_C, None)),
                                        stamp_ns=None if stamp is None else stamp + offset))
                if rng.random() < 0.05:
                    messages.append(_error_message())
            datagram = b"".join(messages)
            ref_peer.send(datagram)
            com_peer.send(datagram)
        horizon = now + rng.choice((0, 100 * US))
        cycle_now, head, released = reference._cycle_python(queue, _Horizon(horizon), None)  # the reference itself
        read = compiled.read_admit(com_in.fileno(), now, offset)
        lags.append(compiled.first_lag_ns)
        assert cycle_now == now and read == len(reads.pop())
        assert compiled.next_release_ns() == head
        assert compiled.release(com_in.fileno(), horizon) == released
        assert _received(com_peer) == _received(ref_peer)
    assert compiled.accepted == reference.accepted > 0 and compiled.dropped == reference.dropped > 0
    assert compiled.errors == queue.errors > 0 and compiled.seq == queue._seq
    assert compiled.lag_samples() == list(reference._lag_samples) and max(lags) > 0 and -1 in lags
    assert compiled.counters() == reference.line.counters()
    for sock in (ref_in, ref_peer, com_in, com_peer):
        sock.close()


def test_more_than_512_verdicts_go_in_datagrams_of_512_like_the_reference() -> None:
    config = EmulatorConfig("genie-t-h1", (StageSpec("d", 1 * MS, limit_packets=2000),), (QueueSpec(0, "eth0", (0,)),))
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.setblocking(False), b.setblocking(False)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    line = CompiledLine(config)
    for start in range(0, 1200, 300):
        b.send(b"".join(_packet(i, 0, length=1500, mac=None, stamp_ns=None) for i in range(start, start + 300)))
    assert line.read_admit(a.fileno(), 0, 0) == 1200
    assert line.release(a.fileno(), 2 * MS) == 1200
    sizes = [len(datagram) for datagram in _received(b)]
    assert sizes == [512 * 32, 512 * 32, 176 * 32]
    a.close(), b.close()


def test_a_closed_socket_is_an_error_not_a_silent_drop() -> None:
    line = CompiledLine(EmulatorConfig("genie-t-h1", (StageSpec("d", 0),), (QueueSpec(0, "eth0", (0,)),)))
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    fd = a.fileno()
    a.close(), b.close()
    with pytest.raises(OSError):
        line.read_admit(fd, 0, 0)


def test_the_config_chooses_the_path_and_keeps_it_through_json() -> None:
    assert isinstance(delay_line(CONFIG), CompiledLine) and Emulator(CONFIG).compiled
    pure = dataclasses.replace(CONFIG, compiled=False)
    assert type(delay_line(pure)) is DelayLine and not Emulator(pure).compiled
    assert EmulatorConfig.from_json(pure.to_json()) == pure
    assert EmulatorConfig.from_dict({k: v for k, v in CONFIG.to_dict().items() if k != "compiled"}).compiled
    assert Emulator(CONFIG).stats()["path"] == "compiled" and Emulator(pure).stats()["path"] == "python"


def test_a_wrong_chain_index_is_refused_like_the_reference() -> None:
    bad = EmulatorConfig("genie-t-h1", (StageSpec("d", 0),), (QueueSpec(0, "eth0", (3,)),))
    with pytest.raises(IndexError):
        DelayLine(bad)
    with pytest.raises(IndexError):
        CompiledLine(bad)


# ---- the wake-up planner and the loop --------------------------------------------------------------------------
@pytest.mark.parametrize("compensate,cap", [(True, 100_000), (True, 30_000), (False, 100_000)])
def test_the_compiled_planner_learns_and_plans_as_the_reference_does(compensate: bool, cap: int) -> None:
    rng = random.Random(11)
    reference = WakePlanner(40_000, compensate=compensate, max_compensation_ns=cap)
    compiled = CompiledPlanner(40_000, compensate=compensate, max_compensation_ns=cap)
    learned = set()
    for _ in range(4000):
        draw = rng.random()
        if draw < 0.4:
            lag = rng.choice((rng.randrange(-1000, 200_000), rng.randrange(0, 3_000_000)))
            reference.observe_wake_lag(lag), compiled.observe_wake_lag(lag)
        elif draw < 0.8:
            late = rng.choice((rng.randrange(-700_000, 900_000), rng.randrange(-5_000, 20_000)))
            reference.observe_late(late), compiled.observe_late(late)
        now = rng.randrange(0, 10**9)
        due = rng.choice((None, now + rng.randrange(-100_000, 1_000_000)))
        state = [(p.margin_ns, p.compensation_ns, p.should_sleep(now, due), p.horizon_ns(now))
                 + ((p.target_ns(due), p.timeout_s(now, due)) if due is not None else ())
                 for p in (reference, compiled)]
        assert state[0] == state[1]
        # what the loop gives select(): the reference's max(timeout, MIN_SLEEP_S), rounded up to a microsecond
        gap = 250 * MS if due is None else reference.target_ns(due) - reference.margin_ns - now
        assert compiled.select_timeout_us(now, due) == max(1, -(-max(0, gap) // US))
        learned.add(state[0][:2])
    assert len(learned) > 100  # the sequence moved the margin and the compensation


def _fake_queue(sock: socket.socket) -> object:
    class Queue:
        seq = 0

        def fileno(self) -> int:
            return sock.fileno()
    return Queue()


def test_the_compiled_loop_releases_on_time_and_returns_for_statistics_and_signals() -> None:
    config = EmulatorConfig("genie-t-h1", (StageSpec("d", 3 * MS),), (QueueSpec(0, "eth0", (0,)),))
    inside, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    inside.setblocking(False), peer.setblocking(False)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK)
    line, planner = CompiledLine(config), CompiledPlanner(50_000, compensate=True, max_compensation_ns=100_000)
    start = time.monotonic_ns()
    peer.send(b"".join(_packet(i, 0, length=1500, mac=None, stamp_ns=None) for i in range(1, 41)))
    assert line.run(inside.fileno(), wake_r, planner, start + 40 * MS) == UNTIL
    assert time.monotonic_ns() >= start + 40 * MS
    verdicts = b"".join(_received(peer))
    assert [struct.unpack_from("!II", verdicts, i + 24) for i in range(0, len(verdicts), 32)] == \
        [(1, i) for i in range(1, 41)]  # accepted, in arrival order
    assert len(line) == 0 and line.accepted == 40 and line.late_samples() and line.late_ns_max > -3 * MS
    # it slept between the reads and releases (a loop that spins while a packet is held wakes thousands of times
    # in 40 ms: the first read, a release or a few, the statistics)
    assert line.cycles < 100
    # a release is never earlier than its due time less the compensation and half the (largest) margin
    assert all(late >= -(planner.compensation_ns + MAX_MARGIN_NS // 2) for late in line.late_samples())
    os.write(wake_w, b"x")
    before = time.monotonic_ns()
    assert line.run(inside.fileno(), wake_r, planner, before + 10 * 10**9) == SIGNALLED
    assert time.monotonic_ns() - before < 5 * 10**8
    with pytest.raises(BlockingIOError):
        os.read(wake_r, 1)  # the wake-up byte was taken
    for fd in (wake_r, wake_w):
        os.close(fd)
    inside.close(), peer.close()


@pytest.mark.parametrize("compiled", [True, False])
def test_the_emulator_runs_its_loop_until_a_real_signal_stops_it(compiled: bool) -> None:
    """A real signal 50 ms in (SIGALRM standing for SIGTERM: the handler is `Emulator.stop`, the wake-up fd is
    Python's, as `Emulator.run` sets them): the C loop returns on the wake-up byte, Python runs the handler, the
    loop ends - well before the statistics' second. (A thread cannot stand in for the signal: `run` holds the GIL,
    so the thread would run only once `run` returned for the statistics.)"""
    import signal

    config = EmulatorConfig("genie-t-h1", (StageSpec("d", 1 * MS),), (QueueSpec(0, "eth0", (0,)),),
                            compiled=compiled)
    inside, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    inside.setblocking(False), peer.setblocking(False)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK)
    emulator = Emulator(config)
    queue = _fake_queue(inside) if compiled else _reference_queue(inside)
    planner = (CompiledPlanner if compiled else WakePlanner)(50_000, compensate=True, max_compensation_ns=100_000)
    peer.send(b"".join(_packet(i, 0, length=9000, mac=None, stamp_ns=None) for i in range(1, 6)))
    previous_handler = signal.signal(signal.SIGALRM, emulator.stop)
    previous_fd = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    try:
        start = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        emulator._loop(queue, planner, wake_r)
        elapsed_s = time.monotonic() - start
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.set_wakeup_fd(previous_fd)
        signal.signal(signal.SIGALRM, previous_handler)
    assert emulator.stopping and 0.05 <= elapsed_s < 0.5
    stats = emulator.stats()
    assert stats["path"] == ("compiled" if compiled else "python") and stats["accepted"] == 5 and stats["held"] == 0
    assert stats["late_median_us"] is not None and len(b"".join(_received(peer))) == 5 * 32
    for fd in (wake_r, wake_w):
        os.close(fd)
    inside.close(), peer.close()


@pytest.mark.parametrize("bogus", [
    struct.pack("=IHHII", 0xFFFFFFFF, NLMSG_ERROR, 0, 0, 0) + bytes(4),  # nlmsg_len wraps (length + 3) to 0
    struct.pack("=IHHII", 0xFFFFFFFD, _PACKET_TYPE, 0, 0, 0) + bytes(64),
    struct.pack("=IHHII", 16, _PACKET_TYPE, 0, 0, 0),  # a packet message without its nfgenmsg
])
def test_a_bogus_message_length_ends_the_datagram_in_both_paths(bogus: bytes) -> None:
    """NLMSG_OK: a message whose length is under the header or past the bytes read ends the datagram (the C loop
    must never spin on it: run in a child with a timeout); the packets before it are read, as the reference reads
    them."""
    import subprocess
    import sys

    good = _packet(1, 0, length=1500, mac=None, stamp_ns=None)
    script = (
        "import socket, sys\n"
        "from genie.linkemu.line_core import CompiledLine\n"
        "from genie.linkemu.config import EmulatorConfig, QueueSpec, StageSpec\n"
        "a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); a.setblocking(False)\n"
        "b.send(bytes.fromhex(sys.argv[1]))\n"
        "line = CompiledLine(EmulatorConfig('x', (StageSpec('d', 1000),), (QueueSpec(0, 'eth0', (0,)),)))\n"
        "print(line.read_admit(a.fileno(), 0, 0))\n")
    done = subprocess.run([sys.executable, "-c", script, (good + bogus).hex()], capture_output=True, text=True,
                          timeout=20)
    assert done.returncode == 0, done.stderr
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.setblocking(False)
    b.send(good + bogus)
    assert int(done.stdout) == len(_reference_queue(a).read()) == 1
    a.close(), b.close()


def test_the_compiled_constants_and_planner_defaults_are_the_references() -> None:
    from genie.linkemu import line_core, nfqueue

    assert line_core.CONSTANTS == {name: getattr(emulator_module, name) for name in (
        "MIN_MARGIN_NS", "MAX_MARGIN_NS", "LAG_WINDOW", "LAG_RECOMPUTE_EVERY", "MAX_WAKE_LAG_SAMPLE_NS",
        "LATE_SAMPLES", "MARGIN_GAIN")} | {"IDLE_WAKE_NS": round(emulator_module.IDLE_WAKE_S * 1e9),
                                           "MAX_VERDICTS_PER_SEND": nfqueue.MAX_VERDICTS_PER_SEND}


def test_a_signal_ends_the_loop_while_releases_are_due_every_cycle() -> None:
    """A wake-up byte waiting while the loop never sleeps (packets ~10 us apart on a wire: a release due at every
    cycle): `run` returns SIGNALLED at once, as the reference's loop sees `stopping` every cycle, not once the line
    has drained (or at the statistics' time)."""
    config = EmulatorConfig("genie-t-h1", (StageSpec("wire", 0, rate_bps=1_200_000_000, limit_packets=10**7),),
                            (QueueSpec(0, "eth0", (0,)),))
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # verdicts to itself on loopback: a send never blocks
    sock.bind(("127.0.0.1", 0))
    sock.connect(sock.getsockname())
    sock.setblocking(False)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK)
    line, now = CompiledLine(config), time.monotonic_ns()
    for i in range(200_000):
        line.admit(0, i + 1, now, 1500)
    os.write(wake_w, b"x")
    planner = CompiledPlanner(50_000, compensate=True, max_compensation_ns=100_000)
    assert line.run(sock.fileno(), wake_r, planner, now + 10 * 10**9) == SIGNALLED
    assert len(line) > 0  # returned within its first cycles, not after the line drained and it slept
    for fd in (wake_r, wake_w):
        os.close(fd)
    sock.close()


def test_without_the_extension_the_emulator_runs_the_pure_python_reference(monkeypatch) -> None:
    """An install without a compiler (the extension is optional): the import fails, the reference runs."""
    monkeypatch.setattr(emulator_module, "CompiledLine", None)
    monkeypatch.setattr(emulator_module, "CompiledPlanner", None)
    assert type(delay_line(CONFIG)) is DelayLine
    emulator = Emulator(CONFIG)
    assert not emulator.compiled and emulator.stats()["path"] == "python"


def test_the_config_chooses_the_reference_where_the_extension_is_built() -> None:
    assert type(delay_line(dataclasses.replace(CONFIG, compiled=False))) is DelayLine
    assert type(delay_line(CONFIG)) is CompiledLine


@pytest.mark.parametrize("compiled", [True, False])
def test_a_bad_overrides_file_changes_nothing_and_a_good_one_applies(compiled: bool, tmp_path, capsys) -> None:
    """The fault injector's overrides file (then SIGUSR1): a valid one applies and reports its generation; one with
    a value out of its bounds (a delay that would take release times past 64 bits in the compiled line, a rate of
    0, a limit of 2**40, a loss of 101 %, a string) or not the expected shape is refused whole, on both paths: the
    line keeps the last good change, the generation stays, a line on stderr names the file."""
    config = EmulatorConfig("genie-t-h1", (StageSpec("w", 0, rate_bps=10**9, limit_packets=10**6),
                                           StageSpec("d", MS, limit_packets=10**6)), (QueueSpec(0, "eth0", (0, 1)),))
    stats = tmp_path / "genie-t-h1.stats.json"
    emulator = Emulator(dataclasses.replace(config, compiled=compiled), stats_path=stats)
    assert emulator.compiled is compiled
    overrides = emulator.overrides_path

    def release_of(packet_id: int, at_ns: int) -> int:
        emulator.line.admit(0, packet_id, at_ns, 1500)
        return emulator.line.next_release_ns()

    overrides.write_text('{"generation": 1, "stages": {"w": {"rate_bps": 100000000}, "d": {"delay_ns": 2000000}}}')
    emulator.reload_overrides()
    assert emulator.overrides_generation == 1
    slow = release_of(1, 0)  # 1514 B on the wire at 100 Mbit/s, then 2 ms
    assert slow == 121_120 + 2 * MS
    emulator.line.drain()
    for index, bad in enumerate(('{"generation": 2, "stages": {"d": {"delay_ns": 9223372036854775000}}}',
                '{"generation": 2, "stages": {"w": {"rate_bps": 0}}}',
                '{"generation": 2, "stages": {"w": {"limit_packets": 1099511627776}}}',
                '{"generation": 2, "stages": {"d": {"loss_pct": 101}}}',
                '{"generation": 2, "stages": {"d": {"delay_ns": "5ms"}}}',
                '{"generation": 2, "stages": {"d": {"delay_ns": true}}}',
                '{"generation": 2, "stages": ["d"]}', '{"generation": "two", "stages": {}}', '{"generation"')):
        overrides.write_text(bad)
        emulator.reload_overrides()
        assert emulator.overrides_generation == 1, bad
        assert f"cannot apply {overrides}" in capsys.readouterr().err
        at = (index + 1) * 10 * MS
        assert release_of(index + 2, at) == at + 121_120 + 2 * MS, bad  # the last good change still holds
        emulator.line.drain()
    overrides.write_text('{"generation": 3, "stages": {}}')  # back to the configuration
    emulator.reload_overrides()
    assert emulator.overrides_generation == 3 and release_of(99, 200 * MS) == 200 * MS + 12_112 + MS
