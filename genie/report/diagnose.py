"""Diagnosis reports: diagnose.csv (one row per ordered host pair), diagnose.json (the verdict: flagged pairs,
suspect links and hosts), a bandwidth heatmap PNG, and a summary."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from genie.measure.diagnose import Diagnosis
from genie.core.files import write_atomic

DIAGNOSE_COLUMNS = ("src", "dst", "latency_us", "reference_latency_us", "bandwidth_GBps",
                    "expected_bandwidth_GBps", "reference_bandwidth_GBps", "slow_bandwidth", "slow_latency")


def diagnose_csv(d: Diagnosis) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(DIAGNOSE_COLUMNS)
    for v in d.pairs:
        m = v.measurement
        w.writerow((m.src, m.dst, round(m.latency_us, 2), round(v.reference_latency_us, 2),
                    round(m.bandwidth_GBps, 6), "" if v.expected_bandwidth_GBps is None
                    else round(v.expected_bandwidth_GBps, 6), round(v.reference_bandwidth_GBps, 6),
                    int(v.slow_bandwidth), int(v.slow_latency)))
    return out.getvalue()


def heatmap_png(d: Diagnosis) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    hosts = sorted({h for v in d.pairs for h in (v.measurement.src, v.measurement.dst)},
                   key=lambda h: (len(h), h))
    idx = {h: i for i, h in enumerate(hosts)}
    grid = np.full((len(hosts), len(hosts)), np.nan)
    for v in d.pairs:
        grid[idx[v.measurement.src], idx[v.measurement.dst]] = v.measurement.bandwidth_GBps
    fig, ax = plt.subplots(figsize=(1.0 + 0.6 * len(hosts), 0.8 + 0.55 * len(hosts)))
    im = ax.imshow(grid, cmap="viridis")
    ax.set_xticks(range(len(hosts)), hosts, rotation=45)
    ax.set_yticks(range(len(hosts)), hosts)
    ax.set_xlabel("receiver")
    ax.set_ylabel("sender")
    for v in d.pairs:
        if v.flagged:
            ax.add_patch(plt.Rectangle((idx[v.measurement.dst] - 0.5, idx[v.measurement.src] - 0.5), 1, 1,
                                       fill=False, edgecolor="red", linewidth=2))
    fig.colorbar(im, ax=ax, label="bandwidth (GB/s)")
    ax.set_title("pairwise bandwidth (red: flagged)")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def diagnosis_document(d: Diagnosis) -> dict[str, object]:
    """diagnose.json: what the diagnosis concluded (the pairs themselves are in diagnose.csv)."""
    return {"pairs": len(d.pairs), "flagged_pairs": [{"src": v.measurement.src, "dst": v.measurement.dst,
                                                      "slow_bandwidth": v.slow_bandwidth,
                                                      "slow_latency": v.slow_latency}
                                                     for v in d.pairs if v.flagged],
            "suspect_links": [{"link_index": x.link_index, "src": x.src, "dst": x.dst} for x in d.suspect_links],
            "suspect_hosts": list(d.suspect_hosts)}


def diagnosis_files(d: Diagnosis) -> dict[str, bytes]:
    """{file name: content} of a diagnosis run directory (for a recorder that writes and lists each file)."""
    return {"diagnose.csv": diagnose_csv(d).encode(),
            "diagnose.json": (json.dumps(diagnosis_document(d), indent=2) + "\n").encode(),
            "diagnose_heatmap.png": heatmap_png(d)}


def write_diagnosis(run_dir: Path, d: Diagnosis) -> None:
    for name, payload in diagnosis_files(d).items():
        write_atomic(Path(run_dir) / name, payload)


def format_diagnosis(d: Diagnosis) -> str:
    lines = [f"# {len(d.pairs)} host pairs measured, {sum(v.flagged for v in d.pairs)} flagged"]
    for v in d.pairs:
        if v.flagged:
            m = v.measurement
            why = []
            if v.slow_bandwidth:
                why.append(f"bandwidth {m.bandwidth_GBps:.4f} GB/s vs {v.reference_bandwidth_GBps:.4f}")
            if v.slow_latency:
                why.append(f"latency {m.latency_us:.0f} us vs {v.reference_latency_us:.0f}")
            lines.append(f"  {m.src} -> {m.dst}: " + ", ".join(why))
    lines.append("suspect links: " + (", ".join(x.label() for x in d.suspect_links) or "none"))
    lines.append("suspect hosts: " + (", ".join(d.suspect_hosts) or "none"))
    return "\n".join(lines)
