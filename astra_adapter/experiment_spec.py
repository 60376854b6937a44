"""``genie experiment`` files: what to measure, estimate and replay (pure parsing and planning).

```yaml
name: ddp-resnet50-star8             # optional; default: the file name
workload:                            # exactly one of trace / generate / jobs
  trace: ../traces/gen_ddp_resnet50  # any trace genie reads; relative paths are relative to this file
  npus: 8                            # only for ASTRA-sim text workloads
  # generate: {model: gpt3-125m, layers: 2, seq: 512, dp: 8, batch: 2}   # `genie trace gen` options
  # jobs: two-jobs.yaml              # a job mix (docs/jobs.md): every job alone and together, per job
topology: ../topologies/star-8.yaml
rounds: 3                            # sweep and replay alternate in rounds (default 1); iterations are split
                                     # over the rounds (rounded up) and pooled
algorithms:                          # pinned on the trace's collectives, for the replay and for the model
  all_reduce: ring                   # default ring (all_reduce, all_gather, reduce_scatter), direct (all_to_all);
  all_to_all: direct                 # `auto` keeps the trace's hints / the size-based choice
sweep:
  iterations: 5                      # timed iterations per measured size (median); default 5
  warmup: 1
  grid: [64KiB, 1MiB, 8MiB]          # extra sizes per measured collective, for the calibration
replay:
  iterations: 3                      # timed iterations of the whole trace (median); default 3
  warmup: 1
  timeout: 120                       # seconds per op
estimate:
  share_nic: true                    # measured mode: concurrent ops share a rank's link
  fit_endpoint_delay: false          # calibration: also fit system.json's endpoint-delay (else 10 ns)
```

Unknown keys and bad values raise :class:`InputError` naming the file and the key (``sweep.iterations``).
The sweep is planned from the trace: every (collective, algorithm, group size) it runs, at exactly the sizes
it uses plus the grid (:func:`plan_sweep`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any


from genie.collectives.registry import choose_algorithm
from genie.core.collective import Algorithm, Collective
from genie.core.errors import InputError, shown
from genie.core.limits import MAX_TIMEOUT_S
from genie.core.sizes import aligned_size
from genie.input_yaml import as_text, parse_yaml
from genie.core.files import InputKind, read_input
from genie.core.trace import AttrType, NodeKind, Trace
from genie.core.units import parse_size_bytes
from genie.workloads.generators.options import GENERATOR_OPTIONS, GeneratorOptions, generate_from_options

from astra_adapter.measurements import CommOp, comm_op, trace_splits

DEFAULT_ALGORITHMS = ((Collective.ALL_REDUCE, Algorithm.RING), (Collective.ALL_GATHER, Algorithm.RING),
                      (Collective.REDUCE_SCATTER, Algorithm.RING), (Collective.ALL_TO_ALL, Algorithm.DIRECT))
SWEEP_WARMUP = 3
DEFAULT_GRID_BYTES = (64 << 10, 1 << 20, 8 << 20)
_TOP_KEYS = ("name", "workload", "topology", "algorithms", "rounds", "sweep", "replay", "estimate")


@dataclass(frozen=True)
class WorkloadSpec:
    trace_path: Path | None = None
    generate: tuple[tuple[str, Any], ...] = ()
    npus: int | None = None
    jobs_path: Path | None = None  # a job mix file (genie.workloads.jobmix_file): the experiment runs per job

    def describe(self) -> str:
        if self.jobs_path is not None:
            return f"jobs:{self.jobs_path.name}"
        if self.trace_path is not None:
            return self.trace_path.name
        return "generated:" + ",".join(f"{k}={v}" for k, v in self.generate)


@dataclass(frozen=True)
class ExperimentSpec:
    name: str
    source: str
    workload: WorkloadSpec
    topology_path: Path
    algorithms: tuple[tuple[Collective, Algorithm], ...] = DEFAULT_ALGORITHMS
    sweep_iterations: int = 5
    # each sweep round is a new session with new connections, whose receive windows grow over the first few
    # big iterations: one warmup left a 12 MiB all-to-all 5-10% slow (docs/astra.md, "Experiments")
    sweep_warmup: int = SWEEP_WARMUP
    grid_bytes: tuple[int, ...] = DEFAULT_GRID_BYTES
    replay_iterations: int = 3
    replay_warmup: int = 1
    timeout_s: float = 120.0
    share_nic: bool = True
    fit_endpoint_delay: bool = False
    rounds: int = 1
    #: a real cluster's calibration (a `genie calibrate` run directory or its nccl_calibration.json): the trace is
    #: also estimated by the NCCL model on the experiment's topology and compared with the replay
    nccl_calibration: Path | None = None


@dataclass(frozen=True)
class SweepCase:
    """One bench curve: ``collective`` with ``algorithm`` (None: chosen per size, as auto) on groups of ``ranks``
    ranks; ``groups`` (disjoint, global ranks) run it at the same time, as the trace's sibling groups do."""

    collective: Collective
    algorithm: Algorithm | None
    ranks: int
    sizes: tuple[int, ...]
    groups: tuple[tuple[int, ...], ...] = ()

    def op(self, size_bytes: int) -> CommOp:
        algorithm = self.algorithm or choose_algorithm(self.collective, size_bytes, self.ranks)
        return CommOp(self.collective, algorithm, self.ranks, size_bytes, auto=self.algorithm is None)


# ---- parsing ------------------------------------------------------------------------------------------
class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, message: str, path: str | None = None) -> InputError:
        return InputError(message, source=self.source, path=path)

    def mapping(self, value: Any, path: str, allowed: tuple[str, ...]) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(f"expected a mapping, got {type(value).__name__}", path)
        for key in value:
            if key not in allowed:
                raise self.fail(f"unknown key (expected one of: {', '.join(allowed)})",
                                f"{path}.{key}" if path else str(key))
        return value

    def integer(self, doc: dict, key: str, path: str, default: int, minimum: int) -> int:
        value = doc.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(f"expected an integer >= {minimum}, got {shown(value)}", f"{path}.{key}" if path else key)
        return value

    def size(self, value: Any, path: str) -> int:
        try:
            size = parse_size_bytes(value)
        except (ValueError, TypeError) as exc:
            raise self.fail(str(exc), path) from None
        if size < 1:
            raise self.fail(f"expected a positive size, got {shown(value)}", path)
        return size

    def path(self, value: Any, path: str, base: Path) -> Path:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(f"expected a path, got {shown(value)}", path)
        p = Path(value)
        return p if p.is_absolute() else base / p


def parse_experiment(data: bytes | str, *, source: str = "experiment.yaml", base: Path | None = None) -> ExperimentSpec:
    """The spec in ``data``; relative paths are resolved against ``base`` (default: the current directory)."""
    r = _Reader(source)
    base = base or Path(".")
    try:
        doc = parse_yaml(as_text(data, source, reader="parse_experiment"), source)
    except InputError as exc:  # the one YAML loader: duplicate keys and alias bombs refused
        raise r.fail(f"not YAML: {exc.detail}", exc.path) from None
    doc = r.mapping(doc, "", _TOP_KEYS)
    if not doc:
        raise r.fail("empty experiment (expected workload and topology)")
    for key in ("workload", "topology"):
        if key not in doc:
            raise r.fail("missing", key)
    name = doc.get("name", Path(source).stem)
    if not isinstance(name, str) or not name.strip():
        raise r.fail(f"expected a non-empty string, got {shown(name)}", "name")
    workload = _workload(r, doc["workload"], base)
    algorithms = _algorithms(r, doc.get("algorithms"))
    sweep = r.mapping(doc.get("sweep"), "sweep", ("iterations", "warmup", "grid"))
    grid = sweep.get("grid", list(DEFAULT_GRID_BYTES))
    if not isinstance(grid, list):
        raise r.fail(f"expected a list of sizes, got {shown(grid)}", "sweep.grid")
    replay_doc = r.mapping(doc.get("replay"), "replay", ("iterations", "warmup", "timeout"))
    timeout = replay_doc.get("timeout", 120)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT_S:
        raise r.fail(f"expected seconds > 0 (at most {MAX_TIMEOUT_S:.0f}), got {shown(timeout)}", "replay.timeout")
    estimate_doc = r.mapping(doc.get("estimate"), "estimate", ("share_nic", "fit_endpoint_delay", "nccl_calibration"))
    for key in ("share_nic", "fit_endpoint_delay"):
        if not isinstance(estimate_doc.get(key, False), bool):
            raise r.fail(f"expected true or false, got {shown(estimate_doc[key])}", f"estimate.{key}")
    return ExperimentSpec(
        name=name.strip(), source=source, workload=workload,
        topology_path=r.path(doc["topology"], "topology", base), algorithms=algorithms,
        sweep_iterations=r.integer(sweep, "iterations", "sweep", 5, 1),
        sweep_warmup=r.integer(sweep, "warmup", "sweep", SWEEP_WARMUP, 0),
        grid_bytes=tuple(sorted({r.size(v, f"sweep.grid[{i}]") for i, v in enumerate(grid)})),
        replay_iterations=r.integer(replay_doc, "iterations", "replay", 3, 1),
        replay_warmup=r.integer(replay_doc, "warmup", "replay", 1, 0),
        rounds=r.integer(doc, "rounds", "", 1, 1),
        timeout_s=float(timeout), share_nic=estimate_doc.get("share_nic", True),
        fit_endpoint_delay=estimate_doc.get("fit_endpoint_delay", False),
        nccl_calibration=(r.path(estimate_doc["nccl_calibration"], "estimate.nccl_calibration", base)
                          if "nccl_calibration" in estimate_doc else None))


def _workload(r: _Reader, value: Any, base: Path) -> WorkloadSpec:
    doc = r.mapping(value, "workload", ("trace", "generate", "npus", "jobs"))
    if sum(key in doc for key in ("trace", "generate", "jobs")) != 1:
        raise r.fail("give exactly one of trace (a file or prefix), generate (generator options) or jobs (a job "
                     "mix file)", "workload")
    if "jobs" in doc:
        if "npus" in doc:
            raise r.fail("a job mix's jobs give their own npus", "workload.npus")
        return WorkloadSpec(jobs_path=r.path(doc["jobs"], "workload.jobs", base))
    npus = doc.get("npus")
    if npus is not None and (isinstance(npus, bool) or not isinstance(npus, int) or npus < 1):
        raise r.fail(f"expected a positive integer, got {shown(npus)}", "workload.npus")
    if "trace" in doc:
        return WorkloadSpec(trace_path=r.path(doc["trace"], "workload.trace", base), npus=npus)
    gen = r.mapping(doc["generate"], "workload.generate", GENERATOR_OPTIONS)
    if "model" not in gen:
        raise r.fail("missing", "workload.generate.model")
    return WorkloadSpec(generate=tuple(gen.items()), npus=npus)


def _algorithms(r: _Reader, value: Any) -> tuple[tuple[Collective, Algorithm], ...]:
    chosen = dict(DEFAULT_ALGORITHMS)
    doc = r.mapping(value, "algorithms", tuple(c.value for c in chosen))
    for key, text in doc.items():
        try:
            chosen[Collective.parse(key)] = Algorithm.parse(str(text))
        except ValueError as exc:
            raise r.fail(str(exc), f"algorithms.{key}") from None
    return tuple(chosen.items())


def load_experiment(path: str | Path) -> ExperimentSpec:
    p = Path(path)
    return parse_experiment(read_input(p, InputKind.EXPERIMENT), source=str(p), base=p.parent)


# ---- the workload -------------------------------------------------------------------------------------
def generate_workload(options: tuple[tuple[str, Any], ...], *, source: str) -> Trace:
    """A trace from ``genie trace gen`` options, with its defaults (errors name ``workload.generate.<key>``)."""
    try:
        return generate_from_options(GeneratorOptions.parse(dict(options)))
    except InputError as exc:
        raise InputError(exc.detail, source=source, path=f"workload.generate.{exc.path}" if exc.path else
                         "workload.generate") from None
    except (TypeError, ValueError) as exc:
        raise InputError(str(exc), source=source, path="workload.generate") from None


def pin_algorithms(trace: Trace, algorithms: tuple[tuple[Collective, Algorithm], ...]) -> Trace:
    """Set every collective's ``algorithm`` attribute to the chosen one (``auto`` leaves the node alone)."""
    chosen = {c: a for c, a in algorithms if a is not Algorithm.AUTO}
    if not chosen:
        return trace
    ranks = []
    for rank in trace.ranks:
        nodes = []
        for node in rank.nodes:
            coll = node.comm_type.collective if node.kind is NodeKind.COLLECTIVE and node.comm_type else None
            if coll in chosen:
                node = node.with_attr("algorithm", chosen[coll].value, AttrType.STRING)
            nodes.append(node)
        ranks.append(replace(rank, nodes=tuple(nodes)))
    return replace(trace, ranks=tuple(ranks))


# ---- the sweep ------------------------------------------------------------------------------------------
def _disjoint(groups: list[tuple[int, ...]]) -> tuple[tuple[int, ...], ...]:
    taken: set[int] = set()
    chosen = []
    for g in groups:
        if not taken & set(g):
            chosen.append(g)
            taken |= set(g)
    return tuple(chosen)


def plan_sweep(trace: Trace, grid_bytes: tuple[int, ...] = DEFAULT_GRID_BYTES) -> tuple[SweepCase, ...]:
    """The bench curves the trace needs: per (collective, algorithm, group size) its exact sizes plus the grid
    (aligned as the bench aligns), measured on the trace's own groups of that kind - as many disjoint ones as
    run side by side in the trace (a message: its (sender, receiver) pairs)."""
    curves: dict[tuple, set[int]] = {}
    groups: dict[tuple, dict[tuple[int, ...], None]] = {}
    splits = trace_splits(trace)
    for rank in trace.ranks:
        for node in rank.nodes:
            op = comm_op(node, trace, splits.get((rank.rank, node.id), ()))
            if op is None:
                continue
            key = (op.collective, None if op.auto else op.algorithm, op.ranks)
            curves.setdefault(key, set()).add(op.size_bytes)
            members = (rank.rank, node.peer) if op.collective is Collective.SEND_RECV else \
                tuple(trace.group(node.process_group).ranks)
            groups.setdefault(key, {})[members] = None
    cases = []
    for key, sizes in sorted(curves.items(), key=lambda kv: (kv[0][0].value, kv[0][1].value if kv[0][1] else "",
                                                             kv[0][2])):
        collective, algorithm, ranks = key
        grid = {aligned_size(collective, s, ranks) for s in grid_bytes}
        cases.append(SweepCase(collective, algorithm, ranks, tuple(sorted(sizes | grid)),
                               _disjoint(list(groups[key]))))
    return tuple(cases)
