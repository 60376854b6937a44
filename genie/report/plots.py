"""PNG plots for network engineers (matplotlib's Agg canvas directly: no pyplot, no global backend state).

Every function takes plain data and returns PNG bytes, or None when there is nothing to draw.
"""

from __future__ import annotations

import io
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from genie.report.cases import CaseKey, sweep_curves
from genie.report.sweep import SweepRow

_TIME_UNITS = ("s", "ms", "us", "ns")


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return buf.getvalue()


def _size_label(size_bytes: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size_bytes >= scale:
            value = size_bytes / scale
            return f"{value:g}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return f"{int(size_bytes)}B"


def busbw_vs_size(rows: Sequence[SweepRow], *, link_rate_bps: int | None = None, title: str = "") -> bytes | None:
    """busbw (GB/s) against message size (log2 x axis), one line per curve - (collective, group size), never
    two group sizes in one line; a dashed line at the line rate (the slowest host link of the topology) when it
    is known."""
    if not rows:
        return None
    fig = Figure(figsize=(8, 4.5))
    ax = fig.add_subplot()
    for curve, mine in sweep_curves(rows).items():
        ax.plot([r.size_bytes for r in mine], [r.busbw_GBps for r in mine], marker="o", label=curve.label)
    if link_rate_bps:
        line_rate = link_rate_bps / 8e9
        ax.axhline(line_rate, color="grey", linestyle="--", label=f"line rate {line_rate:.3g} GB/s")
    ax.set_xscale("log", base=2)
    sizes = sorted({r.size_bytes for r in rows})
    ax.set_xticks(sizes, [_size_label(s) for s in sizes], rotation=45 if len(sizes) > 8 else 0)
    ax.set_xlabel("message size")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    ax.set_title(title or "bus bandwidth vs message size")
    return _png(fig)


def latency_by_size(rows: Sequence[SweepRow], iteration_us: Mapping[CaseKey, Sequence[float]],
                    source: str = "") -> bytes | None:
    """Per curve, the distribution of iteration times at each size: a box plot of the per-iteration times when
    they are known (from `source`), else the min / median / p99 / max summary (whiskers min..max, box
    median..p99)."""
    if not rows:
        return None
    curves = sweep_curves(rows)
    fig = Figure(figsize=(8, 3.2 * len(curves)), layout="constrained")
    for n, (curve, mine) in enumerate(curves.items()):
        ax = fig.add_subplot(len(curves), 1, n + 1)
        stats = []
        for r in mine:
            times = iteration_us.get(CaseKey.of(r))
            if times:
                a = np.asarray(times, dtype=float)
                q1, med, q3 = np.percentile(a, [25, 50, 75])
                iqr = q3 - q1
                low = a[a >= q1 - 1.5 * iqr].min()
                high = a[a <= q3 + 1.5 * iqr].max()
                stats.append({"label": _size_label(r.size_bytes), "med": med, "q1": q1, "q3": q3, "whislo": low,
                              "whishi": high, "fliers": a[(a < low) | (a > high)]})
            else:
                stats.append({"label": _size_label(r.size_bytes), "med": r.time_median_us,
                              "q1": r.time_median_us, "q3": r.time_p99_us, "whislo": r.time_min_us,
                              "whishi": r.time_max_us, "fliers": []})
        ax.bxp(stats, showfliers=True)
        ax.set_yscale("log")
        ax.set_ylabel("iteration time (us)")
        known = all(iteration_us.get(CaseKey.of(r)) for r in mine)
        ax.set_title(f"{curve.label}: " + (f"per-iteration times (from {source or 'step records'})" if known else
                                           "min / median..p99 / max (per-iteration times not recorded)"))
        ax.grid(True, axis="y", alpha=0.3)
    ax.set_xlabel("message size")
    return _png(fig)


def replay_gantt(ops: pd.DataFrame | None, iteration: int = 0) -> bytes | None:
    """Per rank, a compute lane and a communication lane for one iteration (times from ops.csv)."""
    if ops is None or ops.empty:
        return None
    it = ops[ops["iteration"] == iteration]
    if it.empty:
        return None
    ranks = sorted(int(r) for r in it["rank"].unique())
    fig = Figure(figsize=(10, 0.7 * len(ranks) + 1.5))
    ax = fig.add_subplot()
    colours = {"compute": "tab:blue"}
    palette = ["tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"]
    for t in sorted(it["type"].astype(str).unique()):
        if t not in colours:
            colours[t] = palette[(len(colours) - 1) % len(palette)]
    ticks, labels = [], []
    for i, rank in enumerate(ranks):
        mine = it[it["rank"] == rank]
        for lane, (offset, selector) in enumerate(((0.0, mine["type"] == "compute"),
                                                   (0.4, mine["type"] != "compute"))):
            y = i * 1.0 + offset
            for t, group in mine[selector].groupby("type"):
                spans = [(s / 1e6, max((e - s) / 1e6, 1e-3)) for s, e in zip(group["start_ns"], group["end_ns"])]
                ax.broken_barh(spans, (y, 0.35), facecolors=colours[str(t)], edgecolor="none")
            ticks.append(y + 0.175)
            labels.append(f"rank {rank} {'compute' if lane == 0 else 'comm'}")
    ax.set_yticks(ticks, labels)
    ax.invert_yaxis()
    ax.set_xlabel(f"time in iteration {iteration} (ms)")
    present = set(it["type"].astype(str))
    handles = [Patch(color=c, label=t) for t, c in colours.items() if t in present]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    ax.set_title("replay timeline: compute and communication per rank")
    ax.grid(True, axis="x", alpha=0.3)
    return _png(fig)


def _direction(row: Mapping[str, Any]) -> str:
    return f"{row['src']}→{row['dst']}"


def link_heatmap(samples: Sequence[Mapping[str, Any]],
                 rates_bps: Mapping[str, float | None] | None = None) -> bytes | None:
    """Link direction x time: the rate in each sampling interval, as % of the shaped rate when every direction
    has one, else in Gbit/s."""
    if not samples:
        return None
    frame = pd.DataFrame(samples)
    frame["direction"] = [_direction(r) for r in samples]
    order = list(dict.fromkeys(frame["direction"]))
    times = sorted(frame["t_end_s"].unique())
    matrix = frame.pivot_table(index="direction", columns="t_end_s", values="rate_bps", aggfunc="sum")
    matrix = matrix.reindex(index=order, columns=times).fillna(0.0)
    rates = rates_bps or {}
    as_pct = bool(order) and all(rates.get(d) for d in order)
    values = matrix.to_numpy()
    if as_pct:
        values = values / np.array([[float(rates[d])] for d in order]) * 100.0  # type: ignore[arg-type]
        label = "% of link rate"
    else:
        values = values / 1e9
        label = "Gbit/s"
    fig = Figure(figsize=(10, 0.35 * len(order) + 2))
    ax = fig.add_subplot()
    starts = [0.0] + times[:-1]
    edges = [starts[0], *times] if len(times) else [0, 1]
    mesh = ax.pcolormesh(edges, np.arange(len(order) + 1), values, cmap="viridis", shading="flat",
                         vmin=0, vmax=100 if as_pct else None)
    ax.set_yticks(np.arange(len(order)) + 0.5, order)
    ax.invert_yaxis()
    ax.set_xlabel("time since the run started (s)")
    fig.colorbar(mesh, ax=ax, label=label)
    ax.set_title("link utilisation over time (per direction)")
    return _png(fig)


def link_totals(links: Sequence[Mapping[str, Any]]) -> bytes | None:
    """Bytes per link direction over the whole run, with drops noted."""
    if not links:
        return None
    names = [_direction(r) for r in links]
    mbytes = [float(r["bytes"] or 0) / 1e6 for r in links]
    fig = Figure(figsize=(10, 0.35 * len(names) + 2))
    ax = fig.add_subplot()
    bars = ax.barh(names, mbytes, color="tab:blue")
    for bar, r in zip(bars, links):
        drops = sum(float(r.get(k) or 0) for k in ("tx_drops", "rx_drops", "qdisc_drops"))
        note = f" {drops:.0f} drops" if drops else ""
        util = r.get("utilisation_pct")
        note += f" ({util:.1f}% of rate)" if util is not None else ""
        if note:
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, note, va="center", fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel("MB sent")
    ax.set_title("traffic per link direction (whole run)")
    return _png(fig)


def accuracy_bars(frame: pd.DataFrame | None, pairs: Sequence[Any]) -> bytes | None:
    """accuracy.png: :func:`accuracy_figure` as PNG."""
    fig = accuracy_figure(frame, pairs)
    return None if fig is None else _png(fig)


def accuracy_figure(frame: pd.DataFrame | None, pairs: Sequence[Any]) -> Figure | None:
    """Estimated vs measured, grouped bars per row of accuracy.csv and per estimated/measured column pair.
    Text columns the same in every row (the workload, the topology) go into the title once; a bar group is
    labelled by the ones that differ (the mode), wrapped, and the figure widens with the number of groups so
    that no two labels meet. The legend sits right of the axes, never over a bar."""
    if frame is None or frame.empty or not pairs:
        return None
    text_cols = [c for c in frame.columns if frame[c].map(lambda v: isinstance(v, str) and v != "").any()]
    varying = [c for c in text_cols if frame[c].astype(str).nunique() > 1]
    common = [str(frame[c].iloc[0]) for c in text_cols if c not in varying]
    labels = [_wrap(" ".join(str(row[c]) for c in varying[:3]) or str(i), 16) for i, row in frame.iterrows()]
    # each bar group as wide as its bars (0.45 in each) and its label's longest line (~0.1 in a character)
    longest = max((len(line) for label in labels for line in label.split("\n")), default=1)
    group_in = max(0.45 * 2 * len(pairs), 0.1 * longest + 0.3)
    fig = Figure(figsize=(min(40.0, max(5.0, group_in * len(labels) + 2.5)), 4.5))
    ax = fig.add_subplot()
    x = np.arange(len(labels))
    width = 0.8 / (2 * len(pairs))
    names = [f"iteration time ({p.quantity})" if p.quantity in _TIME_UNITS else p.quantity for p in pairs]
    for k, (pair, name) in enumerate(zip(pairs, names)):
        est = pd.to_numeric(frame[pair.estimated], errors="coerce").fillna(0)
        meas = pd.to_numeric(frame[pair.measured], errors="coerce").fillna(0)
        ax.bar(x + (2 * k) * width, meas, width, label=f"measured {name}")
        ax.bar(x + (2 * k + 1) * width, est, width, label=f"estimated {name}", hatch="//")
    ax.set_xticks(x + width * (len(pairs) - 0.5), labels)
    ax.set_ylabel(", ".join(dict.fromkeys(names)))
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.set_title(_wrap("estimated vs measured" + (f": {' on '.join(common[:2])}" if common else ""), 70),
                 fontsize="medium")
    return fig


def _wrap(text: str, width: int) -> str:
    """`text` in lines of at most `width` characters, broken at spaces and commas (a generated workload's
    ``model=gpt3,tp=2,...`` has no spaces)."""
    import textwrap

    return "\n".join(textwrap.wrap(text.replace(",", ", "), width, break_long_words=True)).replace(", ", ",")


def compare_deltas(rows: Sequence[Any], label_a: str, label_b: str) -> bytes | None:
    """Time change B vs A in % per row (case, op, iteration: anything with ``label``, ``median_delta_pct`` and
    optionally ``noise_pct``); a row's noise band as an error bar around 0 (a bar inside it is within noise,
    drawn grey)."""
    if not rows:
        return None
    labels = [r.label for r in rows]
    deltas = [r.median_delta_pct if r.median_delta_pct is not None else 0.0 for r in rows]
    noise = [getattr(r, "noise_pct", None) for r in rows]
    fig = Figure(figsize=(max(6, 0.5 * len(labels) + 2), 4.5))
    ax = fig.add_subplot()
    inside = [n is not None and abs(d) <= n for d, n in zip(deltas, noise)]
    colours = ["tab:grey" if i else "tab:red" if d > 0 else "tab:green" for d, i in zip(deltas, inside)]
    x = np.arange(len(labels))
    ax.bar(x, deltas, color=colours)
    if any(n is not None for n in noise):
        band = np.array([n if n is not None else np.nan for n in noise])
        ax.errorbar(x, np.zeros(len(labels)), yerr=band, fmt="none", ecolor="black", capsize=3, linewidth=0.8,
                    label="noise band")
        ax.legend(fontsize="small")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(x, labels, rotation=60, ha="right", fontsize="small")
    ax.set_ylabel("time change (%)")
    ax.set_title(f"{label_b} vs {label_a}: time change (red = slower, grey = within noise)")
    ax.grid(True, axis="y", alpha=0.3)
    return _png(fig)


def calibration_fit(points: pd.DataFrame | None) -> bytes | None:
    """The calibration's fit: measured and model time against size per curve (collective, group size), and
    each point's residual (model vs measured, %)."""
    if points is None or points.empty:
        return None
    frame = points.copy()
    for col in ("ranks", "size_bytes", "measured_us", "model_us", "residual_pct"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce")
    fig = Figure(figsize=(9, 7))
    top, bottom = fig.add_subplot(2, 1, 1), fig.add_subplot(2, 1, 2)
    for (collective, ranks), group in frame.groupby(["collective", "ranks"], sort=False):
        group = group.sort_values("size_bytes")
        label = f"{collective}, {int(ranks)} ranks"
        line = top.plot(group["size_bytes"], group["measured_us"], marker="o", linestyle="none",
                        label=f"{label} measured")[0]
        top.plot(group["size_bytes"], group["model_us"], color=line.get_color(), label=f"{label} model")
        bottom.plot(group["size_bytes"], group["residual_pct"], marker="o", color=line.get_color(), label=label)
    for ax in (top, bottom):
        ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3)
    top.set_yscale("log")
    top.set_ylabel("time (us)")
    top.legend(fontsize="x-small", ncol=2)
    top.set_title("calibration: measured points and the fitted model")
    bottom.axhline(0, color="black", linewidth=0.8)
    bottom.set_ylabel("residual (model vs measured, %)")
    bottom.set_xlabel("message size (B)")
    return _png(fig)


def pair_matrix(pairs: pd.DataFrame | None) -> bytes | None:
    """Sender x receiver bandwidth of a diagnosis (diagnose.csv), flagged pairs boxed in red."""
    if pairs is None or pairs.empty:
        return None
    hosts = sorted(set(pairs["src"].astype(str)) | set(pairs["dst"].astype(str)), key=lambda h: (len(h), h))
    idx = {h: i for i, h in enumerate(hosts)}
    grid = np.full((len(hosts), len(hosts)), np.nan)
    fig = Figure(figsize=(1.5 + 0.6 * len(hosts), 1.0 + 0.55 * len(hosts)))
    ax = fig.add_subplot()
    flagged = []
    for _, row in pairs.iterrows():
        i, j = idx[str(row["src"])], idx[str(row["dst"])]
        grid[i, j] = float(row["bandwidth_GBps"] or 0)
        if (row["slow_bandwidth"] or 0) or (row["slow_latency"] or 0):
            flagged.append((i, j))
    image = ax.imshow(grid, cmap="viridis")
    for i, j in flagged:
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2))
    ax.set_xticks(range(len(hosts)), hosts, rotation=45)
    ax.set_yticks(range(len(hosts)), hosts)
    ax.set_xlabel("receiver")
    ax.set_ylabel("sender")
    fig.colorbar(image, ax=ax, label="bandwidth (GB/s)")
    ax.set_title("pairwise bandwidth (red: flagged)")
    return _png(fig)


def measured_vs_model(curves: Mapping[str, Sequence[tuple[int, float, float]]], *, title: str = "") -> bytes | None:
    """Time (us) against size, log-log, one colour per curve: measured as dots, the model as a line; `curves` maps
    a label (a collective on n ranks) to its (size_bytes, measured_us, model_us) points."""
    if not any(curves.values()):
        return None
    fig = Figure(figsize=(8, 4.5))
    ax = fig.add_subplot()
    for label, points in curves.items():
        pts = sorted(points)
        line, = ax.plot([p[0] for p in pts], [p[2] for p in pts], label=f"{label} model")
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o", color=line.get_color(), label=f"{label} measured")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("time (us)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    ax.set_title(title or "measured vs model")
    return _png(fig)
