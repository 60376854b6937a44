"""`genie trace capture`: run a user's PyTorch script under torchrun on this machine (CPU, gloo), trace one
step per rank, import the traces and write a replayable trace set plus a summary.

Output directory (written under a temporary name, renamed when complete; a job that fails or times out leaves
only ``torchrun.log``, its ranks' output, which the error names, and a later capture may reuse that directory):
``raw/`` the execution, Kineto and step-time files of every rank; ``<name>.<rank>.et`` (+ comm_group.json) the
Chakra ET set (ASTRA-sim, ``genie replay``); ``summary.json`` collectives by type, size and group, compute and
step time per rank, the untraced step time (the capture's overhead is traced / untraced).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import median

from genie.core.errors import EnvironmentProblem, GenieError, InputError
from genie.core.files import write_atomic
from genie.core.process import die_with_parent
from genie.services.trace_import import CommLine, comm_lines
from genie.workloads.loader import OutputFormat, save_trace
from genie.workloads.pytorch_files import read_pytorch_set
from genie.workloads.pytorch_import import ImportResult

HARNESS = Path(__file__).resolve().parents[1] / "capture" / "torch_harness.py"
LOG_NAME = "torchrun.log"  # the job's output (every rank's stdout and stderr, torchrun's own)
_ERROR_LINE = re.compile(r"(?:^|\]:\s*)([A-Za-z_][\w.]*(?:Error|Exception|Interrupt)\b.*)$")


@dataclass(frozen=True)
class CaptureRequest:
    script: str
    args: tuple[str, ...]
    out_dir: str
    nproc: int = 4
    warmup_steps: int = 2
    timeout_s: float = 600.0
    python: str = sys.executable


@dataclass(frozen=True)
class RankTiming:
    rank: int
    untraced_step_ms: float | None  # median of the untraced steps after the first
    traced_step_ms: float


@dataclass(frozen=True)
class CaptureOutcome:
    out_dir: Path
    et_prefix: Path
    result: ImportResult
    comms: tuple[CommLine, ...]
    timings: tuple[RankTiming, ...]
    capture_s: float


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_ROOT_RANK = re.compile(r"^rank\s*:\s*(\d+)")
_ROOT_EXIT = re.compile(r"^exitcode\s*:\s*(-?\d+)\s*\(pid: (\d+)\)\s*\(?(SIG[A-Z0-9]+)?")
_CXX_ABORT = re.compile(r"^(?:terminate called .*|what\(\):\s*\S.*|Fatal Python error: .*)$")  # C, C++ crashes


def _root_cause(lines: list[str]) -> str | None:
    """torchrun's "Root Cause (first observed failure)" block as one phrase: which rank, how it ended."""
    try:
        start = next(i for i, ln in enumerate(lines) if ln.startswith("Root Cause"))
    except StopIteration:
        return None
    rank = code = None
    for ln in lines[start:]:
        if rank is None and (m := _ROOT_RANK.match(ln)):
            rank = m.group(1)
        elif code is None and (m := _ROOT_EXIT.match(ln)):
            code = m
    if rank is None or code is None:
        return None
    how = (f"was killed by {code.group(3) or 'signal ' + code.group(1)[1:]}" if int(code.group(1)) < 0
           else f"exited with code {code.group(1)}")
    return f"rank {rank} (pid {code.group(2)}) {how}"


def _failure_line(text: str) -> str:
    """The most telling line of a failed job's output, as one line: torchrun's root cause when a signal ended
    that rank (it printed no error of its own; the others' errors follow from it), then the first exception line
    (the rank that failed first; the others fail after it) or a C++ abort's line, then the root cause when it
    exited with a code; else the last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    error = next((m.group(1) for ln in lines if (m := _ERROR_LINE.search(ln)) and "ChildFailedError" not in ln),
                 None)
    abort = next((ln for ln in lines if _CXX_ABORT.match(ln)), None)
    cause = _root_cause(lines)
    first = error or abort
    if cause is not None and "killed by" in cause:
        return "; ".join(p for p in (cause, first) if p)
    if first is not None:
        return first if cause is None else f"{first} ({cause})"
    return cause or (lines[-1] if lines else "no output")


def _descendants(pid: int) -> list[int]:
    """The pids of `pid`'s descendants (from /proc), children first."""
    parent_of: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent_of[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, frontier = [], [pid]
    while frontier:
        kids = [p for p, pp in parent_of.items() if pp in frontier]
        out += kids
        frontier = kids
    return out


def _kill_tree(pid: int) -> None:
    """SIGKILL the job we started (torchrun, `pid`) and every process under it, by pid."""
    targets = _descendants(pid)
    os.killpg(pid, signal.SIGKILL)  # torchrun's own group (start_new_session)
    for p in targets:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def check_torch(python: str) -> None:
    probe = subprocess.run([python, "-c", "import torch, torch.distributed.run"], capture_output=True, text=True,
                           timeout=120)
    if probe.returncode != 0:
        raise EnvironmentProblem("genie trace capture needs torch: pip install -e '.[capture]' "
                                 "(torch==2.13.0, the CPU build)")


def _run_job(request: CaptureRequest, raw: Path, kept_log: Path) -> None:
    """Run the job, its output in ``raw/../torchrun.log``; GenieError naming `kept_log` (where capture() keeps
    that log) when it fails or times out."""
    argv = [request.python, "-m", "torch.distributed.run", f"--nproc_per_node={request.nproc}",
            "--master_addr=127.0.0.1", f"--master_port={_free_port()}", str(HARNESS), "--out", str(raw),
            "--warmup", str(request.warmup_steps), str(Path(request.script).resolve()), *request.args]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    log = raw.parent / LOG_NAME
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True, preexec_fn=die_with_parent)  # a SIGKILLed genie: it ends too
        try:
            code = proc.wait(timeout=request.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_tree(proc.pid)  # torchrun puts each rank in a process group of its own: kill by pid
            proc.wait()
            raise GenieError(f"{request.script}: capture timed out after {request.timeout_s:g} s; last output: "
                             f"{_failure_line(log.read_text(errors='replace'))} (torchrun's log: {kept_log})"
                             ) from None
        except BaseException:  # Ctrl-C, SIGTERM: leave nothing running
            _kill_tree(proc.pid)
            proc.wait()
            raise
    if code != 0:
        raise InputError(f"the script failed under torchrun (exit {code}): "
                         f"{_failure_line(log.read_text(errors='replace'))} (torchrun's log: {kept_log})",
                         source=request.script)


def _timings(raw: Path, nproc: int) -> tuple[RankTiming, ...]:
    out = []
    for rank in range(nproc):
        doc = json.loads((raw / f"steps.{rank}.json").read_text())
        untraced = doc["untraced_step_s"][1:]  # the first includes the script's start-up
        out.append(RankTiming(rank, round(median(untraced) * 1e3, 3) if untraced else None,
                              round(doc["traced_step_s"] * 1e3, 3)))
    return tuple(out)


def capture(request: CaptureRequest) -> CaptureOutcome:
    import time
    if not Path(request.script).is_file():
        raise InputError("no such script", source=request.script)
    if request.nproc < 1:
        raise InputError("must be at least 1", path="nproc")
    if request.warmup_steps < 0:
        raise InputError("must be at least 0", path="warmup_steps")
    out = Path(request.out_dir)
    if out.exists() and any(p.name != LOG_NAME for p in out.iterdir()):  # a failed capture's log: replaced
        raise InputError("output directory exists and is not empty", source=str(out), path="out_dir")
    check_torch(request.python)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.capture-", dir=out.parent))
    try:
        raw = work / "raw"
        raw.mkdir()
        started = time.perf_counter()
        try:
            _run_job(request, raw, out / LOG_NAME)
        except GenieError:  # keep the ranks' output where the error says
            out.mkdir(exist_ok=True)
            os.replace(work / LOG_NAME, out / LOG_NAME)
            raise
        capture_s = time.perf_counter() - started
        result = read_pytorch_set([raw])
        name = re.sub(r"[^\w.-]", "_", Path(request.script).stem) or "job"
        save_trace(result.trace, work / name, to=OutputFormat.ET)
        timings = _timings(raw, request.nproc)
        comms = comm_lines(result)
        summary = {"script": request.script, "args": list(request.args), "nproc": request.nproc,
                   "collectives": [asdict(c) for c in comms],
                   "ranks": [dict(asdict(t), compute_ms=round(r.compute_ns / 1e6, 3),
                                  gap_compute_ms=round(r.gap_compute_ns / 1e6, 3),
                                  gap_wait_ms=round(r.gap_wait_ns / 1e6, 3),
                                  step_ms=None if r.step_ns is None else round(r.step_ns / 1e6, 3),
                                  comm_ops=r.comm_ops) for t, r in zip(timings, result.ranks)],
                   "warnings": list(result.warnings), "capture_s": round(capture_s, 3)}
        write_atomic(work / "summary.json", json.dumps(summary, indent=1) + "\n")
        if out.exists():
            (out / LOG_NAME).unlink(missing_ok=True)
            out.rmdir()
        work.rename(out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return CaptureOutcome(out, out / name, result, comms, timings, capture_s)
