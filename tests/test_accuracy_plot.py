"""Issue #35 item 9: the experiment's accuracy plot — no two x labels overlap, the legend covers no bar, and
accuracy.csv quotes a generated workload's commas so that the plot reads the right columns."""

from __future__ import annotations

import io
from itertools import combinations

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.patches import Rectangle

from astra_adapter.experiment import AccuracyRow, accuracy_csv
from genie.report.plots import accuracy_bars, accuracy_figure
from genie.report.rundata import accuracy_pairs

GENERATED = "generated:model=gpt3,tp=2,dp=4,layers=4"


def _frame(workloads: tuple[str, ...], modes: tuple[str, ...]) -> pd.DataFrame:
    rows = [AccuracyRow(w, "star-8", m, 0.9 + 0.05 * i, 0.95) for w in workloads for i, m in enumerate(modes)]
    return pd.read_csv(io.StringIO(accuracy_csv(rows)))


def test_accuracy_csv_quotes_commas_and_reads_back() -> None:
    frame = _frame((GENERATED,), ("measured", "calibrated"))
    assert list(frame.columns) == ["workload", "topology", "mode", "estimated_s", "measured_s", "error_pct"]
    assert list(frame["workload"]) == [GENERATED] * 2 and list(frame["mode"]) == ["measured", "calibrated"]


@pytest.mark.parametrize(("workloads", "modes"), [
    (("gen_tp2_dp4_gpt3",), ("measured", "calibrated", "fabric")),  # the tp2dp4 star-8 demo
    (("gen_tp2_dp4_gpt3",), ("measured", "calibrated", "fabric", "nccl")),
    ((GENERATED, "gen_tp2_dp4_gpt3_long_name"), ("measured", "calibrated", "fabric")),
])
def test_labels_do_not_overlap_and_the_legend_covers_no_bar(workloads, modes) -> None:
    frame = _frame(workloads, modes)
    fig = accuracy_figure(frame, accuracy_pairs(list(frame.columns)))
    assert fig is not None
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    ax = fig.axes[0]
    labels = [t for t in ax.get_xticklabels() if t.get_text()]
    assert len(labels) == len(frame)
    boxes = [t.get_window_extent(renderer) for t in labels]
    for a, b in combinations(boxes, 2):
        assert not a.overlaps(b), (a, b)
    legend = ax.get_legend().get_window_extent(renderer)
    bars = [p.get_window_extent(renderer) for p in ax.patches if isinstance(p, Rectangle)]
    assert bars and not any(legend.overlaps(bar) for bar in bars)
    title = ax.get_title()
    assert "star-8" in title and (len(workloads) > 1 or workloads[0] in title)  # said once, not per bar
    if len(workloads) == 1:
        assert [t.get_text() for t in labels] == list(modes)
    assert accuracy_bars(frame, accuracy_pairs(list(frame.columns)))[:8] == b"\x89PNG\r\n\x1a\n"
