"""Saved job-mix accuracy runs (issue #34): real concurrent replays kept in the repository, so a change to the
fabric model can be evaluated against them on any machine, without a testbed (run by hand; not a test).

Each run is ``benchmarks/data/job-mix/<name>.tar.xz``: the directory ``benchmarks/job_mix.py accuracy`` wrote
(inputs, the sweeps and the calibration fitted on them, every replay with its paths and per-op times), as it
was written. ``runs.json`` beside the archives lists each run's source (when, on which commit, at what load)
and the rows not to count, with the reason (a replay disturbed by other work on the machine, say): the archive
itself is never edited.

    .venv/bin/python benchmarks/job_mix_saved.py list
    .venv/bin/python benchmarks/job_mix_saved.py evaluate [NAME...] [--no-htb-credit]   # every run by default
    .venv/bin/python benchmarks/job_mix_saved.py add ACCURACY_DIR NAME --note TEXT [--exclude SCENARIO/PLACEMENT/JOB:REASON]...

``evaluate`` re-estimates every replay of each run with the run's own calibration (``job_mix.py evaluate``)
and prints the counts the issue's targets ask for: rows within 5 % of the concurrent replay, slowdowns within 3
percentage points, the mean |error| and |points|, and the placement rankings equal.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: benchmarks.job_mix is imported as a package module
    sys.path.insert(0, str(ROOT))
SAVED = ROOT / "benchmarks" / "data" / "job-mix"
INDEX = "runs.json"


@dataclass(frozen=True)
class SavedRun:
    name: str
    recorded_utc: str
    commit: str
    note: str
    excluded: dict[str, str]  # "scenario/placement/job" -> why the row is not counted

    def archive(self, folder: Path = SAVED) -> Path:
        return folder / f"{self.name}.tar.xz"


def read_index(folder: Path = SAVED) -> tuple[SavedRun, ...]:
    path = folder / INDEX
    if not path.is_file():
        return ()
    return tuple(SavedRun(r["name"], r["recorded_utc"], r["commit"], r["note"], dict(r.get("excluded", {})))
                 for r in json.loads(path.read_text())["runs"])


def write_index(runs: tuple[SavedRun, ...], folder: Path = SAVED) -> None:
    doc = {"runs": [{"name": r.name, "recorded_utc": r.recorded_utc, "commit": r.commit, "note": r.note,
                     "excluded": r.excluded} for r in runs]}
    tmp = folder / f".{INDEX}.tmp"
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(folder / INDEX)


def row_key(row: dict) -> str:
    return f"{row['scenario']}/{row['placement']}/{row['job']}"


def extract(run: SavedRun, into: Path, folder: Path = SAVED) -> Path:
    """The run's accuracy directory, unpacked under ``into`` (only regular files and folders: tarfile's data
    filter refuses links, devices and paths leaving ``into``)."""
    with tarfile.open(run.archive(folder), "r:xz") as tar:
        tar.extractall(into, filter="data")
    out = into / run.name
    if not (out / "accuracy.json").is_file():
        raise SystemExit(f"{run.archive(folder)}: no {run.name}/accuracy.json inside")
    return out


@dataclass(frozen=True)
class Summary:
    rows: int
    within_5pct: int
    within_3pts: int
    mean_abs_error_pct: float
    mean_abs_points: float


def summarize(rows: list[dict]) -> Summary:
    if not rows:
        return Summary(0, 0, 0, 0.0, 0.0)
    return Summary(len(rows), sum(abs(r["error_pct"]) <= 5.0 for r in rows),
                   sum(abs(r["points"]) <= 3.0 for r in rows),
                   sum(abs(r["error_pct"]) for r in rows) / len(rows),
                   sum(abs(r["points"]) for r in rows) / len(rows))


def ranking_equal(rows: list[dict]) -> list[tuple[str, bool]]:
    """Per scenario with several placements: the estimated ranking (replay paths) equal to the measured one."""
    from benchmarks.job_mix import placement_order

    measured = placement_order(rows, "measured_slowdown_pct")
    return [(s, order == measured[s]) for s, order in placement_order(rows, "estimated_slowdown_pct").items()]


def evaluate(names: list[str], htb_credit: bool | None) -> None:
    from benchmarks.job_mix import run_evaluate

    runs = [r for r in read_index() if not names or r.name in names]
    unknown = sorted(set(names) - {r.name for r in runs})
    if unknown:
        raise SystemExit(f"{SAVED / INDEX}: no saved run named {', '.join(unknown)}")
    counted, rankings = [], []
    with tempfile.TemporaryDirectory(prefix="genie-job-mix-saved-") as tmp:
        for run in runs:
            out = extract(run, Path(tmp))
            print(f"## {run.name} ({run.recorded_utc}, {run.commit}): {run.note}", flush=True)
            run_evaluate(out, out / "calibration", True, htb_credit)
            rows = json.loads((out / "evaluate.json").read_text())
            saved = {row_key(r) for r in json.loads((out / "accuracy.json").read_text())}
            if saved != {row_key(r) for r in rows}:  # job_mix.py's scenarios no longer those the run replayed
                raise SystemExit(f"{run.archive()}: re-estimated rows {sorted(row_key(r) for r in rows)} are not "
                                 f"the run's {sorted(saved)}")
            kept = [r for r in rows if row_key(r) not in run.excluded]
            for r in rows:
                if row_key(r) in run.excluded:
                    print(f"#   not counted: {row_key(r)}: {run.excluded[row_key(r)]}")
            counted += [{**r, "run": run.name} for r in kept]
            rankings += [(run.name, s, eq) for s, eq in ranking_equal(kept)]
    s = summarize(counted)
    print(f"# {len(runs)} saved runs, {s.rows} rows counted: within 5 % {s.within_5pct}, within 3 points "
          f"{s.within_3pts}, mean |error| {s.mean_abs_error_pct:.2f} %, mean |points| {s.mean_abs_points:.2f}; "
          f"rankings equal {sum(eq for *_, eq in rankings)} of {len(rankings)}")
    for r in counted:
        print(f"  {r['run']:<12} {row_key(r):<20} {r['error_pct']:+6.2f} % {r['points']:+6.1f} pts")


def add(accuracy_dir: Path, name: str, note: str, excluded: list[str], commit: str, recorded_utc: str,
        folder: Path = SAVED) -> SavedRun:
    if not (accuracy_dir / "accuracy.json").is_file():
        raise SystemExit(f"{accuracy_dir}: no accuracy.json (not a job_mix.py accuracy run)")
    runs = read_index(folder)
    if any(r.name == name for r in runs):
        raise SystemExit(f"{folder / INDEX}: a run named {name} exists")
    rows = {row_key(r) for r in json.loads((accuracy_dir / "accuracy.json").read_text())}
    why = {}
    for item in excluded:
        key, _, reason = item.partition(":")
        if key not in rows or not reason:
            raise SystemExit(f"--exclude {item!r}: want SCENARIO/PLACEMENT/JOB:REASON with a row of {sorted(rows)}")
        why[key] = reason
    folder.mkdir(parents=True, exist_ok=True)
    run = SavedRun(name, recorded_utc, commit, note, why)
    tmp = folder / f".{name}.tar.xz.tmp"
    with tarfile.open(tmp, "w:xz") as tar:  # the run as written, less a re-estimate's output
        tar.add(accuracy_dir, arcname=name,
                filter=lambda info: None if info.name.endswith(("/evaluate", "/evaluate.json")) else info)
    tmp.replace(run.archive(folder))
    write_index(runs + (run,), folder)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("list")
    ev = sub.add_parser("evaluate")
    ev.add_argument("names", nargs="*")
    ev.add_argument("--no-htb-credit", action="store_true", help="the links' HTB buckets not played")
    ad = sub.add_parser("add")
    ad.add_argument("accuracy_dir", type=Path)
    ad.add_argument("name")
    ad.add_argument("--note", required=True, help="how the run was made: machine load, what else ran")
    ad.add_argument("--exclude", action="append", default=[], metavar="SCENARIO/PLACEMENT/JOB:REASON")
    ad.add_argument("--commit", required=True, help="the genie commit the run measured")
    ad.add_argument("--recorded-utc", required=True, help="when the run was made, e.g. 2026-12-06 04:03-04:13")
    args = parser.parse_args()
    if args.what == "list":
        for r in read_index():
            print(f"{r.name:<12} {r.recorded_utc:<24} {r.commit:<8} {r.note}"
                  + "".join(f"\n{'':<12} not counted {k}: {v}" for k, v in r.excluded.items()))
    elif args.what == "evaluate":
        evaluate(args.names, False if args.no_htb_credit else None)
    else:
        add(args.accuracy_dir, args.name, args.note, args.exclude, args.commit, args.recorded_utc)


if __name__ == "__main__":
    main()
