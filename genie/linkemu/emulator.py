"""The link-emulator process: one per testbed namespace that receives emulated links, started by the testbed as
``ip netns exec NS python -m genie.linkemu --config JSON [--stats FILE]``.

One thread, one loop: sleep in select() until the next release is due or a packet is queued; read every
queued packet (kernel arrival time, length, source MAC), let the `DelayLine` decide its fate, and answer the
due ones with one batched send. Wake-ups are planned early by the measured oversleep of this machine (a
running estimate), so releases land on time without spinning. The process asks for SCHED_FIFO (when allowed)
so a busy machine does not delay its wake-ups; it prints ``ready`` on stdout once every queue is bound, and
ends on SIGTERM/SIGINT (held packets are then dropped by the kernel with the queues).
"""

from __future__ import annotations

import collections
import ctypes
import json
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from genie.core.files import write_atomic
from genie.linkemu.config import MAX_COMPENSATION_NS, EmulatorConfig
from genie.linkemu.line import DelayLine
from genie.linkemu.nfqueue import NfQueue, QueuedPacket

try:
    from genie.linkemu.line_core import CompiledLine, CompiledPlanner
except ImportError:  # not built (no compiler at install): the pure Python reference runs
    CompiledLine = CompiledPlanner = None

PR_SET_TIMERSLACK = 29
REALTIME_PRIORITY = 10
IDLE_WAKE_S = 0.25  # housekeeping period with nothing held
MIN_SLEEP_S = 1e-6  # select(0) would return at once: the loop must always sleep when nothing is due
STATS_PERIOD_NS = 1_000_000_000
MIN_MARGIN_NS, MAX_MARGIN_NS = 2_000, 500_000
MARGIN_GAIN = 0.125  # weight of each lateness sample in the wake margin
LAG_WINDOW = 63  # wake-up lag samples in the running median
LAG_RECOMPUTE_EVERY = 8
MAX_WAKE_LAG_SAMPLE_NS = 2_000_000  # longer lags are preemptions, not wake-ups
QUEUE_MAXLEN = 1 << 20
LATE_SAMPLES = 4096


class WakePlanner:
    """When to wake up and what to release, learned while running (all times in ns).

    * ``margin_ns``: how much before a release select() is asked to return. Adjusted after every timer-driven
      release by its lateness (select's oversleep plus the loop's own work), so releases land on time.
    * ``compensation_ns``: how much before its due time a packet is released: a running estimate of this
      process's own wake-up latency (from the kernel's arrival stamp to reading the packet after a sleep;
      median of the last 63), at most ``max_compensation_ns``. The receiver of a released packet, asleep like this process was, takes
      about as long to wake; on a VM whose idle vCPUs halt this is tens of microseconds per packet.
    """

    def __init__(self, margin_ns: int = 50_000, *, compensate: bool = True,
                 max_compensation_ns: int = MAX_COMPENSATION_NS) -> None:
        self.margin_ns = margin_ns
        self.compensate = compensate
        self.max_compensation_ns = max_compensation_ns
        self._lag_ns = 0
        self._lags: collections.deque[int] = collections.deque(maxlen=LAG_WINDOW)
        self._seen = 0

    @property
    def compensation_ns(self) -> int:
        return int(min(self._lag_ns, self.max_compensation_ns)) if self.compensate else 0

    def target_ns(self, due_ns: int) -> int:
        return due_ns - self.compensation_ns

    def timeout_s(self, now_ns: int, due_ns: int) -> float:
        return max(0.0, (self.target_ns(due_ns) - self.margin_ns - now_ns) / 1e9)

    def should_sleep(self, now_ns: int, due_ns: int | None) -> bool:
        """Sleep unless the next release is closer than half the margin (sleeping would make it later)."""
        return due_ns is None or self.target_ns(due_ns) - now_ns > self.margin_ns // 2

    def horizon_ns(self, now_ns: int) -> int:
        """Release every packet due up to here."""
        return now_ns + self.compensation_ns + self.margin_ns // 2

    def observe_late(self, late_ns: int) -> None:
        """A release after a timer wake-up happened `late_ns` after its target (negative: early)."""
        estimate = self.margin_ns + MARGIN_GAIN * late_ns
        self.margin_ns = int(min(MAX_MARGIN_NS, max(MIN_MARGIN_NS, estimate)))

    def observe_wake_lag(self, lag_ns: int) -> None:
        """The first packet read after sleeping had arrived `lag_ns` earlier."""
        if not 0 <= lag_ns <= MAX_WAKE_LAG_SAMPLE_NS:
            return
        self._lags.append(lag_ns)
        self._seen += 1
        if self._seen % LAG_RECOMPUTE_EVERY == 1:  # a running median: robust against preemptions
            ordered = sorted(self._lags)
            self._lag_ns = ordered[len(ordered) // 2]


def _tune_scheduling(realtime: bool) -> str:
    """Timer slack 1 ns (wake-ups not rounded up by 50 us) and SCHED_FIFO when permitted."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if realtime:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(REALTIME_PRIORITY))
            return "fifo"
        except (OSError, AttributeError):
            pass
    return "other"


def _calibrate(poller: Callable[[float], object], samples: int = 20) -> int:
    """The median oversleep of a short select() on this machine, in ns."""
    lates = []
    for _ in range(samples):
        start = time.monotonic_ns()
        poller(50e-6)
        lates.append(time.monotonic_ns() - start - 50_000)
    lates.sort()
    return int(min(MAX_MARGIN_NS, max(MIN_MARGIN_NS, lates[len(lates) // 2])))


class Emulator:
    def __init__(self, config: EmulatorConfig, *, stats_path: Path | None = None,
                 clock: Callable[[], int] = time.monotonic_ns, realtime_clock: Callable[[], int] = time.time_ns) -> None:
        """``clock`` (monotonic ns) and ``realtime_clock`` (CLOCK_REALTIME ns, the kernel's packet stamps'):
        what the reference loop reads the time from (tests inject them; the compiled loop reads the clocks in C)."""
        self.config = config
        self._clock = clock
        self._realtime_clock = realtime_clock
        self.line = delay_line(config)
        self.compiled = CompiledLine is not None and isinstance(self.line, CompiledLine)
        self.stats_path = stats_path
        self.overrides_path = overrides_path_for(stats_path) if stats_path is not None else None
        self.overrides_generation = 0
        self._reload = False
        self.stopping = False
        self.accepted = 0
        self.dropped = 0
        self.late_ns_max = 0
        self._late_samples: collections.deque[int] = collections.deque(maxlen=LATE_SAMPLES)
        self._lag_samples: collections.deque[int] = collections.deque(maxlen=LATE_SAMPLES)
        self.scheduling = "other"
        self._planner = WakePlanner(compensate=config.wake_compensation)  # until run() calibrates it
        self.started_ns = clock()

    def stop(self, _signum: int = 0, _frame: FrameType | None = None) -> None:
        self.stopping = True

    def request_reload(self, _signum: int = 0, _frame: FrameType | None = None) -> None:
        self._reload = True

    def reload_overrides(self) -> None:
        """Apply the live stage changes of `overrides_path` (written by genie's fault injector, then SIGUSR1):
        ``{"generation": N, "stages": {name: {delay_ns, jitter_ns, loss_pct, limit_packets}}}``; stages not
        named go back to their configuration. The generation is reported in the statistics, written at once."""
        self._reload = False
        if self.overrides_path is None:
            return
        try:
            doc = json.loads(self.overrides_path.read_text())
            generation = int(doc.get("generation") or 0)
            self.line.apply_overrides(doc.get("stages") or {})  # all or nothing
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            sys.stderr.write(f"genie.linkemu: cannot apply {self.overrides_path}: {exc}\n")
            return
        self.overrides_generation = generation

    def run(self, ready: Callable[[], None]) -> None:
        self.scheduling = _tune_scheduling(self.config.realtime)
        with NfQueue() as queue:
            for spec in self.config.queues:
                queue.bind(spec.queue_num, maxlen=QUEUE_MAXLEN)
            planner = (CompiledPlanner if self.compiled else WakePlanner)(
                _calibrate(lambda s: select.select([queue], [], [], s)), compensate=self.config.wake_compensation,
                max_compensation_ns=MAX_COMPENSATION_NS)
            self._planner = planner
            wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            previous = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)  # a signal ends a sleep at once
            try:
                ready()
                self._loop(queue, planner, wake_r)
            finally:
                signal.set_wakeup_fd(previous)
                os.close(wake_r), os.close(wake_w)
            self._write_stats(queue)

    def _loop(self, queue: NfQueue, planner: WakePlanner, wake_fd: int | None = None) -> None:
        """Never spins: select() sleeps until the margin before the next release target or a packet arrives;
        a release closer than half the margin goes at once. Between wake-ups: live overrides after SIGUSR1 and
        the statistics every second. The compiled line runs the wake-ups in C until the statistics are due or a
        signal came (`CompiledLine.run`); the reference, one wake-up at a time (`_wake_python`)."""
        next_stats = self._clock() + STATS_PERIOD_NS
        while not self.stopping:
            if self._reload:
                self.reload_overrides()
                self._write_stats(queue)
            if self.compiled:
                self.line.seq = queue.seq  # one sequence of netlink messages on the socket (close()'s unbind
                self.line.run(queue.fileno(), -1 if wake_fd is None else wake_fd, planner, next_stats)  # acks
                queue.seq = self.line.seq
                now = self._clock()
            else:
                now = self._wake_python(queue, planner, wake_fd)
            if now >= next_stats:
                self._write_stats(queue)
                next_stats = now + STATS_PERIOD_NS

    def _wake_python(self, queue: NfQueue, planner: WakePlanner, wake_fd: int | None) -> int:
        """One wake-up of the reference loop: sleep unless a release is closer than half the margin, then
        `_cycle_python`; the release lateness learned. Returns the time after the cycle."""
        line = self.line
        now = self._clock()
        due = line.next_release_ns()
        timer_wake = slept = False
        if planner.should_sleep(now, due):
            timeout = IDLE_WAKE_S if due is None else planner.timeout_s(now, due)
            try:
                readable, _, _ = select.select([queue] if wake_fd is None else [queue, wake_fd], [], [],
                                               max(timeout, MIN_SLEEP_S))
            except InterruptedError:
                return self._clock()
            signalled = wake_fd is not None and wake_fd in readable
            if signalled:
                readable.remove(wake_fd)
                try:
                    os.read(wake_fd, 64)
                except BlockingIOError:
                    pass
            slept = True
            timer_wake = not readable and due is not None and not signalled
        now, head, released = self._cycle_python(queue, planner, planner if slept else None)
        if released and head is not None:
            late = now - planner.target_ns(head)
            self._late_samples.append(late)
            self.late_ns_max = max(self.late_ns_max, late)
            if timer_wake:
                planner.observe_late(late)
        return now

    def _cycle_python(self, queue: NfQueue, planner: WakePlanner,
                      woke: WakePlanner | None) -> tuple[int, int | None, int]:
        """The reference: read the queued packets, admit them, release the due ones, answer drops and releases
        in one batch. Returns the time after admission, the head release time before releasing, the released
        count."""
        decisions: list[tuple[int, int, bool]] = []
        packets = queue.read()
        if packets:
            now_mono = self._clock()
            self._admit(packets, decisions, woke, now_mono, self._realtime_clock() - now_mono)
        now = self._clock()
        head = self.line.next_release_ns()
        released = self.line.due(planner.horizon_ns(now))
        decisions.extend((r.queue_num, r.packet_id, True) for r in released)
        self.accepted += len(released)
        if decisions:
            queue.verdicts(decisions)
        return now, head, len(released)

    def _admit(self, packets: list[QueuedPacket], decisions: list[tuple[int, int, bool]],
               woke: WakePlanner | None, now_mono: int, offset: int) -> None:
        """Admit `packets`, read at `now_mono` (monotonic ns; `offset`: realtime - monotonic), to the line (drops
        into `decisions`); `woke` learns the wake-up lag of the first one when they were read right after a
        sleep."""
        line = self.line
        for packet in packets:
            arrival = now_mono
            if packet.timestamp_ns is not None:
                arrival = min(now_mono, packet.timestamp_ns - offset)
                self._lag_samples.append(now_mono - arrival)
                if woke is not None:
                    woke.observe_wake_lag(now_mono - arrival)
                    woke = None
            fate = line.admit(packet.queue_num, packet.packet_id, arrival, packet.length_bytes, packet.mac)
            if isinstance(fate, str):
                decisions.append((packet.queue_num, packet.packet_id, False))
                self.dropped += 1

    def stats(self, queue: NfQueue | None = None) -> dict[str, object]:
        return {
            "pid": os.getpid(),
            "netns": self.config.netns,
            "scheduling": self.scheduling,
            "uptime_s": round((self._clock() - self.started_ns) / 1e9, 3),
            "path": "compiled" if self.compiled else "python",
            "accepted": self.accepted + (self.line.accepted if self.compiled else 0),
            "dropped": self.dropped + (self.line.dropped if self.compiled else 0),
            "held": len(self.line),
            "passed_through": self.line.passed_through,
            "late_max_us": round(max(self.late_ns_max, self.line.late_ns_max if self.compiled else 0) / 1000, 1),
            "late_median_us": _median_us(self.line.late_samples() if self.compiled else self._late_samples),
            "read_lag_median_us": _median_us(self.line.lag_samples() if self.compiled else self._lag_samples),
            "wake_margin_us": round(self._planner.margin_ns / 1000, 1),
            "compensation_us": round(self._planner.compensation_ns / 1000, 1),
            "socket_overflows": (queue.overflows if queue else 0) + (self.line.overflows if self.compiled else 0),
            "verdict_errors": (queue.errors if queue else 0) + (self.line.errors if self.compiled else 0),
            "stages": self.line.counters(),
            "overrides_generation": self.overrides_generation,
        }

    def _write_stats(self, queue: NfQueue) -> None:
        if self.stats_path is None:
            return
        try:
            write_json_atomic(self.stats_path, self.stats(queue))
        except OSError:
            pass  # statistics are best effort; the emulation goes on


def delay_line(config: EmulatorConfig) -> DelayLine:
    """The compiled line where it is built and the config asks for it (`EmulatorConfig.compiled`), else the
    pure Python reference."""
    if config.compiled and CompiledLine is not None:
        return CompiledLine(config)  # type: ignore[no-any-return]
    return DelayLine(config)


def _median_us(samples: collections.deque[int] | list[int]) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    return round(ordered[len(ordered) // 2] / 1000, 1)


def overrides_path_for(stats_path: Path) -> Path:
    """Where live stage changes for the emulator writing `stats_path` are put: beside it."""
    return stats_path.with_name(stats_path.name.removesuffix(".stats.json") + ".overrides.json")


def write_json_atomic(path: Path, data: object) -> None:
    write_atomic(path, json.dumps(data))


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m genie.linkemu",
                                     description="genie's userspace link emulator (NFQUEUE delay line)")
    parser.add_argument("--config", required=True, help="EmulatorConfig as JSON text, or @FILE")
    parser.add_argument("--stats", type=Path, help="write counters here (JSON) every second and at exit")
    args = parser.parse_args(argv)
    text = Path(args.config[1:]).read_text() if args.config.startswith("@") else args.config
    config = EmulatorConfig.from_json(text)
    emulator = Emulator(config, stats_path=args.stats)
    signal.signal(signal.SIGTERM, emulator.stop)
    signal.signal(signal.SIGINT, emulator.stop)
    signal.signal(signal.SIGHUP, emulator.stop)
    signal.signal(signal.SIGUSR1, emulator.request_reload)

    def ready() -> None:
        sys.stdout.write(f"ready {os.getpid()}\n")
        sys.stdout.flush()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # whoever waited for "ready" may close the pipe
        os.close(devnull)

    try:
        emulator.run(ready)
    except OSError as exc:
        sys.stderr.write(f"genie.linkemu: {config.netns}: {exc}\n")
        return 1
    return 0
