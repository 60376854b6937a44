"""The job-mix file (``jobs:``, docs/jobs.md) -> :class:`genie.core.jobmix.JobMix`, and each job's trace loaded
and checked. Errors name the file, the job's index and the field (``jobs[1].placement``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from genie.core.errors import InputError, shown
from genie.core.files import InputKind, read_input
from genie.core.jobmix import JobMix, JobPlacement, JobSpec, PlacementPolicy
from genie.core.trace import Trace
from genie.core.units import parse_time_ns
from genie.input_yaml import as_text, describe, parse_yaml

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
JOB_KEYS = ("name", "trace", "generate", "npus", "placement", "seed", "hosts", "start_offset", "iterations")
MAX_JOBS = 1024


def parse_job_mix(data: str | bytes, *, source: str = "<jobs>", base: Path = Path(".")) -> JobMix:
    doc = parse_yaml(as_text(data, source), source)
    if not isinstance(doc, dict) or set(doc) != {"jobs"}:
        keys = ", ".join(str(k) for k in doc) if isinstance(doc, dict) else describe(doc)
        raise InputError(f"a job mix is a mapping with the one key `jobs` (got {keys})", source=source)
    items = doc["jobs"]
    if not isinstance(items, list) or not items:
        raise InputError(f"expected a non-empty list of jobs, got {describe(items)}", source=source, path="jobs")
    if len(items) > MAX_JOBS:
        raise InputError(f"{len(items)} jobs: at most {MAX_JOBS}", source=source, path="jobs")
    jobs = tuple(_job(item, j, source, base) for j, item in enumerate(items))
    seen: dict[str, int] = {}
    for j, job in enumerate(jobs):
        if job.name in seen:
            raise InputError(f"job {seen[job.name]} already has the name {job.name!r}", source=source,
                             path=f"jobs[{j}].name")
        seen[job.name] = j
    return JobMix(jobs, source)


def _job(item: Any, j: int, source: str, base: Path) -> JobSpec:
    where = f"jobs[{j}]"

    def fail(message: str, field: str | None = None) -> InputError:
        return InputError(message, source=source, path=f"{where}.{field}" if field else where)

    if not isinstance(item, dict):
        raise fail(f"expected a mapping, got {describe(item)}")
    unknown = [k for k in item if k not in JOB_KEYS]
    if unknown:
        raise fail(f"unknown key (expected one of {', '.join(JOB_KEYS)})", str(unknown[0]))
    name = item.get("name", f"job{j}")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise fail(f"expected a name of letters, digits, '.', '_' and '-' (it names the job's directory), got "
                   f"{describe(name)}", "name")
    if ("trace" in item) == ("generate" in item):
        raise fail("give exactly one of trace (a file or prefix) or generate (`genie trace gen` options)",
                   "trace")
    trace_path = generate = None
    if "trace" in item:
        if not isinstance(item["trace"], str) or not item["trace"]:
            raise fail(f"expected a path, got {describe(item['trace'])}", "trace")
        trace_path = base / item["trace"]
    else:
        if not isinstance(item["generate"], dict) or "model" not in item["generate"]:
            raise fail("expected a mapping of `genie trace gen` options with at least model", "generate")
        generate = tuple(item["generate"].items())
    npus = item.get("npus")
    if npus is not None and (isinstance(npus, bool) or not isinstance(npus, int) or npus < 1):
        raise fail(f"expected a positive integer, got {shown(npus)}", "npus")
    iterations = item.get("iterations", 1)
    if isinstance(iterations, bool) or not isinstance(iterations, int) or not 1 <= iterations <= 10_000:
        raise fail(f"expected an integer 1..10000, got {shown(iterations)}", "iterations")
    try:
        offset = parse_time_ns(item.get("start_offset", 0))
    except ValueError as exc:
        raise fail(str(exc), "start_offset") from None
    if offset < 0:
        raise fail("must be >= 0", "start_offset")
    return JobSpec(name, _placement(item, fail), trace_path, generate or (), npus, offset, iterations)


def _placement(item: dict, fail) -> JobPlacement:
    if "hosts" in item:
        if "placement" in item or "seed" in item:
            raise fail("give hosts or placement (with seed for random), not both", "hosts")
        hosts = item["hosts"]
        if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) and h for h in hosts):
            raise fail(f"expected a non-empty list of host names, got {describe(hosts)}", "hosts")
        return JobPlacement(hosts=tuple(hosts))
    text = item.get("placement", PlacementPolicy.PACKED.value)
    if not isinstance(text, str):
        raise fail(f"expected packed, spread or random, got {describe(text)}", "placement")
    seed = item.get("seed")
    if "seed" in item and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise fail(f"expected an integer, got {describe(seed)}", "seed")
    try:
        policy = PlacementPolicy.parse(text.partition(":")[0])
    except ValueError as exc:
        raise fail(str(exc), "placement") from None
    try:
        return JobPlacement.parse(text, seed)
    except ValueError as exc:  # the seed's rules are JobPlacement's; the field named is the one to change
        random, given = policy is PlacementPolicy.RANDOM, "seed" in item
        missing = random and not given and ":" not in text
        raise fail(str(exc), "seed" if missing or (given and not random) else "placement") from None


def load_job_mix(path: str | Path) -> JobMix:
    p = Path(path)
    return parse_job_mix(read_input(p, InputKind.EXPERIMENT), source=str(p), base=p.parent)


def load_job_traces(mix: JobMix) -> tuple[Trace, ...]:
    """Every job's trace, loaded (or generated) and checked as ``genie trace validate`` does; an InputError
    names the job (``jobs[j].trace``) and the problem."""
    from genie.workloads.analysis import errors, validate
    from genie.workloads.generators.options import GeneratorOptions, generate_from_options
    from genie.workloads.loader import load_trace

    out = []
    for j, job in enumerate(mix.jobs):
        field = "trace" if job.trace_path is not None else "generate"
        where = f"jobs[{j}].{field}"
        try:
            if job.trace_path is not None:
                trace = load_trace(job.trace_path, npus=job.npus)
            else:
                trace = generate_from_options(GeneratorOptions.parse(dict(job.generate)))
        except InputError as exc:
            if job.trace_path is None and exc.path:  # a `genie trace gen` option: jobs[j].generate.<option>
                raise InputError(exc.detail, source=mix.source, path=f"{where}.{exc.path}") from None
            what = f"{exc.source}: " if exc.source and exc.source != mix.source else ""
            inner = f"{exc.path}: " if exc.path else ""
            raise InputError(f"{what}{inner}{exc.detail}", source=mix.source, path=where) from None
        except (TypeError, ValueError) as exc:
            raise InputError(str(exc), source=mix.source, path=where) from None
        problems = errors(validate(trace))
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise InputError(f"fails `genie trace validate`: {problems[0]}{more}", source=mix.source, path=where)
        out.append(trace)
    return tuple(out)
