"""What rank programs are asked to do, as plain data that crosses the control channel as JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from genie.core.collective import Algorithm, Collective
from genie.core.schedule import CollectiveOp


@dataclass(frozen=True)
class BenchCase:
    """Run `op` `warmup` times untimed, then `iterations` times back to back, timing each iteration."""

    op: CollectiveOp
    warmup: int
    iterations: int


@dataclass(frozen=True)
class BenchJob:
    cases: tuple[BenchCase, ...]
    verify: bool = False
    timeout_s: float = 60.0
    record_steps: bool = False
    fault_points: tuple[int, ...] = ()  # timed ops (over the whole sweep) before which faults are injected
    faults: bool = False  # tag barriers for the orchestrator's fault injector (timed starts, fault points)


def op_to_json(op: CollectiveOp) -> dict[str, Any]:
    return {"collective": op.collective.value, "size_bytes": op.size_bytes, "group": list(op.group),
            "algorithm": op.algorithm.value, "root": op.root, "peer": op.peer, "chunks": op.chunks,
            "dtype_bytes": op.dtype_bytes}


def op_from_json(d: dict[str, Any]) -> CollectiveOp:
    return CollectiveOp(collective=Collective(d["collective"]), size_bytes=int(d["size_bytes"]),
                        group=tuple(int(r) for r in d["group"]), algorithm=Algorithm(d["algorithm"]),
                        root=int(d["root"]), peer=None if d["peer"] is None else int(d["peer"]),
                        chunks=int(d["chunks"]), dtype_bytes=int(d["dtype_bytes"]))


def bench_job_to_json(job: BenchJob) -> dict[str, Any]:
    return {"kind": "bench", "verify": job.verify, "timeout_s": job.timeout_s, "record_steps": job.record_steps,
            "fault_points": list(job.fault_points), "faults": job.faults,
            "cases": [{"op": op_to_json(c.op), "warmup": c.warmup, "iterations": c.iterations} for c in job.cases]}


def bench_job_from_json(d: dict[str, Any]) -> BenchJob:
    return BenchJob(cases=tuple(BenchCase(op_from_json(c["op"]), int(c["warmup"]), int(c["iterations"]))
                                for c in d["cases"]),
                    verify=bool(d["verify"]), timeout_s=float(d["timeout_s"]), record_steps=bool(d["record_steps"]),
                    fault_points=tuple(int(k) for k in d.get("fault_points") or ()), faults=bool(d.get("faults")))
