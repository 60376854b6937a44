"""faults.csv and faults.json: what was injected, when (run clock) and how it ended. Pure: text out."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence

from genie.faults.injector import FaultRecord
from genie.faults.model import FaultPlan

CSV_FIELDS = ("index", "kind", "target", "params", "trigger", "applied_at_s", "restored_at_s", "outcome",
              "detail")


def _time(value: float | None) -> str:
    return "" if value is None else f"{value:.6f}"


def faults_csv(records: Sequence[FaultRecord]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for r in records:
        writer.writerow([r.index, r.kind.value, r.target, r.params, r.trigger, _time(r.applied_at_s),
                         _time(r.restored_at_s), r.outcome.value, r.detail])
    return out.getvalue()


def faults_json(records: Sequence[FaultRecord], plan: FaultPlan) -> str:
    rows = []
    for r, planned in zip(records, plan.faults):
        trigger = planned.fault.trigger
        rows.append({"index": r.index, "kind": r.kind.value, "target": r.target, "params": r.params,
                     "spec": planned.fault.spec(), "at_s": trigger.at_s, "at_op": trigger.at_op,
                     "duration_s": planned.fault.duration_s, "applied_at_s": r.applied_at_s,
                     "restored_at_s": r.restored_at_s, "outcome": r.outcome.value, "detail": r.detail})
    return json.dumps({"clock": "seconds after the run's first timed start (orchestrator, CLOCK_MONOTONIC)",
                       "faults": rows}, indent=2) + "\n"
