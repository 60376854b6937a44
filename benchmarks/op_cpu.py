"""Where the CPU of a small op goes, across every process of the machine (issue #36 item 2; run by hand, not a test).

    sudo .venv/bin/python -m benchmarks.op_cpu --testbed NAME [--tree DIR ...] [-b 1K] [--algorithm auto]
        [--collective all_reduce] [-n 20000] [--settle 8] [--seconds 4] [--rounds 1] [--affinity none,halves]

Runs `genie bench` of each checkout (`--tree`, as in `benchmarks.step_cost`; the trees alternated round by round)
on a testbed that is up, and while its timed loop runs reads the machine's counters twice, `--seconds` apart:
the testbed's rank processes (every process in one of its host namespaces: /proc/PID/schedstat run and wait time,
voluntary and involuntary context switches), the whole machine's /proc/stat (user, system, softirq, idle...
of every CPU, whatever process), its IPIs (/proc/interrupts RES, CAL) and NET_RX softirqs, and each host
namespace's TCP counters (/proc/PID/net: segments sent, data segments sent, retransmissions). Everything is
per data segment: a message of at most one MSS is one segment, so at <= 1 KiB that is per rank-step (one send
and one receive of each rank). A pure ACK is a segment sent without data.

`--affinity` (a diagnostic, alternated with the trees round by round): `halves` pins the ranks of the first half
of the testbed's hosts to CPU 0 and the rest to CPU 1 (recursive doubling's first two steps then stay on one CPU),
`one` pins every rank to CPU 0; set as soon as the ranks exist, before their timed loop.

The bench's own numbers (median, mean) print beside them; the rank processes' share of the machine's busy time
says how much of it other work (other workers' jobs) took.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

#: /proc/stat's CPU columns, in order (jiffies)
CPU_COLUMNS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
IPI_NAMES = ("RES", "CAL")  # rescheduling and function-call interrupts: a wake-up on another CPU sends one


@dataclass(frozen=True)
class Counters:
    """One reading of the counters; sums over the rank processes and the host namespaces."""

    time_s: float
    ranks: int
    rank_run_ns: int
    rank_wait_ns: int
    rank_voluntary_switches: int
    rank_involuntary_switches: int
    cpu_jiffies: tuple[int, ...]  # CPU_COLUMNS, all CPUs
    ipis: tuple[int, ...]  # IPI_NAMES, all CPUs
    net_rx_softirqs: int
    tcp_segments_out: int
    tcp_data_segments_out: int
    tcp_retransmitted: int


@dataclass(frozen=True)
class OpCpu:
    """Two readings' difference, per data segment (`messages`)."""

    window_s: float
    ranks: int
    messages: int
    pure_acks_per_message: float
    retransmitted: int
    rank_run_us: float  # the rank processes' CPU (system calls and the softirq work done in them included)
    rank_wait_us: float  # runnable, waiting for a CPU
    voluntary_switches: float  # a rank slept (a blocking receive)
    involuntary_switches: float  # a rank was preempted
    machine_busy_us: float  # every CPU's non-idle time, whatever ran
    machine_shares: tuple[tuple[str, float], ...]  # CPU_COLUMNS' shares of the machine's time
    softirq_us: float  # ticks that landed in softirq (coarse: 100 Hz sampling), inside rank_run_us when a rank ran
    ipis_per_message: tuple[tuple[str, float], ...]
    net_rx_per_message: float

    @property
    def rank_share_of_busy(self) -> float:
        return self.rank_run_us / self.machine_busy_us if self.machine_busy_us else 0.0


def parse_schedstat(text: str) -> tuple[int, int]:
    """/proc/PID/schedstat: (run ns, wait ns)."""
    run, wait, _slices = text.split()
    return int(run), int(wait)


def parse_switches(status: str) -> tuple[int, int]:
    """/proc/PID/status: (voluntary, involuntary) context switches."""
    values = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return int(values["voluntary_ctxt_switches"]), int(values["nonvoluntary_ctxt_switches"])


def parse_cpu_total(stat: str) -> tuple[int, ...]:
    """/proc/stat's "cpu" line (all CPUs): the CPU_COLUMNS in jiffies."""
    for line in stat.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            return tuple(int(v) for v in fields[1:1 + len(CPU_COLUMNS)])
    raise ValueError("/proc/stat has no cpu line")


def parse_interrupts(text: str, names: tuple[str, ...] = IPI_NAMES) -> tuple[int, ...]:
    """/proc/interrupts: each named row summed over the CPUs (the numeric columns after the name)."""
    lines = text.splitlines()
    cpus = len(lines[0].split())
    rows = {}
    for line in lines[1:]:
        fields = line.split()
        if fields and fields[0].rstrip(":") in names:
            rows[fields[0].rstrip(":")] = sum(int(v) for v in fields[1:1 + cpus] if v.isdigit())
    return tuple(rows.get(name, 0) for name in names)


def parse_softirq(text: str, name: str = "NET_RX") -> int:
    """/proc/softirqs: one row summed over the CPUs."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == f"{name}:":
            return sum(int(v) for v in fields[1:])
    raise ValueError(f"/proc/softirqs has no {name} row")


def parse_tcp(snmp: str, netstat: str) -> tuple[int, int, int]:
    """/proc/net/snmp and /proc/net/netstat of one namespace: (segments sent, data segments sent, retransmitted)."""
    values: dict[str, int] = {}
    for text in (snmp, netstat):
        lines = text.splitlines()
        for head, data in zip(lines[0::2], lines[1::2]):
            keys, numbers = head.split(), data.split()
            for key, number in zip(keys[1:], numbers[1:]):
                values[keys[0] + key] = int(number)
    return values["Tcp:OutSegs"], values["TcpExt:TCPOrigDataSent"], values["Tcp:RetransSegs"]


def difference(a: Counters, b: Counters, *, jiffy_us: float) -> OpCpu:
    """What happened between readings `a` and `b`, per data segment sent (an error where none was)."""
    messages = b.tcp_data_segments_out - a.tcp_data_segments_out
    if messages <= 0:
        raise ValueError("no data segment was sent between the two readings: is the bench's timed loop running?")
    jiffies = [y - x for x, y in zip(a.cpu_jiffies, b.cpu_jiffies)]
    total = sum(jiffies) or 1
    idle = jiffies[CPU_COLUMNS.index("idle")] + jiffies[CPU_COLUMNS.index("iowait")]
    per = 1.0 / messages
    return OpCpu(
        window_s=b.time_s - a.time_s, ranks=b.ranks, messages=messages,
        pure_acks_per_message=(b.tcp_segments_out - a.tcp_segments_out - messages) * per,
        retransmitted=b.tcp_retransmitted - a.tcp_retransmitted,
        rank_run_us=(b.rank_run_ns - a.rank_run_ns) / 1e3 * per,
        rank_wait_us=(b.rank_wait_ns - a.rank_wait_ns) / 1e3 * per,
        voluntary_switches=(b.rank_voluntary_switches - a.rank_voluntary_switches) * per,
        involuntary_switches=(b.rank_involuntary_switches - a.rank_involuntary_switches) * per,
        machine_busy_us=(total - idle) * jiffy_us * per,
        machine_shares=tuple((name, j / total) for name, j in zip(CPU_COLUMNS, jiffies)),
        softirq_us=jiffies[CPU_COLUMNS.index("softirq")] * jiffy_us * per,
        ipis_per_message=tuple((name, (y - x) * per) for name, x, y in zip(IPI_NAMES, a.ipis, b.ipis)),
        net_rx_per_message=(b.net_rx_softirqs - a.net_rx_softirqs) * per)


def describe(op: OpCpu) -> str:
    shares = ", ".join(f"{name} {share:.0%}" for name, share in op.machine_shares if share >= 0.005)
    ipis = ", ".join(f"{name} {v:.3f}" for name, v in op.ipis_per_message)
    return (f"{op.messages} messages in {op.window_s:.1f} s, {op.ranks} rank processes; per message: "
            f"ranks' CPU {op.rank_run_us:.1f} us (waited for a CPU {op.rank_wait_us:.1f} us), "
            f"{op.voluntary_switches:.2f} sleeps, {op.involuntary_switches:.2f} preemptions, "
            f"{op.pure_acks_per_message:.3f} pure ACKs, NET_RX softirqs {op.net_rx_per_message:.2f}, IPIs {ipis}; "
            f"softirq ticks {op.softirq_us:.1f} us; machine busy {op.machine_busy_us:.1f} us "
            f"(the ranks {op.rank_share_of_busy:.0%} of it; machine: {shares}); retransmitted {op.retransmitted}")


# --- reading the machine (root) ---

def _namespace_inodes(testbed: str) -> dict[int, str]:
    from genie.testbed.service import load_info
    names = [h.netns for h in load_info(testbed).hosts if h.netns]
    return {os.stat(f"/run/netns/{name}").st_ino: name for name in names}


def cpu_of_host(affinity: str, host_index: int, hosts: int, cpus: int) -> int | None:
    """The CPU `--affinity` pins the ranks of host `host_index` (of `hosts`) to; None: not pinned."""
    if affinity == "none":
        return None
    if affinity == "one":
        return 0
    if affinity == "halves":
        return min(cpus - 1, host_index * 2 // hosts)
    raise ValueError(f"unknown affinity {affinity!r} (none, halves, one)")


def _pin(inodes: dict[int, str], affinity: str, bench: subprocess.Popen) -> None:
    """Wait for a rank in every namespace (up to 30 s), then pin each as `affinity` says."""
    order = list(inodes.values())  # the testbed's hosts in order: rank i runs on host i
    deadline = time.monotonic() + 30
    while True:
        pids = rank_processes(inodes)
        if len(set(pids.values())) == len(order) or time.monotonic() > deadline or bench.poll() is not None:
            break
        time.sleep(0.02)
    for pid, name in pids.items():
        cpu = cpu_of_host(affinity, order.index(name), len(order), os.cpu_count() or 1)
        if cpu is not None:
            try:
                os.sched_setaffinity(pid, {cpu})
            except OSError:  # ended meanwhile
                pass


def rank_processes(inodes: dict[int, str]) -> dict[int, str]:
    """Every process in one of the namespaces: {pid: namespace}."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                name = inodes.get(os.stat(f"/proc/{entry}/ns/net").st_ino)
            except OSError:  # gone meanwhile, or a kernel thread
                continue
            if name is not None:
                found[int(entry)] = name
    return found


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def read_counters(pids: dict[int, str]) -> Counters:
    run = wait = voluntary = involuntary = 0
    for pid in pids:
        r, w = parse_schedstat(_read(f"/proc/{pid}/schedstat"))
        v, i = parse_switches(_read(f"/proc/{pid}/status"))
        run, wait, voluntary, involuntary = run + r, wait + w, voluntary + v, involuntary + i
    tcp = [0, 0, 0]
    for pid in {ns: pid for pid, ns in pids.items()}.values():  # one process per namespace reads its counters
        for k, v in enumerate(parse_tcp(_read(f"/proc/{pid}/net/snmp"), _read(f"/proc/{pid}/net/netstat"))):
            tcp[k] += v
    return Counters(time.monotonic(), len(pids), run, wait, voluntary, involuntary,
                    parse_cpu_total(_read("/proc/stat")), parse_interrupts(_read("/proc/interrupts")),
                    parse_softirq(_read("/proc/softirqs")), *tcp)


def _measure(args: argparse.Namespace, tree: str | None, inodes: dict[int, str],
             affinity: str) -> tuple[OpCpu, str]:
    env = os.environ.copy()
    if tree:
        env["PYTHONPATH"] = tree
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "genie.cli.main", "bench", "--testbed", args.testbed, "-c", "0",
                "--no-in-place", "--sample-ms", "0", "--genie-columns", "-n", str(args.iterations), "-w", "20",
                "-b", args.size, "-e", args.size, "--collective", args.collective, "--algorithm", args.algorithm,
                "--out", str(Path(tmp) / "run")]
        bench = subprocess.Popen(argv, env=env, cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            started = time.monotonic()
            _pin(inodes, affinity, bench)
            time.sleep(max(0.0, args.settle - (time.monotonic() - started)))
            pids = rank_processes(inodes)
            first = read_counters(pids)
            time.sleep(args.seconds)
            second = read_counters(pids)
            if bench.poll() is not None:
                raise SystemExit("error: the bench ended before the window closed: raise -n or lower --settle")
        except OSError as exc:  # a rank ended while being read: the same
            bench.kill()
            raise SystemExit(f"error: a rank process ended during the window ({exc}): raise -n") from None
        out, _ = bench.communicate()
    if bench.returncode != 0:
        raise SystemExit(f"error: the bench failed:\n{out}")
    row = next((line for line in out.splitlines() if line.split() and line.split()[0].isdigit()), "")
    return difference(first, second, jiffy_us=1e6 / os.sysconf("SC_CLK_TCK")), row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.op_cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--testbed", required=True, help="a testbed that is up (genie testbed up ... --name NAME)")
    p.add_argument("--tree", action="append", help="a genie checkout to run (repeatable; default: this one)")
    p.add_argument("-b", "--size", default="1K")
    p.add_argument("--collective", default="all_reduce")
    p.add_argument("--algorithm", default="auto")
    p.add_argument("-n", "--iterations", type=int, default=20000, help="enough to outlast --settle + --seconds")
    p.add_argument("--settle", type=float, default=8.0, help="seconds from the bench's start to the first reading")
    p.add_argument("--seconds", type=float, default=4.0, help="seconds between the two readings")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--affinity", default="none", help="comma-separated: none, halves, one (see the module doc)")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("error: reading the rank processes' counters needs root", file=sys.stderr)
        return 2
    affinities = args.affinity.split(",")
    for affinity in affinities:
        try:
            cpu_of_host(affinity, 0, 2, 2)
        except ValueError as exc:
            print(f"error: --affinity: {exc}", file=sys.stderr)
            return 2
    inodes = _namespace_inodes(args.testbed)
    for round_ in range(1, args.rounds + 1):
        for tree in args.tree or [None]:
            for affinity in affinities:
                load = os.getloadavg()[0]
                op, row = _measure(args, tree, inodes, affinity)
                print(f"# round {round_}, {tree or 'this checkout'}, affinity {affinity}, load {load:.1f}: "
                      f"{describe(op)}")
                print(f"#   bench: {' '.join(row.split())}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
