"""A bench run's files as they come: sweep.csv/sweep.json rewritten after every measured size (so an
interrupted sweep keeps what finished), then per-iteration times, steps.csv and the nccl-tests JSON."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping, Sequence

from genie.measure.metrics import CaseStats
from genie.report import nccl_json, sweep
from genie.report.manifest import RunRecorder


class SweepRecorder:
    def __init__(self, run: RunRecorder, meta: Mapping[str, Any]) -> None:
        self.run, self.meta = run, dict(meta)
        self.stats: list[CaseStats] = []
        self.started = datetime.now()
        self.document: dict[str, Any] = sweep.sweep_document([], self.meta)
        self.nccl_documents: dict[str, str] = {}  # file name -> nccl-tests JSON text, after finish

    def add(self, _done: int, _total: int, stats: CaseStats) -> None:
        """The bench service's progress callback: one more size measured."""
        self.stats.append(stats)
        self._write_sweep(None)

    def finish(self, outcome: Any, *, config: Mapping[str, Any], devices: Sequence[Mapping[str, Any]],
               steps: bool) -> dict[str, Any]:
        """After the sweep: final sweep files (with each case's per-iteration times), steps.csv when the steps
        were recorded, nccl_<binary>.json per collective. Returns sweep.json's document."""
        self.stats = list(outcome.stats)
        iteration_ns = [list(s.iteration_ns) for s in self.stats]
        self._write_sweep(iteration_ns)
        if steps:
            self.run.write("steps.csv", sweep.steps_csv(outcome))
        manifest = self.run.manifest
        documents = nccl_json.nccl_tests_documents(
            self.stats, list(getattr(outcome, "in_place_stats", ()) or ()), config=config,
            argv=manifest.argv if manifest else (), devices=devices,
            start_time=self.started, end_time=datetime.now(),
            genie_version=manifest.genie_version if manifest else "")
        for name, text in documents.items():
            self.run.write(name, text)
        self.nccl_documents = documents
        return self.document

    def _write_sweep(self, iteration_ns: Sequence[Sequence[int]] | None) -> None:
        self.document = sweep.sweep_document(self.stats, self.meta, iteration_ns)
        self.run.write("sweep.csv", sweep.sweep_csv(self.stats))
        self.run.write("sweep.json", sweep.sweep_json(self.stats, self.meta, iteration_ns))
