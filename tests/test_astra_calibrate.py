"""Calibration (fit of the estimator's network to measured latencies), measured mode (interpolated
measurements played under the replay's rules) and `genie estimate`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import re

import pytest

from astra_adapter.calibrate import calibrate, calibrated_network, calibration_mapping, model_ns
from astra_adapter.calibration_io import load_calibration, write_calibration
from astra_adapter.mapping import map_topology
from astra_adapter.measurements import (CommOp, Measurement, MeasurementTable, comm_op, describe_missing,
                                        parse_sweep_csv, trace_comm_ops)
from astra_adapter.timeline import play_trace
from astra_adapter.workload_estimate import EstimateMode, estimate_calibrated, estimate_measured
from cli_support import run_genie
from genie.core.collective import Algorithm, Collective
from genie.core.errors import InputError
from genie.core.topology import LinkShape
from genie.core.trace import (CommType, ProcessGroup, collective_node, compute_node, make_trace, recv_node,
                              send_node)
from genie.engine.program import collective_op
from genie.topology import ring, star
from genie.workloads.loader import load_trace

ROOT = Path(__file__).resolve().parents[1]
GBIT = LinkShape(rate_bps=1_000_000_000)
SIZES = (4096, 65536, 1 << 20, 16 << 20)


def _synthetic(mapping, theta, cases) -> list[Measurement]:
    rows = []
    for coll, alg, group in cases:
        for size in SIZES:
            op = CommOp(coll, alg, len(group), size)
            rows.append(Measurement(coll, alg, len(group), size, model_ns(op, mapping, theta, group=group) / 1000,
                                    groups=(group,)))
    return rows


def _recovered(cal, theta) -> np.ndarray:
    values = []
    for d in cal.dims:
        values += [d.latency_ns, 1e9 / (d.bandwidth_gb_per_s * 2**30)]
    return np.array([*values, cal.endpoint_delay_ns])


def test_calibration_recovers_the_model_exactly_on_a_switch() -> None:
    mapping = map_topology(star(8, shape=GBIT))
    theta = np.array([25_000.0, 8.0, 7.0])  # 25 us per hop, 0.125 B/ns, 7 ns endpoint delay
    rows = _synthetic(mapping, theta, [(Collective.ALL_REDUCE, Algorithm.RING, tuple(range(8))),
                                       (Collective.ALL_REDUCE, Algorithm.RING, (0, 1)),
                                       (Collective.ALL_TO_ALL, Algorithm.DIRECT, tuple(range(8))),
                                       (Collective.ALL_GATHER, Algorithm.RING, (0, 1, 2, 3))])
    cal = calibrate(rows, mapping, fit_endpoint_delay=True)
    assert np.allclose(_recovered(cal, theta), theta, rtol=1e-6, atol=0)
    assert cal.size_factors == ((Collective.ALL_GATHER, pytest.approx(1.0, rel=1e-9)),
                                (Collective.ALL_TO_ALL, pytest.approx(1.0, rel=1e-9)))
    assert cal.dims[0].fitted and cal.rms_residual_pct < 0.01
    assert max(abs(p.residual_pct) for p in cal.points) < 0.01  # the estimator rounds each message to 1 ns


def test_calibration_recovers_two_dimensions_and_ring_hops() -> None:
    mapping = map_topology(star(4, shape=GBIT, ranks_per_host=2))
    theta = np.array([2_000.0, 1.0, 30_000.0, 8.0, 3.0])
    rows = _synthetic(mapping, theta, [(Collective.ALL_REDUCE, Algorithm.RING, (0, 1)),
                                       (Collective.ALL_REDUCE, Algorithm.RING, (0, 2, 4, 6)),
                                       (Collective.ALL_REDUCE, Algorithm.RING, tuple(range(8))),
                                       (Collective.REDUCE_SCATTER, Algorithm.RING, tuple(range(8)))])
    assert np.allclose(_recovered(calibrate(rows, mapping, fit_endpoint_delay=True), theta), theta, rtol=1e-6, atol=0)
    ring_map = map_topology(ring(8, shape=GBIT))
    theta = np.array([40_000.0, 16.0, 11.0])
    rows = _synthetic(ring_map, theta, [(Collective.ALL_REDUCE, Algorithm.RING, (0, 2, 4, 6)),
                                        (Collective.SEND_RECV, Algorithm.P2P, (0, 4))])
    sub_groups_only = calibrate(rows, ring_map, fit_endpoint_delay=True)  # sub-groups: a fixed 10 ns instead
    assert np.allclose(_recovered(sub_groups_only, theta)[:2], theta[:2], rtol=1e-6, atol=0)
    assert sub_groups_only.endpoint_delay_ns == 10 and any("endpoint delay" in n for n in sub_groups_only.notes)
    rows += _synthetic(ring_map, theta, [(Collective.ALL_REDUCE, Algorithm.RING, tuple(range(8)))])
    assert np.allclose(_recovered(calibrate(rows, ring_map, fit_endpoint_delay=True), theta), theta, rtol=1e-6,
                       atol=0)
    fixed = calibrate(rows, ring_map)  # by default the endpoint delay stays at its default; latency carries it
    assert fixed.endpoint_delay_ns == 10 and fixed.dims[0].fitted


def test_size_factors_absorb_a_collective_that_uses_the_link_worse() -> None:
    """All-to-all measured 1.75x slower per byte than the model: the bandwidth stays all-reduce's."""
    mapping = map_topology(star(8, shape=GBIT))
    theta = np.array([30_000.0, 8.0, 10.0])
    rows = _synthetic(mapping, theta, [(Collective.ALL_REDUCE, Algorithm.RING, tuple(range(8)))])
    for size in SIZES:
        scaled = CommOp(Collective.ALL_TO_ALL, Algorithm.DIRECT, 8, size * 7 // 4)
        rows.append(Measurement(Collective.ALL_TO_ALL, Algorithm.DIRECT, 8, size,
                                model_ns(scaled, mapping, theta) / 1000))
    cal = calibrate(rows, mapping)
    assert np.allclose(_recovered(cal, theta), theta, rtol=1e-6, atol=0)
    assert dict(cal.size_factors)[Collective.ALL_TO_ALL] == pytest.approx(1.75, rel=1e-6)
    assert max(abs(p.residual_pct) for p in cal.points) < 0.01
    assert calibrate(rows, mapping, size_factors=False).rms_residual_pct > 5


def test_the_fit_weighted_by_the_workload_follows_the_ops_it_spends_its_time_on() -> None:
    """A sweep whose largest all-reduce ran 10% slower than the smaller sizes say (and an all-to-all, whose
    size factor the weights move too): unweighted, the fit splits the difference; weighted by the workload's
    time (here: all of it at that size), it follows that size, as the fabric model's weighted fit does."""
    mapping = map_topology(star(8, shape=GBIT))
    theta = np.array([30_000.0, 8.0, 10.0])
    world = tuple(range(8))
    rows = _synthetic(mapping, theta, [(Collective.ALL_REDUCE, Algorithm.RING, world),
                                       (Collective.ALL_TO_ALL, Algorithm.DIRECT, world)])
    rows[len(SIZES) - 1] = Measurement(Collective.ALL_REDUCE, Algorithm.RING, 8, SIZES[-1],
                                       rows[len(SIZES) - 1].time_us * 1.10, groups=(world,))
    weights = [5.0 if r.size_bytes == SIZES[-1] and r.collective is Collective.ALL_REDUCE else 1.0 for r in rows]
    plain, weighted = calibrate(rows, mapping), calibrate(rows, mapping, weights=weights)

    def residual(cal, size: int) -> float:
        return next(abs(p.residual_pct) for p in cal.points
                    if p.collective is Collective.ALL_REDUCE and p.size_bytes == size)

    assert residual(weighted, SIZES[-1]) < residual(plain, SIZES[-1]) / 2
    assert residual(weighted, SIZES[-2]) > residual(plain, SIZES[-2])  # the price: the other sizes fit worse
    assert calibrate(rows, mapping, weights=[1.0] * len(rows)) == plain  # all 1: the unweighted fit
    with pytest.raises(ValueError):
        calibrate(rows, mapping, weights=[1.0])

def test_calibration_keeps_what_it_cannot_separate(tmp_path: Path) -> None:
    mapping = map_topology(star(8, shape=GBIT))
    rows = [Measurement(Collective.ALL_REDUCE, Algorithm.RING, 8, 1 << 20, 20_000.0),
            Measurement(Collective.BROADCAST, Algorithm.PIPELINED_RING, 8, 1 << 20, 9_000.0)]
    cal = calibrate(rows, mapping, fit_endpoint_delay=True)
    assert cal.endpoint_delay_ns == 10 and abs(cal.points[0].residual_pct) < 0.01
    assert any("broadcast" in n for n in cal.notes) and any("endpoint delay" in n for n in cal.notes)
    write_calibration(cal, tmp_path)
    back = load_calibration(tmp_path)
    assert back.dims == cal.dims and back.endpoint_delay_ns == cal.endpoint_delay_ns
    assert back.size_factors == cal.size_factors
    assert (tmp_path / "calibration.csv").read_text().splitlines()[0] == \
        "collective,algorithm,ranks,group,size_bytes,measured_us,model_us,residual_pct"
    net, notes = calibrated_network(map_topology(ring(16, shape=GBIT)), back)  # what-if: another topology
    assert net.dims[0].npus_count == 16 and net.dims[0].bandwidth_gb_per_s == cal.dims[0].bandwidth_gb_per_s
    assert any("used as 16-NPU Ring" in n for n in notes)
    assert calibration_mapping(back).npus_count == 8
    (tmp_path / "calibration.json").write_text('{"format": "genie-calibration", "dims": []}')
    with pytest.raises(InputError, match="dims"):
        load_calibration(tmp_path)


# ---- measured mode --------------------------------------------------------------------------------------
def test_interpolation_is_log_log_and_never_extrapolates() -> None:
    rows = [Measurement(Collective.ALL_REDUCE, Algorithm.RING, 8, s, 3.0 * s ** 0.75) for s in (1024, 1 << 20)]
    table = MeasurementTable(rows)
    op = CommOp(Collective.ALL_REDUCE, Algorithm.RING, 8, 32768)
    assert table.time_us(op) == pytest.approx(3.0 * 32768 ** 0.75, rel=1e-12)
    assert table.time_us(CommOp(Collective.ALL_REDUCE, Algorithm.RING, 8, 1024)) == 3.0 * 1024 ** 0.75
    assert table.time_us(CommOp(Collective.ALL_REDUCE, Algorithm.RING, 8, 2 << 20)) is None
    assert table.time_us(CommOp(Collective.ALL_REDUCE, Algorithm.RING, 4, 32768)) is None
    # auto: the curve of whatever auto picks per size (recursive doubling, halving-doubling, ring)
    auto = MeasurementTable([Measurement(Collective.ALL_REDUCE, Algorithm.HALVING_DOUBLING, 8, 128 << 10, 100.0),
                             Measurement(Collective.ALL_REDUCE, Algorithm.RING, 8, 128 << 10, 999.0),
                             Measurement(Collective.ALL_REDUCE, Algorithm.RING, 8, 512 << 10, 400.0)])
    assert auto.time_us(CommOp(Collective.ALL_REDUCE, Algorithm.RING, 8, 256 << 10 | 4, auto=True)) == \
        pytest.approx(200.0, rel=1e-3)


def test_comm_ops_are_what_the_replay_runs() -> None:
    trace = load_trace(ROOT / "traces" / "gen_3d_dp2_tp2_pp2_gpt3")
    for rank in trace.ranks:
        for node in rank.nodes:
            op = comm_op(node, trace)
            if op is None or op.collective is Collective.SEND_RECV:
                continue
            replay = collective_op(node, trace, rank.rank, source="t")
            assert (op.collective, op.algorithm, op.ranks, op.size_bytes) == \
                (replay.collective, replay.algorithm, len(replay.group), replay.size_bytes)
    kinds = {(o.collective, o.ranks) for o in trace_comm_ops(trace)}
    assert (Collective.SEND_RECV, 2) in kinds and (Collective.ALL_GATHER, 2) in kinds


def test_missing_measurements_are_listed() -> None:
    trace = load_trace(ROOT / "traces" / "gen_tp2_dp4_gpt3")
    rows = [Measurement(Collective.ALL_REDUCE, Algorithm.RING, 2, s, s / 100) for s in (1024, 64 << 20)]
    table = MeasurementTable(rows)
    with pytest.raises(InputError) as err:
        estimate_measured(trace, table)
    message = str(err.value)
    assert "all_reduce/auto:ring on 4 ranks" in message and "none measured" in message
    assert "--extrapolate" in message
    missing = table.missing(trace_comm_ops(trace))
    assert all(op.ranks == 4 for op in missing) and len(missing) == 3
    assert describe_missing(missing, table).startswith("no measurement for 3 communication op(s)")
    # the message gives the bench command that measures them (issue #17), sizes covering every missing op
    commands = re.findall(r"genie bench [^;)]*", message)
    assert commands and all("--ranks 4" in c and "--collective all_reduce" in c for c in commands)
    for op in missing:
        low, high = (int(v) for v in re.search(r"-b (\d+) -e (\d+)", commands[0]).groups())
        assert low <= op.size_bytes <= high


def _two_rank_trace():
    r0 = [compute_node(0, "c", duration_ns=100), collective_node(1, "ar", comm_type=CommType.ALL_REDUCE,
                                                                 size_bytes=1 << 20, data_deps=(0,)),
          compute_node(2, "c2", duration_ns=50, data_deps=(1,))]
    r1 = [compute_node(0, "c", duration_ns=300), collective_node(1, "ar", comm_type=CommType.ALL_REDUCE,
                                                                 size_bytes=1 << 20, data_deps=(0,)),
          compute_node(2, "c2", duration_ns=50, data_deps=(1,))]
    return make_trace([r0, r1])


def test_timeline_waits_for_every_member() -> None:
    tl = play_trace(_two_rank_trace(), lambda op: 1000.0)
    assert [r.iteration_ns for r in tl.ranks] == [1350, 1350]
    assert tl.ranks[0].comm_ns == 1200 and tl.ranks[0].exposed_comm_ns == 1200 and tl.ranks[1].comm_ns == 1000


def test_timeline_shares_a_rank_link_between_concurrent_ops() -> None:
    groups = (ProcessGroup("a", (0, 1)), ProcessGroup("b", (0, 2)))
    ranks = [[collective_node(0, "x", comm_type=CommType.ALL_REDUCE, size_bytes=4096, process_group="a"),
              collective_node(1, "y", comm_type=CommType.ALL_REDUCE, size_bytes=4096, process_group="b")],
             [collective_node(0, "x", comm_type=CommType.ALL_REDUCE, size_bytes=4096, process_group="a")],
             [collective_node(0, "y", comm_type=CommType.ALL_REDUCE, size_bytes=4096, process_group="b")]]
    trace = make_trace(ranks, groups=groups)
    assert play_trace(trace, lambda op: 1000.0).iteration_ns == 2000  # both at half speed on rank 0
    assert play_trace(trace, lambda op: 1000.0, share_nic=False).iteration_ns == 1000
    p2p = make_trace([[send_node(0, "s", rank=0, peer=1, size_bytes=100), compute_node(1, "c", duration_ns=10)],
                      [compute_node(0, "c", duration_ns=500),
                       recv_node(1, "r", rank=1, peer=0, size_bytes=100, data_deps=(0,))]])
    tl = play_trace(p2p, lambda op: 200.0 if op.collective is Collective.SEND_RECV else 0.0)
    assert [r.iteration_ns for r in tl.ranks] == [700, 700]  # the send waits for the receive to be posted
    assert tl.ranks[0].comm_ns == 700 and tl.ranks[1].comm_ns == 200


def test_measured_and_calibrated_modes_agree_on_the_model_itself() -> None:
    """Measurements made by the model, estimated both ways, on a trace with one collective at a time."""
    mapping = map_topology(star(2, shape=GBIT))
    theta = np.array([10_000.0, 8.0, 10.0])
    rows = _synthetic(mapping, theta, [(Collective.ALL_REDUCE, Algorithm.RING, (0, 1))])
    rows += [Measurement(Collective.ALL_REDUCE, Algorithm.RING, 2, 1 << 20,
                         model_ns(CommOp(Collective.ALL_REDUCE, Algorithm.RING, 2, 1 << 20), mapping, theta) / 1000)]
    trace = _two_rank_trace()
    measured = estimate_measured(trace, MeasurementTable(rows))
    calibrated = estimate_calibrated(trace, mapping, calibrate(rows, mapping))
    assert measured.mode is EstimateMode.MEASURED and calibrated.mode is EstimateMode.CALIBRATED
    assert measured.iteration_ns == pytest.approx(calibrated.iteration_ns, abs=2)


# ---- genie estimate ---------------------------------------------------------------------------------------
def _sweep_dir(tmp_path: Path, sizes, name: str = "bench") -> Path:
    run = tmp_path / name
    run.mkdir()
    lines = ["collective,algorithm,ranks,size_bytes,count,dtype,iterations,time_min_us,time_median_us,time_p99_us,"
             "time_max_us,algbw_GBps,busbw_GBps"]
    for s in sizes:
        t = 50 + s / 50.0  # slower than 8 ranks' ring all-reduce at 1 Gbit/s can be (S / 68.3 us): possible on star-8
        lines.append(f"all_reduce,ring,8,{s},{s // 4},float,5,{t},{t},{t},{t},0.1,0.2")
    (run / "sweep.csv").write_text("\n".join(lines) + "\n")
    assert len(parse_sweep_csv((run / "sweep.csv").read_text())) == len(sizes)
    return run


def test_cli_estimate_measured_missing_and_calibrated(tmp_path: Path) -> None:
    trace = ROOT / "traces" / "gen_ddp_resnet50"
    run = _sweep_dir(tmp_path, [1 << 20, 64 << 20])
    done = run_genie("estimate", trace, "--measurements", run, "--out", tmp_path / "m", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    rows = (tmp_path / "m" / "estimate.csv").read_text().splitlines()
    assert rows[0] == "mode,rank,iteration_ns,compute_ns,comm_ns,exposed_comm_ns,overlap_ns" and len(rows) == 9
    assert "measured estimate: iteration" in done.stdout
    short = _sweep_dir(tmp_path, [8 << 20, 16 << 20], "short")
    done = run_genie("estimate", trace, "--measurements", short, "--out", tmp_path / "x", cwd=ROOT)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "no measurement for 3" in done.stderr
    assert not (tmp_path / "x" / "estimate.csv").exists()
    done = run_genie("estimate", trace, "-m", short, "--extrapolate", "--topology", "topologies/star-8.yaml",
                     "--out", tmp_path / "x", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    done = run_genie("estimate", trace, "-m", run, "--mode", "calibrated", "--out", tmp_path / "c", cwd=ROOT)
    assert done.returncode == 2 and "--topology" in done.stderr
    done = run_genie("estimate", trace, "-m", run, "--mode", "calibrated", "--topology", "topologies/star-8.yaml",
                     "--out", tmp_path / "c", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "c" / "calibration.json").is_file() and (tmp_path / "c" / "estimate.csv").is_file()
    done = run_genie("estimate", trace, "-m", tmp_path / "c", "--mode", "calibrated", "--out", tmp_path / "c2",
                     cwd=ROOT)
    assert done.returncode == 2 and "sweep.csv" in done.stderr  # c holds no measurements


def test_points_faster_than_the_links_allow_are_left_out_of_the_fit(tmp_path: Path) -> None:
    """The fabric model's lower bound (nominal rates, no overhead) decides; the impossible point is listed with its
    bound, named in a note, written to calibration.json, and does not pull the fit."""
    import json

    from astra_adapter.calibration_io import calibration_json
    from astra_adapter.fabric.calibrate import lower_bounds_us
    from astra_adapter.fabric.network import FabricNetwork

    topology = star(8, shape=GBIT)
    mapping = map_topology(topology)
    theta = np.array([25_000.0, 8.0, 10.0])
    rows = _synthetic(mapping, theta, [(Collective.ALL_REDUCE, Algorithm.RING, tuple(range(8)))])
    # a 16 MiB ring all-reduce on 8 ranks at 1 Gbit/s moves 2 x 7/8 x 16 MiB per link: >= 234.9 ms of payload
    fast = Measurement(Collective.ALL_REDUCE, Algorithm.RING, 8, 16 << 20, 100_000.0, groups=(tuple(range(8)),))
    bounds = lower_bounds_us([*rows, fast], FabricNetwork(topology))
    assert bounds[-1] == pytest.approx(2 * 7 / 8 * (16 << 20) / 125, rel=1e-9)
    assert all(r.time_us >= b for r, b in zip(rows, bounds))  # the model's own points are possible
    cal = calibrate([*rows, fast], mapping, bounds_us=bounds)
    clean = calibrate(rows, mapping)
    assert _recovered(cal, theta) == pytest.approx(_recovered(clean, theta)) and cal.rms_residual_pct < 0.01
    assert len(cal.points) == len(rows) and [(q.size_bytes, q.measured_us) for q in cal.excluded] == [(16 << 20,
                                                                                                     100_000.0)]
    assert cal.excluded[0].bound_us == pytest.approx(bounds[-1])
    assert any("1 of 5 measurements are faster than their links' nominal rates allow" in n for n in cal.notes)
    doc = json.loads(calibration_json(cal))
    assert [e["measured_us"] for e in doc["excluded"]] == [100_000.0] and len(doc["points"]) == 4


def test_nothing_possible_to_fit_keeps_the_links_values() -> None:
    topology = star(4, shape=GBIT)
    mapping = map_topology(topology)
    rows = [Measurement(Collective.ALL_REDUCE, Algorithm.RING, 4, 1 << 20, 1.0, groups=((0, 1, 2, 3),))]
    cal = calibrate(rows, mapping, bounds_us=[10_000.0])
    assert cal.points == () and len(cal.excluded) == 1 and not any(d.fitted for d in cal.dims)
    assert cal.dims[0].bandwidth_gb_per_s == pytest.approx(1e9 / 8 / 2**30)
    assert any("nothing left to fit" in n for n in cal.notes)


def test_cli_estimate_calibrated_on_a_topology_leaves_out_impossible_points(tmp_path: Path) -> None:
    import json

    run = _sweep_dir(tmp_path, [1 << 20, 16 << 20, 64 << 20])
    text = (run / "sweep.csv").read_text().splitlines()
    text[2] = text[2].replace(f"{50 + (16 << 20) / 50.0}", "1000.0")  # 16 MiB in 1 ms: 16 GB/s on 1 Gbit/s links
    (run / "sweep.csv").write_text("\n".join(text) + "\n")
    done = run_genie("estimate", ROOT / "traces" / "gen_ddp_resnet50", "-m", run, "--mode", "calibrated",
                     "--topology", "topologies/star-8.yaml", "--out", tmp_path / "c", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "c" / "calibration.json").read_text())
    assert [(e["size_bytes"], e["measured_us"]) for e in doc["excluded"]] == [(16 << 20, 1000.0)]
    assert sorted(p["size_bytes"] for p in doc["points"]) == [1 << 20, 64 << 20]
