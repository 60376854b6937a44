"""The step's software (issue #36 item 2; run by hand, not a test): what one schedule step costs a rank, and
genie checkouts side by side on small all-reduces.

    python -m benchmarks.step_cost loopback [--tree DIR ...] [--sizes 8,1024] [--ops 20000] [--rounds 3]
    sudo .venv/bin/python -m benchmarks.step_cost testbed --testbed NAME --tree A --tree B [--rounds 4]

`loopback`: two rank processes over loopback TCP with a connection per direction, a 2-rank all-reduce
(recursive doubling: one step, a send and a receive per op) run by the checkout's `run_schedule` on its
`SocketTransport`, beside a bare `send` / `recv_into` loop on the same sockets: CPU microseconds per op of
rank 0 (its process time over the timed ops). The difference is the Python of genie's step; the bare loop is
what is left without it (system calls, loopback TCP, the context switch).

`testbed`: `genie bench` of each checkout on a testbed that is up (64 B and 1 KiB all-reduce
with `auto` and with `ring`), the checkouts' runs interleaved round by round so that a busy machine weighs on
all of them alike; per case the median of the rounds' medians, and each checkout's ratio to the first.

Each --tree DIR runs the checkout in DIR (PYTHONPATH=DIR, from DIR); without --tree, the genie this
interpreter imports.
"""

from __future__ import annotations

import argparse
import csv
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# each bench's first size also carries the ranks' start-up (imports, connecting) in its CPU: a throwaway size
TESTBED_CASES = (
    ("all_reduce 64 B, 1 KiB (auto)", ["-b", "4", "-e", "1K", "-f", "16"]),  # 4 B: throwaway
    ("all_reduce 1 KiB (ring)", ["-b", "512", "-e", "1K", "-f", "2", "--algorithm", "ring"]),
)
SIZES_SHOWN = {"all_reduce 64 B, 1 KiB (auto)": (64, 1024), "all_reduce 1 KiB (ring)": (1024,)}


def _child(size_bytes: int, ops: int, mode: str) -> None:
    """Rank 0 and rank 1 (a fork) of a 2-rank recursive-doubling all-reduce; rank 0 prints its CPU us/op."""
    from genie.collectives.registry import build_schedule
    from genie.core.collective import Algorithm, Collective
    from genie.core.congestion import CongestionControl
    from genie.core.schedule import CollectiveOp
    from genie.engine import executor
    from genie.engine import transport as tp
    from genie.engine.links import _tune

    listener = socket.create_server(("127.0.0.1", 0))
    a_out = socket.create_connection(listener.getsockname())
    b_in, _ = listener.accept()
    b_out = socket.create_connection(listener.getsockname())
    a_in, _ = listener.accept()
    for sock in (a_out, b_in, b_out, a_in):
        _tune(sock, None, CongestionControl.CUBIC)
    schedule = build_schedule(CollectiveOp(Collective.ALL_REDUCE, size_bytes, (0, 1),
                                           Algorithm.RECURSIVE_DOUBLING))
    child = os.fork()
    rank = 1 if child == 0 else 0
    if hasattr(tp, "PeerLink"):  # a connection per direction
        link = tp.PeerLink(a_out, a_in) if rank == 0 else tp.PeerLink(b_out, b_in)
        send_sock, recv_sock = link.send, link.recv
    else:  # a checkout from before it: one connection per peer, both ways
        link = send_sock = recv_sock = a_out if rank == 0 else b_in
    mine = schedule.for_rank(rank)

    def genie_ops(n: int) -> None:
        transport = tp.SocketTransport(rank, {1 - rank: link})
        plan = {"plan": executor.transfer_plan(mine)} if hasattr(executor, "transfer_plan") else {}
        for _ in range(n):
            executor.run_schedule(mine, transport, timeout_s=30, **plan)

    def bare_ops(n: int) -> None:
        window = memoryview(bytearray(size_bytes))
        send, recv_into = send_sock.send, recv_sock.recv_into
        for _ in range(n):
            send(window)
            got = 0
            while got < size_bytes:
                got += recv_into(window[got:])

    run = genie_ops if mode == "genie" else bare_ops
    run(200)
    cpu0 = time.process_time()
    run(ops)
    cpu_us = (time.process_time() - cpu0) * 1e6 / ops
    if child:
        os.waitpid(child, 0)
        print(f"{cpu_us:.2f}")
    else:
        os._exit(0)


def _tree_env(tree: str | None) -> tuple[dict[str, str], str | None]:
    env = os.environ.copy()
    if tree:
        env["PYTHONPATH"] = tree
    return env, tree


def loopback(args: argparse.Namespace) -> int:
    trees = args.tree or [None]
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[tuple[str, int, str], list[float]] = {}
    for _ in range(args.rounds):
        for size in sizes:
            for tree in trees:
                for mode in ("genie", "bare"):
                    env, cwd = _tree_env(tree)
                    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "_child", str(size),
                                          str(args.ops), mode], env=env, cwd=cwd, capture_output=True,
                                         text=True, check=True).stdout
                    results.setdefault((tree or "this", size, mode), []).append(float(out.split()[-1]))
    print(f"# CPU us per op of rank 0, 2 ranks over loopback TCP, median of {args.rounds} rounds; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"# {'tree':<30} {'size_B':>7} {'genie':>8} {'bare':>8} {'genie-bare':>10}")
    for size in sizes:
        for tree in trees:
            g = statistics.median(results[(tree or "this", size, "genie")])
            b = statistics.median(results[(tree or "this", size, "bare")])
            print(f"  {tree or 'this':<30} {size:>7} {g:>8.1f} {b:>8.1f} {g - b:>10.1f}")
    return 0


def _bench(tree: str | None, testbed: str, case: list[str], iterations: int) -> dict[int, tuple[float, float]]:
    """One `genie bench` of `tree`: {size_bytes: (median us (genie's median column), the ranks' CPU us per op)}.
    The CPU is the 8 rank processes' summed /proc/PID/schedstat run time over the case's timed iterations
    (rank_cpu.csv) over its timed ops: less swayed by other work on the machine than the wall time."""
    env, cwd = _tree_env(tree)
    warmup = 20
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "genie.cli.main", "bench", "--testbed", testbed, "-c", "0", "--no-in-place",
                "--sample-ms", "0", "--genie-columns", "-n", str(iterations), "-w", str(warmup), "--out",
                str(Path(tmp) / "run"), *case]
        out = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=True).stdout
        cpu_ms: dict[int, float] = {}
        with open(Path(tmp) / "run" / "rank_cpu.csv") as f:
            for row in csv.DictReader(f):
                cpu_ms[int(row["size_bytes"])] = cpu_ms.get(int(row["size_bytes"]), 0.0) + float(row["cpu_ms"])
    rows: dict[int, tuple[float, float]] = {}
    for line in out.splitlines():
        fields = line.split()
        if fields and fields[0].isdigit() and not line.startswith("#"):
            size = int(fields[0])
            rows[size] = (float(fields[-2]), cpu_ms.get(size, float("nan")) * 1e3 / iterations)
    return rows


def testbed(args: argparse.Namespace) -> int:
    trees = args.tree or [None]
    medians: dict[tuple[str, int, str], list[tuple[float, float]]] = {}
    loads: list[float] = []
    for _ in range(args.rounds):
        for label, case in TESTBED_CASES:
            for tree in trees:
                loads.append(os.getloadavg()[0])
                for size, values in _bench(tree, args.testbed, case, args.iterations).items():
                    if size in SIZES_SHOWN[label]:
                        medians.setdefault((label, size, tree or "this"), []).append(values)
    print(f"# genie bench medians (us) and the 8 ranks' CPU per op (us), median of {args.rounds} interleaved "
          f"rounds of -n {args.iterations}; load average {min(loads):.1f}-{max(loads):.1f}")
    first = trees[0] or "this"
    for (label, size, tree), values in medians.items():
        m = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        base = medians[(label, size, first)]
        ratio = m / statistics.median(v[0] for v in base)
        cpu_ratio = cpu / statistics.median(v[1] for v in base)
        print(f"  {label:<30} {size:>6} B  {tree:<30} {m:>9.1f}  x{ratio:.2f}   cpu/op {cpu:>7.0f}  x{cpu_ratio:.2f}  "
              f"({' '.join(f'{v[0]:.0f}' for v in values)})")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_child"]:
        _child(int(argv[1]), int(argv[2]), argv[3])
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks.step_cost")
    sub = parser.add_subparsers(dest="what", required=True)
    lo = sub.add_parser("loopback")
    lo.add_argument("--tree", action="append")
    lo.add_argument("--sizes", default="8,1024")
    lo.add_argument("--ops", type=int, default=20000)
    lo.add_argument("--rounds", type=int, default=3)
    tb = sub.add_parser("testbed")
    tb.add_argument("--testbed", required=True)
    tb.add_argument("--tree", action="append")
    tb.add_argument("--rounds", type=int, default=4)
    tb.add_argument("--iterations", type=int, default=400)
    args = parser.parse_args(argv)
    return loopback(args) if args.what == "loopback" else testbed(args)


if __name__ == "__main__":
    sys.exit(main())
