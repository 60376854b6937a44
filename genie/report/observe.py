"""Watching a live testbed during a run: link counters before/after, TX bytes over time, TCP counters.

How (and why this way):
- before/after: ``link_counters(info)`` (netlink: bytes, packets, drops and root-qdisc drops per link end).
  It costs ~15 ms per namespace (pyroute2 enters each namespace through a helper process), too much to
  repeat often on a 2-core machine while ranks run, so it is used only twice.
- over time: a background thread reads ``/proc/net/dev`` of every testbed namespace every `interval_s`
  (TX bytes per interface). Each namespace's file is opened once, as the observation starts, and each sample
  re-reads the open files from their start (`ProcFile`: a /proc/net file stays bound to the namespace it was
  opened in): ~5 us per namespace, where entering each namespace again per sample cost ~0.2 ms of CPU per
  namespace (a thread each) - 1.7 ms per 9-namespace sample, a burst that took a CPU from the ranks of a
  1 MiB all-to-all every 200 ms (benchmarks/README.md, "What the late rank of an all-to-all waits for"). The
  interval grows to 20x the cost of one sample, so the sampler never takes more than ~5% of a core.
- TCP: ``/proc/net/snmp`` of each host namespace before and after (retransmitted segments...), kept open like
  /proc/net/dev; with interval reports, also each host's established connections (windows, RTTs) through one
  sock_diag socket per host namespace (``TcpDiag``), kept open too.
Namespace files are opened or read from a short-lived thread that entered the namespace (``run_in_netns``)
through ``/proc/thread-self/net/...``: no subprocess, no dependence on a rank process being alive.

The testbed side comes in as `probe`, an object with ``link_counters(info)``, ``run_in_netns(name, fn)`` and
``TcpDiag()`` — `genie.testbed.netlink` in the CLI, a fake in tests — so this module imports nothing of the
testbed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol

from genie.core.testbed import TestbedInfo
from genie.measure.links import (LinkDirectionTraffic, LinkRateSample, NamespaceTcp, TcpSockets, diff_link_counters,
                                diff_tcp, parse_proc_net_dev, parse_snmp_tcp, rate_samples, tcp_sockets)
from genie.report.links import links_csv, samples_csv, tcp_csv
from genie.report.manifest import RunRecorder


class TcpConnectionReader(Protocol):
    def established(self, netns_name: str) -> list[Any]: ...

    def close(self) -> None: ...


class TestbedProbe(Protocol):
    def link_counters(self, info: TestbedInfo) -> list[Any]: ...

    def run_in_netns(self, name: str, fn: Callable[[], Any]) -> Any: ...

    def TcpDiag(self) -> TcpConnectionReader: ...  # noqa: N802 - the class genie.testbed.netlink exports


@dataclass(frozen=True)
class LinkObservation:
    links: tuple[LinkDirectionTraffic, ...]
    tcp: tuple[NamespaceTcp, ...]
    samples: tuple[LinkRateSample, ...]
    error: str | None = None  # why (part of) the observation is missing

    def files(self) -> dict[str, str]:
        """{file name: CSV text} for what was observed."""
        out = {}
        if self.links:
            out["links.csv"] = links_csv(self.links)
        if self.tcp:
            out["tcp.csv"] = tcp_csv(self.tcp)
        if self.samples:
            out["link_samples.csv"] = samples_csv(self.samples)
        return out

    def summary(self) -> dict[str, Any]:
        return {"link_bytes": sum(r.bytes for r in self.links),
                "link_drops": sum(r.tx_drops + (r.rx_drops or 0) + r.qdisc_drops for r in self.links),
                "tcp_retrans_segs": sum(t.counters.retrans_segs for t in self.tcp)}


def _read_text(path: str) -> str:
    with open(path) as f:
        return f.read()


def _read(path: str) -> Callable[[], str]:
    """What runs inside a namespace: read one /proc file (a partial, so fakes can see the path)."""
    return functools.partial(_read_text, path)


class ProcFile:
    """A /proc file opened once and read again from its start on every `read()`: a namespace's /proc/net
    files keep showing the namespace they were opened in, whichever thread reads them later."""

    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd

    @classmethod
    def open(cls, path: str) -> ProcFile:
        return cls(os.open(path, os.O_RDONLY | os.O_CLOEXEC))

    def read(self) -> str:
        if self.fd is None:
            raise ValueError("read of a closed ProcFile")
        chunks, offset = [], 0
        while chunk := os.pread(self.fd, 1 << 16, offset):
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks).decode()

    def close(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)

    def __del__(self) -> None:  # one opened for a caller interrupted before it got it (run_in_netns's join)
        with contextlib.suppress(Exception):
            self.close()


def _open(path: str) -> Callable[[], ProcFile]:
    """What runs inside a namespace: open one /proc file to read later from anywhere (a partial, as `_read`)."""
    return functools.partial(ProcFile.open, path)


@dataclass(frozen=True)
class IntervalReport:
    """What the links did during [t_start_s, t_end_s) of the run (iperf3's -i lines): each link direction's
    bytes, each host's TCP counters over the interval."""

    t_start_s: float
    t_end_s: float
    links: tuple[LinkRateSample, ...]
    tcp: tuple[NamespaceTcp, ...]
    sockets: tuple[TcpSockets, ...] = ()  # at the interval's end

    def line(self) -> str:
        """One line starting with ``#`` (nccl-tests and OSU parsers skip it): rate per link direction, TCP
        segments out and retransmitted per host, then per host its connections' mean cwnd (segments) and RTT."""
        rates = " ".join(f"{s.src}>{s.dst} {s.rate_bps / 1e6:.1f}" for s in self.links if s.bytes) or "idle"
        tcp = " ".join(f"{t.host} {t.counters.out_segs}/{t.counters.retrans_segs}" for t in self.tcp)
        socks = " ".join(f"{s.host} {s.count}x {s.cwnd_mean:.0f}/{s.rtt_ms_mean:.2f}ms" for s in self.sockets
                         if s.count)
        return (f"# [{self.t_start_s:7.2f}-{self.t_end_s:7.2f} s] Mbit/s: {rates}"
                + (f" | TCP segs out/retrans: {tcp}" if tcp else "")
                + (f" | conns cwnd/rtt: {socks}" if socks else ""))


class LinkObserver:
    """``with LinkObserver(info, netlink) as obs: run()`` then ``obs.observation``. Never fails the run: a
    counter that cannot be read leaves its part out and says why in ``observation.error``. With
    `on_interval`, every `report_s` the sampler thread also hands it an `IntervalReport` of the last interval."""

    def __init__(self, info: TestbedInfo, probe: TestbedProbe, *, interval_s: float = 0.2,
                 clock: Callable[[], float] = time.monotonic, report_s: float = 0.0,
                 on_interval: Callable[[IntervalReport], None] | None = None) -> None:
        self.info, self.probe, self.interval_s, self.clock = info, probe, interval_s, clock
        # a dilated testbed's times are reported in the stated fabric's time (real / N), its rates x N; the
        # sampling and reporting periods stay wall-clock cadences
        self.scale = info.dilation.factor
        self.report_s, self.on_interval = report_s, on_interval
        if on_interval is not None and report_s > 0:
            self.interval_s = min(interval_s, report_s) if interval_s > 0 else report_s
        self._last_report: tuple[int, dict[str, Any]] | None = None  # (snapshot index, TCP counters)
        self.observation = LinkObservation((), (), ())
        self._namespaces = sorted({e.netns for e in info.link_ends if e.netns})
        self._hosts = [(h.host, h.netns) for h in info.hosts if h.netns]
        self._snapshots: list[tuple[float, dict[tuple[str, str], int]]] = []
        self._dev_files: dict[str, ProcFile] = {}  # namespace -> its /proc/net/dev, open for the observation
        self._snmp_files: dict[str, ProcFile] = {}  # host namespace -> its /proc/net/snmp, likewise
        self._connections: TcpConnectionReader | None = None  # with interval reports: sockets' windows, RTTs
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._errors: list[str] = []
        self._before: list[Any] = []
        self._tcp_before: dict[str, Any] = {}
        self._t0 = 0.0

    def __enter__(self) -> LinkObserver:
        try:
            for files, namespaces, path in ((self._dev_files, self._namespaces, "/proc/thread-self/net/dev"),
                                            (self._snmp_files, [ns for _h, ns in self._hosts],
                                             "/proc/thread-self/net/snmp")):
                for ns in namespaces:
                    try:
                        files[ns] = self.probe.run_in_netns(ns, _open(path))
                    except Exception:  # no error to report: each read enters the namespace instead (`_read_in`)
                        pass
            # the counters and the clock together, as __exit__ takes them: opening the files took time
            self._before = self._attempt("link counters", lambda: self.probe.link_counters(self.info)) or []
            self._tcp_before = self._tcp_snapshot()
            self._t0 = self.clock()
            self._last_report = (0, self._tcp_before)
            if self.on_interval is not None and self.report_s > 0:  # its sockets open as the reports read them
                self._connections = self._attempt("sock_diag", self.probe.TcpDiag)
            if self.interval_s > 0 and self._namespaces:
                self._thread = threading.Thread(target=self._sample_loop, name="genie-link-sampler", daemon=True)
                self._thread.start()
        except BaseException:  # Ctrl-C while opening: `with` will not call __exit__
            self._stop.set()
            self._close_files()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        try:
            if self._thread is not None:
                self._thread.join(timeout=5.0)
            self._sample()
            tcp_after = self._tcp_snapshot()
        finally:  # also on a second Ctrl-C while the last sample is taken
            self._close_files()
        duration_s = (self.clock() - self._t0) / self.scale
        after = self._attempt("link counters", lambda: self.probe.link_counters(self.info)) or []
        rates = {i: link.shape.rate_bps for i, link in enumerate(self.info.topology.links)}
        links = diff_link_counters(self._before, after, duration_s=duration_s, rates_bps=rates)
        tcp = [NamespaceTcp(ns, host, diff_tcp(self._tcp_before[ns], tcp_after[ns]))
               for host, ns in self._hosts if ns in self._tcp_before and ns in tcp_after]
        samples = rate_samples(self.info.link_ends, self._snapshots)
        self.observation = LinkObservation(tuple(links), tuple(tcp), tuple(samples),
                                           "; ".join(dict.fromkeys(self._errors)) or None)

    # -- internals
    def _close_files(self) -> None:
        files, self._dev_files, self._snmp_files = [*self._dev_files.values(), *self._snmp_files.values()], {}, {}
        for opened in files:
            self._attempt("closing a namespace's /proc file", opened.close)
        connections, self._connections = self._connections, None
        if connections is not None:
            self._attempt("closing sock_diag", connections.close)

    def _read_in(self, ns: str, opened: dict[str, ProcFile], path: str) -> str | None:
        """A namespace's /proc file: the one kept open, or (it could not be) read by entering the namespace."""
        kept = opened.get(ns)
        if kept is not None:
            return self._attempt(f"{ns} {path}", kept.read)
        return self._attempt(f"{ns} {path}", lambda: self.probe.run_in_netns(ns, _read(path)))

    def _attempt(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as exc:  # observing must never fail the measured run
            self._errors.append(f"{what}: {exc}")
            return None

    def _tcp_snapshot(self) -> dict[str, Any]:
        out = {}
        for _host, ns in self._hosts:
            text = self._read_in(ns, self._snmp_files, "/proc/thread-self/net/snmp")
            if text is not None:
                counters = self._attempt(f"{ns} /proc/net/snmp", lambda text=text: parse_snmp_tcp(text))
                if counters is not None:
                    out[ns] = counters
        return out

    def _sockets(self, host: str, ns: str) -> TcpSockets | None:
        reader = self._connections
        if reader is None:
            return None
        found = self._attempt(f"{ns} sock_diag", lambda: tcp_sockets(host, reader.established(ns)))
        if found is None or self.scale == 1:
            return found
        return dataclasses.replace(found, rtt_ms_mean=found.rtt_ms_mean / self.scale,
                                   rtt_ms_max=found.rtt_ms_max / self.scale)

    def _sample(self) -> None:
        t = (self.clock() - self._t0) / self.scale
        tx: dict[tuple[str, str], int] = {}
        for ns in self._namespaces:
            text = self._read_in(ns, self._dev_files, "/proc/thread-self/net/dev")
            if text is None:
                continue
            for ifname, (_rx, tx_bytes) in parse_proc_net_dev(text).items():
                tx[(ns, ifname)] = tx_bytes
        self._snapshots.append((t, tx))

    def _sample_loop(self) -> None:
        interval = self.interval_s
        self._sample()
        while not self._stop.wait(interval):
            started = self.clock()
            self._sample()
            self._maybe_report()
            interval = max(self.interval_s, 20 * (self.clock() - started))

    def _maybe_report(self) -> None:
        if self.on_interval is None or self.report_s <= 0 or self._last_report is None:
            return
        first, tcp_before = self._last_report
        span_s = (self._snapshots[-1][0] - self._snapshots[first][0]) * self.scale if first < len(self._snapshots) else 0
        if first >= len(self._snapshots) or span_s < self.report_s:
            return
        last = len(self._snapshots) - 1
        tcp_now = self._tcp_snapshot()
        links = rate_samples(self.info.link_ends, [self._snapshots[first], self._snapshots[last]])
        tcp = tuple(NamespaceTcp(ns, host, diff_tcp(tcp_before[ns], tcp_now[ns]))
                    for host, ns in self._hosts if ns in tcp_before and ns in tcp_now)
        self._last_report = (last, tcp_now)
        sockets = tuple(s for host, ns in self._hosts if (s := self._sockets(host, ns)) is not None)
        report = IntervalReport(self._snapshots[first][0], self._snapshots[last][0], tuple(links), tcp, sockets)
        self._attempt("interval report", lambda: self.on_interval(report))


@contextlib.contextmanager
def observe_links(run: RunRecorder, info: TestbedInfo | None, probe: TestbedProbe | None, *,
                  interval_s: float = 0.2, report_s: float = 0.0,
                  on_interval: Callable[[IntervalReport], None] | None = None) -> Iterator[LinkObserver | None]:
    """Observe `info`'s links for the block and add links.csv, tcp.csv, link_samples.csv to the run — also
    when the block fails or is interrupted. Yields None (and observes nothing) without a testbed."""
    if info is None or probe is None:
        yield None
        return
    observer = LinkObserver(info, probe, interval_s=interval_s, report_s=report_s, on_interval=on_interval)
    try:
        with observer:
            yield observer
    finally:
        for name, text in observer.observation.files().items():
            run.write(name, text)
        if observer.observation.error:
            run.warn(f"link observation incomplete: {observer.observation.error}")
