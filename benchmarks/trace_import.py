"""`genie trace capture` overhead and `genie trace import` time (issue #15).

    python -m benchmarks.trace_import [--ops 1000] [--repeat 5] [--out DIR]

Captures a 4-rank gloo job written here (per step: OPS/4 small ops and all-reduces per rank, so each rank's
trace has ~OPS operator nodes) with `genie trace capture`, then imports its raw traces REPEAT times. Prints the
traced and untraced step time per rank (median of the untraced steps after the first; the capture's overhead is
their ratio), the nodes per rank and the median import time. Needs torch (the `capture` extra)."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from statistics import median

JOB = '''
import sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
n = int(sys.argv[1])
w = torch.nn.Parameter(torch.ones(256))
opt = torch.optim.SGD([w], lr=0.01)
for step in range(6):
    x = torch.ones(256)
    for i in range(n):
        x = x * 1.0001 + 0.0001
        if i % 8 == 0:
            dist.all_reduce(x)
    (w * x).sum().backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
'''


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default=None)
    opts = parser.parse_args()
    from genie.services.trace_capture import CaptureRequest, capture
    from genie.workloads.pytorch_files import read_pytorch_set

    work = Path(opts.out or tempfile.mkdtemp(prefix="genie-trace-import-"))
    work.mkdir(parents=True, exist_ok=True)
    script = work / "job.py"
    script.write_text(JOB)
    outcome = capture(CaptureRequest(str(script), (str(opts.ops // 4),), str(work / "cap"), nproc=4))
    nodes = [len(r.nodes) for r in outcome.result.trace.ranks]
    host_nodes = len(json.loads((work / "cap" / "raw" / "host.0.json").read_text())["nodes"])
    times = []
    for _ in range(opts.repeat):
        t0 = time.perf_counter()
        read_pytorch_set([work / "cap" / "raw"])
        times.append(time.perf_counter() - t0)
    print(f"capture: {outcome.capture_s:.1f} s for the whole job (torchrun start-up, {4} ranks, 3 steps)")
    for t in outcome.timings:
        ratio = t.traced_step_ms / t.untraced_step_ms if t.untraced_step_ms else float("nan")
        print(f"  rank {t.rank}: traced step {t.traced_step_ms:.1f} ms, untraced {t.untraced_step_ms:.1f} ms "
              f"(x{ratio:.2f})")
    print(f"execution-trace nodes (rank 0): {host_nodes}; genie nodes per rank: {nodes}")
    print(f"import (4 ranks): median {median(times) * 1e3:.1f} ms over {opts.repeat}, "
          f"min {min(times) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
