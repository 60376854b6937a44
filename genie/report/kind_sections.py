"""Report sections of experiment, estimate, diagnose, verify and compare runs (pure, like genie.report.sections)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from genie.report import plots
from genie.report.compare import row_label
from genie.report.rundata import RunData
from genie.report.sections import PagePlot, Section


def _num(frame: pd.DataFrame, col: str) -> pd.Series:
    return pd.to_numeric(frame[col], errors="coerce")


def accuracy_rows(run: RunData) -> pd.DataFrame:
    """accuracy.csv, with error_pct computed from each estimated/measured pair when the file lacks it."""
    frame = run.accuracy.copy() if run.accuracy is not None else pd.DataFrame()
    if frame.empty:
        return frame
    for pair in run.accuracy_pairs:
        name = "error_pct" if len(run.accuracy_pairs) == 1 else f"error_{pair.quantity}_pct"
        if name not in frame:
            est, meas = _num(frame, pair.estimated), _num(frame, pair.measured)
            frame[name] = ((est - meas) / meas * 100).round(3)
    return frame


def accuracy_section(run: RunData) -> Section:
    frame = accuracy_rows(run)
    if frame.empty:
        return Section("Accuracy")
    lines = []
    if {"estimated_s", "measured_s", "error_pct"} <= set(frame.columns):
        for _, r in frame.iterrows():
            what = f"{r['mode']} estimate" if "mode" in frame else "estimate"
            if "workload" in frame and "topology" in frame:
                what += f" ({r['workload']} on {r['topology']})"
            lines.append(f"{what}: estimated {float(r['estimated_s']) * 1e3:.3f} ms vs measured "
                         f"{float(r['measured_s']) * 1e3:.3f} ms, error {float(r['error_pct']):+.2f}%")
    tables = [("Accuracy (accuracy.csv)", frame)]
    best = (run.experiment or {}).get("best_of")
    if isinstance(best, list) and best:
        tables.append(("Best iterations: fastest op times and fastest replay iteration (experiment.json)",
                       pd.DataFrame(best)))
    return Section("Accuracy: estimated vs measured", tuple(lines),
                   (PagePlot("accuracy.png", "estimated vs measured", plots.accuracy_bars(frame, run.accuracy_pairs)),),
                   tuple(tables))


def residuals_by_curve(points: pd.DataFrame | None) -> pd.DataFrame:
    if points is None or points.empty:
        return pd.DataFrame()
    frame = points.assign(residual_pct=_num(points, "residual_pct"))
    rows = []
    for (collective, algorithm, ranks), g in frame.groupby(["collective", "algorithm", "ranks"], sort=False):
        r = g["residual_pct"]
        rows.append({"collective": collective, "algorithm": algorithm, "ranks": int(float(ranks)), "points": len(g),
                     "rms_residual_pct": round(float((r ** 2).mean() ** 0.5), 3),
                     "max_abs_residual_pct": round(float(r.abs().max()), 3)})
    return pd.DataFrame(rows)


def calibration_section(run: RunData) -> Section:
    cal = run.calibration
    if cal is None:
        return Section("Calibration")
    lines = []
    if cal.rms_residual_pct is not None:
        n = 0 if cal.points is None else len(cal.points)
        lines.append(f"rms residual {cal.rms_residual_pct:.2f}% over {n} measured point(s) (model vs measured)")
    if cal.endpoint_delay_ns is not None:
        lines.append(f"endpoint delay {cal.endpoint_delay_ns / 1e3:.3f} us")
    if cal.size_factors:
        lines.append("size factors (model bytes / real bytes): " +
                     ", ".join(f"{k} {v:.3g}" for k, v in cal.size_factors.items()))
    lines += [f"note: {n}" for n in cal.notes]
    return Section("Calibration", tuple(lines),
                   (PagePlot("calibration.png", "calibration fit: measured vs model per curve, and the residuals",
                             plots.calibration_fit(cal.points)),),
                   (("Calibration: fitted link classes (calibration.json)", cal.dims),
                    ("Calibration: residuals per curve", residuals_by_curve(cal.points)),
                    ("Calibration: residual per point (calibration.csv)", cal.points)))


def estimate_table(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame[["mode", "rank"]].copy()
    for col in ("iteration_ns", "compute_ns", "comm_ns", "exposed_comm_ns", "overlap_ns"):
        out[col.replace("_ns", "_ms")] = (_num(frame, col) / 1e6).round(6)
    return out


def estimate_section(run: RunData) -> Section:
    if not run.estimates:
        return Section("Estimate")
    lines, tables = [], []
    for name, frame in run.estimates.items():
        if frame.empty:
            continue
        it = _num(frame, "iteration_ns")
        slowest = frame.loc[it.idxmax()]
        lines.append(f"{slowest['mode']} estimate ({name}): iteration {it.max() / 1e6:.3f} ms (slowest rank "
                     f"{int(float(slowest['rank']))}), exposed communication up to "
                     f"{_num(frame, 'exposed_comm_ns').max() / 1e6:.3f} ms")
        tables.append((f"Estimate per rank ({name})", estimate_table(frame)))
    return Section("Estimate", tuple(lines), (), tuple(tables))


def _flagged(frame: pd.DataFrame) -> pd.DataFrame:
    slow = (_num(frame, "slow_bandwidth").fillna(0) > 0) | (_num(frame, "slow_latency").fillna(0) > 0)
    return frame[slow]


def _suspects(run: RunData) -> tuple[list[str], list[str]] | None:
    doc: Any = run.diagnosis_verdict
    if doc is None and run.manifest is not None and "suspect_links" in run.manifest.summary:
        doc = run.manifest.summary
    if not isinstance(doc, dict):
        return None
    links = [f"{x.get('src')}->{x.get('dst')} (links[{x.get('link_index')}])" if isinstance(x, dict) else str(x)
             for x in doc.get("suspect_links") or ()]
    return links, [str(h) for h in doc.get("suspect_hosts") or ()]


def _matrix(frame: pd.DataFrame, value: str) -> pd.DataFrame:
    """Sender rows x receiver columns of one diagnose.csv column, hosts in their natural order (h2 before h10)."""
    hosts = sorted(set(frame["src"].astype(str)) | set(frame["dst"].astype(str)), key=lambda h: (len(h), h))
    table = frame.assign(**{value: _num(frame, value)}).pivot_table(index="src", columns="dst", values=value,
                                                                     aggfunc="first")
    table = table.reindex(index=hosts, columns=hosts)
    table.columns.name = None
    return table.rename_axis("sender").reset_index()


def diagnose_section(run: RunData) -> Section:
    frame = run.diagnosis
    if frame is None:
        return Section("Diagnosis")
    flagged = _flagged(frame)
    lines = [f"{len(frame)} host pairs measured, {len(flagged)} flagged"]
    suspects = _suspects(run)
    if suspects is None:
        lines.append("suspect links: not recorded in this run directory (diagnose.json); the flagged pairs follow")
    else:
        lines.append("suspect links: " + (", ".join(suspects[0]) or "none"))
        lines.append("suspect hosts: " + (", ".join(suspects[1]) or "none"))
    tables = [("Flagged pairs (diagnose.csv)", flagged),
              ("Pair matrix: bandwidth in GB/s, sender (row) to receiver (column)", _matrix(frame, "bandwidth_GBps")),
              ("Pair matrix: latency in us", _matrix(frame, "latency_us"))]
    if suspects is not None and suspects[0]:
        tables.insert(0, ("Suspect links", pd.DataFrame({"link direction": suspects[0]})))
    return Section("Diagnosis", tuple(lines), (PagePlot("pairs.png", "pairwise bandwidth, flagged pairs in red",
                                                        plots.pair_matrix(frame)),), tuple(tables))


def verify_section(run: RunData) -> Section:
    frame = run.verify
    if frame is None:
        return Section("Link checks")
    status = frame["status"].astype(str)
    counts = status.value_counts()
    lines = [f"{len(frame)} checks ({run.verify_source}): " +
             ", ".join(f"{counts[s]} {s}" for s in counts.index)]
    per_link = []
    for link, g in frame.groupby("links", sort=False):
        s = g["status"].astype(str)
        per_link.append({"links": link, "route": g["route"].iloc[0] if "route" in g else "", "checks": len(g),
                         "failed": int((s == "FAIL").sum()), "at the machine's ceiling": int((s == "ceiling").sum()),
                         "failed checks": ", ".join(f"{m} {d}" for m, d in zip(g["metric"][s == "FAIL"],
                                                                              g["direction"][s == "FAIL"]))})
    return Section("Link checks", tuple(lines), (),
                   (("Per link", pd.DataFrame(per_link)), (f"Checks ({run.verify_source})", frame)))


def _text(v: Any) -> str:
    return "" if v is None or (isinstance(v, float) and pd.isna(v)) else str(v)


def _float(v: Any) -> float | None:
    try:
        value = float(v)
    except (TypeError, ValueError):
        return None
    return None if pd.isna(value) else value


@dataclass(frozen=True)
class DeltaBar:
    """A compare.csv row as the delta plot draws it."""

    label: str
    median_delta_pct: float | None
    noise_pct: float | None


def _int(v: Any) -> int | None:
    try:
        return int(float(v))
    except (TypeError, ValueError):
        return None


def compare_section(run: RunData) -> Section:
    frame = run.comparison
    if frame is None or frame.empty:
        return Section("Comparison")
    lines = [f"{len(frame)} rows compared"]
    if "within_noise" in frame:
        inside = frame["within_noise"].astype(str).str.lower().isin(("1", "true", "yes"))
        lines[0] += f", {int(inside.sum())} within noise"
    bars = [DeltaBar(row_label(_text(r.get("scope")) or "case", _text(r.get("collective")), _int(r.get("ranks")),
                               _text(r.get("algorithm")), _int(r.get("size_bytes"))),
                     _float(r.get("median_delta_pct")), _float(r.get("noise_pct"))) for _, r in frame.iterrows()]
    png = plots.compare_deltas(bars, "A", "B") if "median_delta_pct" in frame else None
    return Section("Comparison", tuple(lines), (PagePlot("compare.png", "time change per row", png),),
                   (("Comparison (compare.csv)", frame),))


def _finding_line(finding: dict) -> str:
    """': line N' where a finding names its table's line (a file of several runs), else ''."""
    line = finding.get("line")
    return f": line {line}" if isinstance(line, int) and line > 0 else ""


def nccl_calibration_section(run: RunData) -> Section:
    """genie calibrate: the cluster, the fitted parameters against the hardware's nominal ones, the findings,
    every point's residual and the predictions."""
    doc = run.nccl_calibration
    if not isinstance(doc, dict):
        return Section("NCCL calibration")
    cluster = doc.get("cluster") if isinstance(doc.get("cluster"), dict) else {}
    lines = [f"{cluster.get('name')}: {cluster.get('nodes')} node(s) x {cluster.get('gpus_per_node')} "
             f"{cluster.get('gpu')} ({cluster.get('interconnect')}), {cluster.get('nics')} NIC(s) of "
             f"{_float(cluster.get('nic_gb_s')) or 0:.4g} GB/s per node",
             f"rms error {_float(doc.get('rms_error_pct')) or 0:.2f} % over {doc.get('points')} point(s)"]
    findings = doc.get("findings") if isinstance(doc.get("findings"), list) else []
    lines += [f"expected? {f.get('source')}{_finding_line(f)}: {f.get('collective')} reaches "
              f"{f.get('measured_busbw_gb_s')} GB/s where the hardware predicts {f.get('expected_busbw_gb_s')}: "
              f"likely {f.get('cause')} (confidence {f.get('confidence')})" for f in findings if isinstance(f, dict)]
    params = doc.get("params") if isinstance(doc.get("params"), dict) else {}
    nominal = doc.get("nominal") if isinstance(doc.get("nominal"), dict) else {}
    fitted = set(doc.get("fitted") or ())
    table = pd.DataFrame([{"parameter": k, "fitted": _float(v), "nominal": _float(nominal.get(k)),
                           "moved by the data": k in fitted} for k, v in params.items()])
    pictures = tuple(PagePlot(name, caption, run.pictures.get(name)) for name, caption in (
        ("measured_vs_model.png", "measured vs model per collective (the points fitted)"),
        ("predicted_vs_measured.png", "predicted vs measured (outputs the calibration did not see)")))
    tables = [("NCCL calibration: parameters (nccl_calibration.json)", table)]
    for name, title in (("calibration_points.csv", "Points fitted: measured, model, NCCL's choice"),
                        ("predictions.csv", "Predictions of outputs the calibration did not see")):
        if name in run.other_tables:
            tables.append((f"{title} ({name})", run.other_tables[name]))
    return Section("NCCL calibration", tuple(lines), pictures, tuple(tables))
