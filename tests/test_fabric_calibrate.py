"""Calibration of the fabric model per link class, fabric_calibration.json, `genie estimate` on the fabric
model (default where the topology needs it, --calibration RUN_DIR), its errors, and `genie trace gen --ranks`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from genie.core.collective import Algorithm, Collective
from genie.core.errors import InputError
from genie.core.flowpath import PATHS_JSON, FlowPath, RunPaths, SessionPaths
from genie.topology import load_topology_file
from genie.workloads.generators.options import GeneratorOptions, resolve

from astra_adapter.fabric.calibrate import calibrate_fabric, model_times_us
from astra_adapter.fabric.calibration_io import FABRIC_CALIBRATION_JSON, fabric_calibration_json, load_fabric_params
from astra_adapter.fabric.flows import ECMP_SAMPLES, FabricParams
from astra_adapter.fabric.network import FabricNetwork, LinkClass, sample_networks
from astra_adapter.measurements import Measurement
from tests.cli_support import run_genie

ROOT = Path(__file__).resolve().parent.parent
OVERSUB = ROOT / "topologies" / "leaf-spine-2x4-oversub.yaml"
STAR = ROOT / "topologies" / "star-8.yaml"
TRACE = ROOT / "traces" / "gen_tp2_dp4_gpt3"

TRUE = FabricParams(((LinkClass.HOST, 0.8), (LinkClass.FABRIC, 0.6)), message_overhead_ns=150_000.0)
INTRA_LEAF = ((0, 1), (2, 3), (4, 5), (6, 7))  # every pair on one leaf
CROSS_SPINE = ((0, 2, 4, 6), (1, 3, 5, 7))


def _sweep(network: FabricNetwork, params: FabricParams) -> list[Measurement]:
    ms = []
    for groups in (INTRA_LEAF, CROSS_SPINE):
        for size in (64 << 10, 1 << 20, 8 << 20, 32 << 20):
            m = Measurement(Collective.ALL_REDUCE, Algorithm.RING, len(groups[0]), size, 0.0, "sweep", groups)
            ms.append(m)
    times = model_times_us(sample_networks(network, ECMP_SAMPLES), params, ms)  # as the calibration models it
    return [Measurement(m.collective, m.algorithm, m.ranks, m.size_bytes, float(t), "sweep", m.groups)
            for m, t in zip(ms, times)]


def test_each_link_class_is_fitted_from_the_groups_that_cross_it():
    network = FabricNetwork(load_topology_file(OVERSUB))
    cal = calibrate_fabric(_sweep(network, TRUE), network)
    fits = {c.link_class: c for c in cal.classes}
    # the intra-leaf pairs (one flow per link) pin the host links; the fabric's efficiency and the flow
    # contention trade off on this sweep, so the fabric is checked by what it predicts at a size it never saw
    assert fits[LinkClass.HOST].efficiency == pytest.approx(0.8, rel=1e-3)
    assert cal.params.message_overhead_ns == pytest.approx(150_000, rel=1e-2)
    assert fits[LinkClass.HOST].points == 8 and fits[LinkClass.FABRIC].points == 4
    assert cal.rms_residual_pct < 0.1 and not cal.warnings()
    unseen = [Measurement(Collective.ALL_REDUCE, Algorithm.RING, 4, 16 << 20, 0.0, "sweep", CROSS_SPINE)]
    nets = sample_networks(network, ECMP_SAMPLES)
    assert model_times_us(nets, cal.params, unseen)[0] == pytest.approx(model_times_us(nets, TRUE, unseen)[0],
                                                                       rel=2e-3)


def test_a_point_faster_than_the_links_allow_is_left_out_and_said():
    network = FabricNetwork(load_topology_file(OVERSUB))
    ms = _sweep(network, TRUE)
    fast = ms[3]  # 32 MiB on the intra-leaf pairs, measured 5x faster than 1 Gbit/s allows
    ms[3] = Measurement(fast.collective, fast.algorithm, fast.ranks, fast.size_bytes, fast.time_us / 5, "sweep",
                        fast.groups)
    cal = calibrate_fabric(ms, network)
    assert [p.op.size_bytes for p in cal.excluded] == [32 << 20]
    assert any("faster than their links' nominal rates" in n for n in cal.notes)
    assert dict(cal.params.efficiency)[LinkClass.HOST] == pytest.approx(0.8, rel=1e-3)  # the rest still fit
    assert cal.rms_residual_pct < 0.1


def test_a_class_no_measurement_crosses_is_not_fitted():
    network = FabricNetwork(load_topology_file(OVERSUB))
    ms = [m for m in _sweep(network, TRUE) if m.groups == INTRA_LEAF]
    cal = calibrate_fabric(ms, network)
    fabric = next(c for c in cal.classes if c.link_class is LinkClass.FABRIC)
    assert not fabric.fitted and fabric.efficiency == 1.0
    assert any("no measurement crosses fabric links" in n for n in cal.notes)


def test_a_bad_fit_warns_over_ten_percent():
    network = FabricNetwork(load_topology_file(OVERSUB))
    ms = _sweep(network, TRUE)
    ms = [Measurement(m.collective, m.algorithm, m.ranks, m.size_bytes, m.time_us * (2.0 if i % 2 else 1.0),
                      "sweep", m.groups) for i, m in enumerate(ms)]  # alternate points twice as slow
    cal = calibrate_fabric(ms, network)
    assert cal.rms_residual_pct > 10 and any("over 10%" in w for w in cal.warnings())


def _calibration_dir(tmp_path: Path) -> Path:
    network = FabricNetwork(load_topology_file(OVERSUB))
    run = tmp_path / "cal"
    run.mkdir()
    (run / FABRIC_CALIBRATION_JSON).write_text(fabric_calibration_json(calibrate_fabric(_sweep(network, TRUE),
                                                                                        network)))
    return run


def test_calibration_round_trips(tmp_path: Path):
    run = _calibration_dir(tmp_path)
    params, fitted, _ = load_fabric_params(run)
    written = json.loads((run / FABRIC_CALIBRATION_JSON).read_text())
    assert set(fitted) == {LinkClass.HOST, LinkClass.FABRIC}
    assert params.efficiency_of(LinkClass.FABRIC) == pytest.approx(
        next(c["efficiency"] for c in written["classes"] if c["link_class"] == "fabric"))
    assert params.flow_contention == pytest.approx(written["flow_contention"])
    assert params.message_overhead_ns == pytest.approx(150_000, rel=1e-2)


def test_estimate_uses_the_fabric_model_on_a_leaf_spine_and_with_a_calibration(tmp_path: Path):
    done = run_genie("estimate", TRACE, "--topology", OVERSUB, "--out", tmp_path / "nominal", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# fabric estimate") and "uncalibrated" in done.stdout
    nominal = float(done.stdout.split("iteration ")[1].split(" ms")[0])
    done = run_genie("estimate", TRACE, "--topology", OVERSUB, "--calibration", _calibration_dir(tmp_path),
                     "--out", tmp_path / "calibrated", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    calibrated = float(done.stdout.split("iteration ")[1].split(" ms")[0])
    assert calibrated > nominal  # links at 80% / 60% and a per-message overhead are slower


def test_estimate_uses_the_fabric_model_where_the_workloads_groups_share_ring_links(tmp_path: Path):
    ring = ROOT / "topologies" / "ring-8.yaml"  # a plain ASTRA-sim Ring, but both DP rings cross every other link
    done = run_genie("estimate", TRACE, "--topology", ring, "--out", tmp_path / "ring", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# fabric estimate") and "uncalibrated" in done.stdout
    done = run_genie("estimate", ROOT / "traces" / "gen_ddp_resnet50", "--topology", ring, cwd=ROOT)
    assert done.returncode == 2 and "--measurements" in done.stderr  # one group: the measured mode, as before


def test_a_calibration_with_a_class_the_target_lacks_is_refused(tmp_path: Path):
    cal = _calibration_dir(tmp_path)
    done = run_genie("estimate", TRACE, "--topology", STAR, "--calibration", cal, "--out", tmp_path / "o", cwd=ROOT)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert FABRIC_CALIBRATION_JSON in done.stderr and "classes" in done.stderr and "fabric" in done.stderr
    assert not (tmp_path / "o").exists()


def test_a_bad_mode_and_a_missing_calibration_are_one_line_errors(tmp_path: Path):
    done = run_genie("estimate", TRACE, "--topology", OVERSUB, "--mode", "flowsim", cwd=ROOT)
    assert done.returncode == 2 and "--mode" in done.stderr and done.stderr.count("\n") == 1
    done = run_genie("estimate", TRACE, "--topology", OVERSUB, "--calibration", tmp_path, cwd=ROOT)
    assert done.returncode == 2 and FABRIC_CALIBRATION_JSON in done.stderr and done.stderr.count("\n") == 1


def test_generator_ranks_scales_the_data_parallel_replicas():
    setup = resolve(GeneratorOptions(model="gpt3-125m", tp=2, dp=4, ranks=32))
    assert (setup.parallelism.dp, setup.parallelism.tp) == (16, 2)
    with pytest.raises(InputError, match="multiple of tp x pp = 2") as info:
        resolve(GeneratorOptions(model="gpt3-125m", tp=2, ranks=31))
    assert info.value.path == "ranks"
    with pytest.raises(InputError, match="ep = 8 does not divide"):
        resolve(GeneratorOptions(model="gpt3-125m", dp=8, ep=8, experts=8, ranks=12))


def test_the_sweep_adds_a_cross_spine_pair_when_no_group_crosses_the_fabric():
    from astra_adapter.experiment_spec import SweepCase
    from astra_adapter.fabric.experiment import cover_link_classes

    topo = load_topology_file(OVERSUB)
    intra = (SweepCase(Collective.ALL_REDUCE, Algorithm.RING, 2, (1 << 20,), INTRA_LEAF),)
    sweep = cover_link_classes(intra, topo, (64 << 10, 1 << 20))
    assert sweep[0] == intra[0] and len(sweep) == 2
    assert sweep[1].collective is Collective.SEND_RECV and sweep[1].groups == ((0, 4),)  # h0 (leaf0) -> h4 (leaf1)
    crossing = (SweepCase(Collective.ALL_REDUCE, Algorithm.RING, 4, (1 << 20,), CROSS_SPINE),)
    assert cover_link_classes(crossing, topo, (1 << 20,)) == crossing


def test_best_iterations_skip_the_physically_impossible_ones():
    from astra_adapter.fabric.calibrate import fastest_possible, lower_bounds_us

    network = FabricNetwork(load_topology_file(STAR))
    probe = Measurement(Collective.ALL_REDUCE, Algorithm.RING, 8, 8 << 20, 1.0, "sweep", (tuple(range(8)),))
    bound = float(lower_bounds_us([probe], network)[0])  # 2 x 7/8 x 8 MiB at 1 Gbit/s
    assert bound == pytest.approx(2 * 7 / 8 * (8 << 20) * 8 / 1e9 * 1e6, rel=1e-6)
    m = Measurement(Collective.ALL_REDUCE, Algorithm.RING, 8, 8 << 20, bound * 1.2, "sweep", (tuple(range(8)),),
                    (bound * 0.5, bound * 1.1, bound * 1.3))
    never = Measurement(Collective.ALL_REDUCE, Algorithm.RING, 8, 8 << 20, bound * 0.6, "sweep", (tuple(range(8)),),
                        (bound * 0.5, bound * 0.7))
    kept, impossible = fastest_possible((m, never), network)
    assert impossible == 3
    assert kept[0].time_us == pytest.approx(bound * 1.1)  # the fastest possible one, not bound * 0.5
    assert kept[1].time_us == pytest.approx(bound * 0.6)  # none possible: its typical time (the trimmed mean)


def test_the_fit_weighted_by_the_workload_follows_the_ops_it_spends_its_time_on():
    """A sweep whose largest message ran 10% slower than the small ones say: the unweighted fit splits the
    difference; weighted by a workload that spends its time at that size, the fit follows it."""
    from astra_adapter.measurements import trace_comm_ops, workload_weights
    from genie.workloads.loader import load_trace

    network = FabricNetwork(load_topology_file(STAR))
    world = (tuple(range(8)),)
    ms = [Measurement(Collective.ALL_REDUCE, Algorithm.RING, 8, size, 0.0, "sweep", world)
          for size in (64 << 10, 1 << 20, 8 << 20, 32 << 20)]
    times = model_times_us(network, FabricParams(((LinkClass.HOST, 0.8),), message_overhead_ns=150_000.0), ms)
    times[-1] *= 1.10
    ms = [Measurement(m.collective, m.algorithm, m.ranks, m.size_bytes, float(t), "sweep", m.groups)
          for m, t in zip(ms, times)]
    plain = calibrate_fabric(ms, network)
    weighted = calibrate_fabric(ms, network, weights=(1.0, 1.0, 1.0, 5.0))
    assert abs(weighted.points[-1].residual_pct) < abs(plain.points[-1].residual_pct) / 2
    assert max(abs(p.residual_pct) for p in weighted.points[:-1]) > max(abs(p.residual_pct) for p in plain.points[:-1])
    # the weights a trace gives: 1 for sizes it never runs, and the workload's half shared by time among the rest
    trace = load_trace(TRACE)
    ops = [op for op in trace_comm_ops(trace) if op.collective is Collective.ALL_REDUCE][:2]
    assert len(ops) == 2
    run = [Measurement(op.collective, op.algorithm, op.ranks, op.size_bytes, 1000.0 * (k + 1), "sweep")
           for k, op in enumerate(ops)]
    grid = Measurement(Collective.ALL_REDUCE, Algorithm.RING, 8, 12345, 500.0, "sweep")
    w = workload_weights(trace, [*run, grid])
    assert w[-1] == 1.0 and all(x > 1.0 for x in w[:-1])
    assert sum(w) == pytest.approx(2 * len(w))  # the sweep as a whole, and as much again for the workload
    with pytest.raises(ValueError):
        calibrate_fabric(ms, network, weights=(1.0,))


# ---- the paths a bench run's connections took (paths.json) -------------------------------------------------
def _ring_paths(label: str = "sweep", via: str = "spine1") -> SessionPaths:
    """An 8-rank ring's connections on the oversubscribed leaf-spine: h3 -> h4 and h7 -> h0 over ``via``."""
    leaf = {r: f"leaf{r // 4}" for r in range(8)}
    paths = []
    for r in range(8):
        s, d = r, (r + 1) % 8
        middle = (leaf[s],) if leaf[s] == leaf[d] else (leaf[s], via, leaf[d])
        paths.append(FlowPath(s, d, (f"h{s}", *middle, f"h{d}")))
    return SessionPaths(label, tuple(paths))


def _bench_dir(tmp_path: Path, name: str, paths: SessionPaths | None = None, text: str | None = None) -> Path:
    run = tmp_path / name
    run.mkdir()
    lines = ["collective,algorithm,ranks,size_bytes,count,dtype,iterations,time_min_us,time_median_us,time_p99_us,"
             "time_max_us,algbw_GBps,busbw_GBps"]
    for s in (64 << 10, 1 << 20, 8 << 20):
        t = 200 + s / 20.0  # slower than the links allow
        lines.append(f"all_reduce,ring,8,{s},{s // 4},float,5,{t},{t},{t},{t},0.1,0.2")
    (run / "sweep.csv").write_text("\n".join(lines) + "\n")
    if paths is not None:
        (run / PATHS_JSON).write_text(RunPaths(sweep=(paths,)).to_json())
    elif text is not None:
        (run / PATHS_JSON).write_text(text)
    return run


def test_estimate_fits_on_the_paths_the_measurements_took_when_they_match(tmp_path: Path):
    from astra_adapter.fabric.estimate import _sweep_paths, estimate_fabric_from_runs
    from astra_adapter.measurements import read_measurements, read_run_paths
    from genie.workloads.loader import load_trace

    topology = load_topology_file(OVERSUB)
    network = FabricNetwork(topology)
    assert network.took(_ring_paths())
    traced = _bench_dir(tmp_path, "traced", _ring_paths())
    est, _ = estimate_fabric_from_runs(load_trace(TRACE), topology, run_dirs=[traced])
    assert any("ECMP as the sweep's connections took it (1 session(s), 8 connection paths" in n for n in est.notes)
    # on the paths taken, the fit differs from the fit on hash draws of the same measurements
    plain = _bench_dir(tmp_path, "plain")
    assert _sweep_paths(network, read_run_paths([plain])) == ((), ())
    ms = read_measurements([plain])
    assert calibrate_fabric(ms, network, paths=(_ring_paths(),)).params != calibrate_fabric(ms, network).params
    # paths read on another topology (a node this one lacks) or another rank placement are not used, and said so
    elsewhere = SessionPaths("sweep", (FlowPath(0, 1, ("h0", "tor9", "h1")),))
    swapped = SessionPaths("sweep", (FlowPath(0, 1, ("h4", "leaf1", "h5")),))
    for i, wrong in enumerate((elsewhere, swapped)):
        paths, notes = _sweep_paths(network, read_run_paths([_bench_dir(tmp_path, f"wrong{i}", wrong)]))
        assert paths == () and "does not match this topology" in notes[0]
    paths, notes = _sweep_paths(network, read_run_paths([traced, plain]))  # one run without paths
    assert paths == () and "some measurement run directories have no paths.json" in notes[0]
    assert _sweep_paths(network, read_run_paths([traced, traced])) == ((_ring_paths(),) * 2, ())


@pytest.mark.parametrize(("text", "field"), [("{", "not JSON"), ('{"sweep": 1}', "sweep: expected a list"),
                                             ('{"sweep": [{"label": "x"}]}', "sweep[0]: not a session's paths")])
def test_a_broken_paths_json_is_one_line_exit_2(tmp_path: Path, text: str, field: str):
    run = _bench_dir(tmp_path, "broken", text=text)
    done = run_genie("estimate", TRACE, "--measurements", run, "--topology", OVERSUB, "--out", tmp_path / "e",
                     cwd=ROOT)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"{run / 'paths.json'}: {field}" in done.stderr and not (tmp_path / "e").exists()
