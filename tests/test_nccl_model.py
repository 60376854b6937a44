"""genie's NCCL model: NCCL's tuner (constants and choices), the cluster from a topology, the fit, "are my
numbers expected?", and `genie calibrate` on real nccl-tests output (benchmarks/data/real-nccl)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from genie.core.collective import Collective
from genie.core.errors import InputError
from genie.measure.nccl_output import parse_nccl_tests
from genie.topology import load_topology_file

from astra_adapter.nccl.calibration_io import load_calibration
from astra_adapter.nccl.expected import check
from astra_adapter.nccl.fit import Observation, fit, predict_all
from astra_adapter.nccl.hardware import Cluster, Interconnect, cluster_from_topology, compute_capability, \
    tuner_system
from astra_adapter.nccl.model import FILL_US, Call, NcclParams, fill_factor, nominal_params, predict
from astra_adapter.nccl.observations import table_observations
from astra_adapter.nccl.tuning import NcclAlgorithm, NcclProtocol, channels_used, choose, enabled, tuner_table
from tests.cli_support import run_genie

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "real-nccl"
DGX = DATA / "nvidia-dgxc-dgxh100-8gpu-1node"
H100 = Cluster("hgx", 1, 8, "H100", 90, Interconnect.NVSWITCH, 370.8, 0.5, 8, 50.0, 1.0)


def _entry(table, algorithm, protocol):
    return next(e for e in table if e.algorithm is algorithm and e.protocol is protocol)


def test_h100_node_gets_nccls_graph_and_table():
    # NCCL 2.23 on 8 x H100 (18 x 20.6 GB/s to the NVSwitch): ring graph 6 x 60 GB/s, split to 12 x 30,
    # 24 communicator channels; NVLS graph 8 x 40 (docs/nccl-model.md has the derivation)
    s = tuner_system(H100)
    assert (s.channels, s.bw_intra_gb_s, s.comm_channels) == (12, 30.0, 24)
    assert (s.nvls_graph_channels, s.nvls_bw_gb_s) == (8, 40.0)
    t = tuner_table(s, Collective.ALL_REDUCE)
    assert _entry(t, NcclAlgorithm.RING, NcclProtocol.SIMPLE).algbw_gb_s == pytest.approx(360 * 8 / 14)
    assert _entry(t, NcclAlgorithm.RING, NcclProtocol.LL128).algbw_gb_s == pytest.approx(331.2 * 8 / 14)
    assert _entry(t, NcclAlgorithm.RING, NcclProtocol.LL).algbw_gb_s == pytest.approx(141 * 8 / 14)
    assert _entry(t, NcclAlgorithm.NVLS, NcclProtocol.SIMPLE).algbw_gb_s == pytest.approx(320 * 5 / 6)
    # ring latency: base 6.6 + 14 steps x 0.6 (NVLink, LL)
    assert _entry(t, NcclAlgorithm.RING, NcclProtocol.LL).latency_us == pytest.approx(6.6 + 14 * 0.6)


def test_the_tuner_picks_by_size_and_cuts_small_calls_channels():
    s = tuner_system(H100)
    small, _ = choose(s, Collective.ALL_REDUCE, 1024)
    large, _ = choose(s, Collective.ALL_REDUCE, 1 << 30)
    assert (small.algorithm, small.protocol, small.channels) == (NcclAlgorithm.RING, NcclProtocol.LL, 1)
    assert (large.algorithm, large.protocol) == (NcclAlgorithm.NVLS, NcclProtocol.SIMPLE)
    # Simple on a ring: 512 threads x 64 bytes per channel before a channel is cut
    assert channels_used(s, NcclAlgorithm.RING, NcclProtocol.SIMPLE, 4 * 512 * 64) == 4
    assert channels_used(s, NcclAlgorithm.RING, NcclProtocol.SIMPLE, 1 << 30) == 24


def test_enable_rules_pat_ll128_nvls():
    multi = tuner_system(H100.scaled(4), ranks_per_node=1)
    assert enabled(multi, Collective.ALL_GATHER, NcclAlgorithm.PAT, NcclProtocol.SIMPLE)
    assert not enabled(tuner_system(H100), Collective.ALL_GATHER, NcclAlgorithm.PAT, NcclProtocol.SIMPLE)
    assert not enabled(multi, Collective.ALL_REDUCE, NcclAlgorithm.PAT, NcclProtocol.SIMPLE)
    pcie = Cluster("box", 1, 4, "RTX 4090", 89, Interconnect.PCIE, 24.0, 1.0, 1, 12.5, 1.0)
    s = tuner_system(pcie)
    assert not s.nvls
    assert not enabled(s, Collective.ALL_REDUCE, NcclAlgorithm.RING, NcclProtocol.LL128)  # no NVLink, sm89
    assert {e.algorithm for e in tuner_table(s, Collective.BROADCAST)} == {NcclAlgorithm.RING}


def test_gpu_names():
    assert compute_capability("NVIDIA H100 80GB HBM3") == 90
    assert compute_capability("A100-SXM4-40GB") == 80
    assert compute_capability("NVIDIA GeForce RTX 4090") == 89
    assert compute_capability("Tesla V100-PCIE-32GB") == 70
    assert compute_capability("NVIDIA B200") == 100
    assert compute_capability("Voodoo 2") is None


def test_cluster_from_a_topology_file():
    c = cluster_from_topology(load_topology_file(ROOT / "topologies" / "dgx-2node.yaml"), gpu="H100",
                              interconnect=Interconnect.NVSWITCH, source="dgx-2node.yaml")
    assert (c.nodes, c.gpus_per_node, c.nics, c.nic_gb_s, c.intra_gb_s) == (2, 8, 8, 50.0, 900.0)
    with pytest.raises(InputError, match="unknown GPU"):
        cluster_from_topology(load_topology_file(ROOT / "topologies" / "dgx-2node.yaml"), gpu="Voodoo",
                              interconnect=Interconnect.NVSWITCH, source="x")


def test_the_fit_recovers_known_parameters_from_three_sizes():
    truth = NcclParams(intra_busbw_gb_s=300.0, nvls_busbw_gb_s=350.0, nic_gb_s=50.0, latency_scale=1.3,
                       launch_us=4.0, ll_efficiency=1.0, ll128_efficiency=1.0, fill_us=30.0)
    sizes = [1 << k for k in range(3, 35)]
    obs = [Observation(Call(Collective.ALL_REDUCE, 8, 1, s), predict(H100, truth, Call(Collective.ALL_REDUCE, 8, 1,
                                                                                        s)).time_us)
           for s in sizes]
    result = fit(H100, obs)
    assert result.rms_error_pct < 1.0
    assert result.params.nvls_busbw_gb_s == pytest.approx(350.0, rel=0.02)
    assert "nic_gb_s" not in result.fitted  # one node: the NICs are not seen and stay nominal
    assert result.params.nic_gb_s == nominal_params(H100).nic_gb_s



def test_three_sizes_read_a_slow_pipeline_fill_as_the_fill_not_as_a_slow_nic():
    # a 2-node sweep whose 32 MiB call is slow because its pipeline fills slowly (4 x the nominal fill), its NICs
    # as rated: three sizes give one large point, and the fill (no rated value) should move, not the NIC
    case = DATA / "abci-anode-a100sxm4-hdr-2-4-8-16node"
    cluster = cluster_from_topology(load_topology_file(case / "topology.yaml"), gpu="A100-SXM4-40GB",
                                    interconnect=Interconnect.NVSWITCH, source="topology.yaml")
    nominal = nominal_params(cluster)
    truth = replace(nominal, fill_us=4 * nominal.fill_us, launch_us=8.0)
    calls = [Call(Collective.ALL_REDUCE, 16, 2, s) for s in (4, 16384, 32 << 20)]
    result = fit(cluster, [Observation(c, predict(cluster, truth, c).time_us) for c in calls])
    # the fill, a time, adds 252 us to the 32 MiB call's 821: the fit reads most of it as the fill (x 2.1) and
    # the rest as the NIC (-15 %), not the other way round
    assert result.params.fill_us > 2 * nominal.fill_us
    assert result.params.nic_gb_s == pytest.approx(nominal.nic_gb_s, rel=0.2)
    assert math.log(result.params.fill_us / nominal.fill_us) > 4 * abs(math.log(result.params.nic_gb_s /
                                                                              nominal.nic_gb_s))

def _dgx_observations():
    table = parse_nccl_tests((DGX / "all_reduce-8r.txt").read_bytes(), source="dgx").tables[0]
    cluster = cluster_from_topology(load_topology_file(DGX / "topology.yaml"), gpu=table.devices[0].gpu,
                                    interconnect=Interconnect.NVSWITCH, source="topology.yaml")
    return cluster, table, table_observations(table, cluster, max_nodes=cluster.nodes)


def test_a_real_sweep_held_out_sizes_are_predicted():
    cluster, _, obs = _dgx_observations()
    obs = sorted(obs, key=lambda o: o.call.size_bytes)
    train = [obs[0], obs[len(obs) // 2], obs[-1]]
    result = fit(cluster, train)
    rest = [o for o in obs if o not in train and o.call.size_bytes >= 64 << 10]
    errors = sorted(abs(r.error_pct) for r in predict_all(cluster, result.params, rest))
    assert errors[len(errors) // 2] < 5.0  # the median held-out point of the DGX H100 sweep (measured: 1.7 %)


def test_more_ranks_than_the_topology_is_refused():
    cluster, table, _ = _dgx_observations()
    small = Cluster(**{**cluster.__dict__, "gpus_per_node": 4})
    with pytest.raises(InputError, match="8 ranks per node, but the topology's nodes have 4 GPUs"):
        table_observations(table, small)


def test_expected_flags_the_anomalous_run_and_not_the_clean_one():
    cluster, _, obs = _dgx_observations()
    assert check(cluster, nominal_params(cluster), obs) == ()
    case = DATA / "nccltests319-h100-ndr-doca-2node-anomalous"
    table = parse_nccl_tests((case / "all_reduce-16r.txt").read_bytes(), source="319").tables[0]
    c2 = cluster_from_topology(load_topology_file(case / "topology.yaml"), gpu="H100",
                               interconnect=Interconnect.NVSWITCH, source="t")
    findings = check(c2, nominal_params(c2), table_observations(table, c2))
    assert len(findings) == 1 and findings[0].ratio < 0.3 and "GPU-NIC path" in findings[0].cause



def test_expected_checks_each_run_of_a_file_of_several():
    """Two 2-node runs of one shape in one file (a healthy-looking one, then one at a quarter of the NICs): each run
    is checked on its own and named by its table's line (the better one hid the worse)."""
    case = DATA / "nccltests290-h100-ndr-1node-2node-anomalous"
    text = b"".join((case / name).read_bytes() for name in ("all_reduce-16r.txt", "all_reduce-16r-ring-ibtuned.txt"))
    tables = parse_nccl_tests(text, source="both.txt").tables
    cluster = cluster_from_topology(load_topology_file(case / "topology.yaml"), gpu="H100",
                                    interconnect=Interconnect.NVSWITCH, source="t")
    findings = check(cluster, nominal_params(cluster), sum((table_observations(t, cluster) for t in tables), ()))
    assert [(f.line, round(f.measured_busbw_gb_s, 1)) for f in findings] == [(t.first_line, bw) for t, bw in
                                                                             zip(tables, (166.2, 102.1))]
    assert findings[1].describe().startswith(f"both.txt: line {tables[1].first_line}: all_reduce on 16 ranks")
    alone = check(cluster, nominal_params(cluster), table_observations(tables[0], cluster))
    assert [f.line for f in alone] == [0] and alone[0].describe().startswith("both.txt: all_reduce")

def test_genie_calibrate_writes_the_calibration_and_predictions(tmp_path):
    out = tmp_path / "cal"
    r = run_genie("calibrate", str(DGX / "all_reduce-8r.txt"), "--topology", str(DGX / "topology.yaml"),
                  "--predict", str(DATA / "nccltests290-h100-8gpu-1node-nvls" / "all_reduce-8r.txt"),
                  "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "NVLS/Simple" in r.stdout and "prediction geomean |error|" in r.stdout
    for name in ("nccl_calibration.json", "calibration_points.csv", "predictions.csv", "measured_vs_model.png",
                 "manifest.json"):
        assert (out / name).is_file(), name
    header = (out / "predictions.csv").read_text().splitlines()[0]
    assert header.startswith("collective,ranks,size_bytes,measured_us,predicted_us,error_pct")
    cluster, params, _ = load_calibration(out)
    assert cluster.gpus_per_node == 8 and params.nvls_busbw_gb_s > 0
    doc = json.loads((out / "nccl_calibration.json").read_text())
    assert doc["points"] == 32 and doc["findings"] == []
    r = run_genie("report", "show", str(out))
    assert r.returncode == 0 and "calibrate run" in r.stdout and "2 plot(s)" in r.stdout, r.stderr
    page = (out / "report.html").read_text()
    assert "NCCL calibration" in page and "nvls_busbw_gb_s" in page and "Predictions of outputs" in page


@pytest.mark.parametrize("text, message", [
    ("hello world\n", "no nccl-tests table"),
    ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw "
     "#wrong\n        1024           256     float     sum      -1    16.94    0.06\n", "column"),
])
def test_genie_calibrate_refuses_bad_output_in_one_line(tmp_path, text, message):
    bad = tmp_path / "bad.txt"
    bad.write_text(text)
    out = tmp_path / "cal"
    r = run_genie("calibrate", str(bad), "--topology", str(DGX / "topology.yaml"), "--out", str(out))
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and str(bad) in r.stderr
    assert not out.exists()


def test_genie_calibrate_warns_of_an_output_whose_check_failed(tmp_path):
    """nccl-tests' `# Out of bounds values : N FAILED` (wrong results): calibrated, with a warning on stdout and in
    the manifest naming the file and the line."""
    text = (DGX / "all_reduce-8r.txt").read_text()
    assert "# Out of bounds values : 0 OK" in text
    failed = tmp_path / "ar.txt"
    failed.write_text(text.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 12 FAILED"))
    line = text.splitlines().index(next(t for t in text.splitlines() if "Out of bounds values" in t)) + 1
    out = tmp_path / "cal"
    r = run_genie("calibrate", str(failed), "--topology", str(DGX / "topology.yaml"), "--out", str(out))
    assert r.returncode == 0, r.stderr
    warning = f"{failed}: line {line}: nccl-tests counted 12 wrong value(s) (its check FAILED)"
    assert f"# warning: {warning}" in r.stdout
    assert any(w.startswith(warning) for w in json.loads((out / "manifest.json").read_text())["warnings"])


def test_genie_calibrate_refuses_a_topology_smaller_than_the_output(tmp_path):
    r = run_genie("calibrate", str(DATA / "nccltests309-h100-ndr-2node-4node" / "all_reduce-32r.txt"), "--topology",
                  str(DATA / "nccltests309-h100-ndr-2node-4node" / "topology.yaml"), "--out", str(tmp_path / "c"))
    assert r.returncode == 2 and "4 nodes" in r.stderr and "topology has 2 node(s)" in r.stderr
    assert not (tmp_path / "c").exists()


def test_the_real_cluster_benchmark_meets_its_met_targets():
    from benchmarks.real_clusters import evaluate

    overall = evaluate()["overall"]
    # measured 2026-12-05 00:10 UTC on the 42-case corpus with session 20's rules (the tree's raised intra-node
    # bandwidth on 2 nodes, Ring/LL's channel cut inside a node, a tree call along the slowest way up the tree NCCL
    # builds, and a call one host thread launches on several GPUs (nccl-tests -g N) timed as max(host floor, GPU
    # time)): sizes < 64 KiB 3.62 % (target 10, met) and scale 9.24 % (target 10, met; 10.69 at the session's
    # start); sizes >= 64 KiB 5.62 % (target 5; 5.83 at the start) and collectives 10.36 % (target 10; 11.97 at
    # the start) miss and are reported in benchmarks/README.md. The met targets are asserted; the missed ones are
    # held at the session's figures (rounded up to the next 0.1 %) so that no change makes them worse unnoticed.
    # 2026-12-05 00:25 UTC (branch s20-coll2: a ring broadcast or reduce back to back pays NCCL's base latency,
    # not the fitted launch_us): collectives 9.58 % (met), sizes >= 64 KiB 5.61, < 64 KiB 3.92, scale 9.24
    # 2026-12-05 00:25 UTC (branch s20-sizes2: the pipeline fill's prior as weak as the launch's): sizes >= 64 KiB
    # 5.34, < 64 KiB 3.98, collectives 9.57, scale 9.37
    # 2026-12-05 02:05 UTC (branch s21-fill: the pipeline fill a time, not a number of bytes): sizes >= 64 KiB
    # 4.93 (target 5, met), < 64 KiB 3.92, collectives 9.80, scale 9.95 - all four targets met and asserted
    # 2026-12-05 02:37 UTC (branch s21-scale on main 588473f, which measured 4.93 / 3.92 / 9.84 / 9.95: a Tree/LL
    # slice waits on the tree's network hops for the GPU's write into the host-memory LL buffer): sizes >= 64 KiB
    # 4.82, < 64 KiB 3.69, collectives 9.44, scale 9.89
    assert overall["sizes_ends_lt_64k_pct"] <= 10.0
    assert overall["scale_pct"] <= 10.0
    assert overall["collectives_pct"] <= 10.0
    assert overall["sizes_ends_ge_64k_pct"] <= 5.0


def test_genie_estimate_with_an_nccl_calibration_explains_each_op(tmp_path):
    cal = tmp_path / "cal"
    case = DATA / "nccltests309-h100-ndr-2node-4node"
    assert run_genie("calibrate", str(case / "all_reduce-16r.txt"), "--topology", str(case / "topology.yaml"),
                     "--out", str(cal)).returncode == 0
    trace = tmp_path / "tp8dp2.json"
    r = run_genie("trace", "gen", "--model", "gpt3-1.3b", "--layers", "1", "--tp", "8", "--dp", "2", "--device",
                  "h100", "--out", str(trace), "--to", "json")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "est"
    r = run_genie("estimate", str(trace), "--topology", str(case / "topology.yaml"), "--calibration", str(cal),
                  "--explain", "--out", str(out))
    assert r.returncode == 0, r.stderr
    rows = (out / "nccl_choices.csv").read_text().splitlines()
    assert rows[0] == "collective,ranks,nodes,size_bytes,ops,nccl_choice,time_us"
    # TP8 inside a node (NVLink), DP2 across the two nodes (one rank per node)
    assert any(",8,1," in row for row in rows[1:]) and any(",2,2," in row for row in rows[1:])
    assert "NCCL's algorithm/protocol x channels" in r.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["params"]["mode"] == "nccl"
    # the same calibration on 16 nodes of the same kind: a what-if at scale, same GPUs per node
    r = run_genie("estimate", str(trace), "--topology", str(ROOT / "topologies" / "dgx-16node.yaml"),
                  "--calibration", str(cal), "--out", str(tmp_path / "est16"))
    assert r.returncode == 0, r.stderr
    assert "intra-node bandwidth scaled" in r.stdout  # dgx-16node states 900 GB/s per GPU, the cluster 370.8
    # a topology whose nodes hold another GPU count is refused
    r = run_genie("estimate", str(trace), "--topology", str(DATA / "dudeperf3ct-h100x4-nvlink-lambda-1node" /
                                                            "topology.yaml"), "--calibration", str(cal))
    assert r.returncode == 2 and "nodes with 8 GPUs" in r.stderr


def test_a_one_gpu_a_node_group_runs_on_its_own_nic():
    two = H100.scaled(2)
    assert (two.nics_reached(1), two.nics_reached(4), two.nics_reached(8)) == (1, 4, 8)
    params = nominal_params(two)
    size = 1 << 30
    dp = predict(two, params, Call(Collective.ALL_REDUCE, 2, 2, size))
    # one 50 GB/s NIC per GPU: a 2-rank ring moves the buffer once each way, algbw at most 50 GB/s
    assert dp.time_us >= size / (50.0 * 1e3)
    full = predict(two, params, Call(Collective.ALL_REDUCE, 16, 2, size))
    assert dp.time_us > 3 * full.time_us  # 8 ranks a node reach 8 NICs: far more than the 2-rank group's one


def test_a_calibration_file_is_read_back_and_bad_ones_refused(tmp_path):
    from astra_adapter.nccl.calibration_io import calibration_json, parse_calibration

    cluster, _, obs = _dgx_observations()
    result = fit(cluster, obs[:6])
    text = calibration_json(result, (), ("x.txt",))
    back_cluster, back_params = parse_calibration(text.encode(), source="cal.json")
    assert back_cluster == cluster and back_params == result.params
    doc = json.loads(text)
    doc["params"]["nic_gb_s"] = -1
    with pytest.raises(InputError, match="params.nic_gb_s"):
        parse_calibration(json.dumps(doc).encode(), source="cal.json")
    # written before the fill became a time: its fitted fill's ratio to the prior of then (1 MiB a channel)
    old = json.loads(text)
    del old["params"]["fill_us"]
    old["params"]["fill_bytes_per_channel"] = 2 * (1 << 20)
    assert parse_calibration(json.dumps(old).encode(), source="cal.json")[1].fill_us == pytest.approx(2 * FILL_US)
    with pytest.raises(InputError, match="not a genie NCCL calibration"):
        parse_calibration(b'{"format": "genie-calibration"}', source="cal.json")
    with pytest.raises(InputError, match="not JSON"):
        parse_calibration(b"[" * 100000, source="cal.json")


def test_a_plateau_at_a_whole_number_of_nics_is_named():
    from astra_adapter.nccl.expected import _cause

    two = H100.scaled(2)
    nominal = nominal_params(two)
    o = Observation(Call(Collective.ALL_REDUCE, 16, 2, 1 << 30), 1.0)
    assert "about 2 of the node's 8 NICs" in _cause(two, nominal, o, 100.0, 400.0, NcclAlgorithm.RING)
    assert "GPU-NIC path" in _cause(two, nominal, o, 20.0, 400.0, NcclAlgorithm.RING)
    one = H100
    o1 = Observation(Call(Collective.ALL_REDUCE, 8, 1, 1 << 30), 1.0)
    assert "traffic on PCIe" in _cause(one, nominal, o1, 20.0, 400.0, NcclAlgorithm.NVLS)
    assert "no NVLS" in _cause(one, nominal, o1, 300.0, 480.0, NcclAlgorithm.NVLS)


@pytest.mark.parametrize("collective", [Collective.ALL_TO_ALL, Collective.SEND_RECV])
def test_a_send_receive_fills_through_one_hop_and_a_ring_through_the_node(collective):
    # fill F: the first F x hops / 8 microseconds of transfer move at half the rate; a send/receive's bytes go
    # sender -> receiver on their own connection (1 hop), a ring's through the node's 8 GPUs (8 hops)
    base = NcclParams(intra_busbw_gb_s=300.0, nvls_busbw_gb_s=350.0, nic_gb_s=50.0, launch_us=4.0)
    fill = replace(base, fill_us=40.0)
    size = 1 << 30  # a transfer longer than any fill here: the fill adds its own time once
    call = Call(collective, 8, 1, size)
    no_fill_us, with_fill_us = predict(H100, base, call).time_us, predict(H100, fill, call).time_us
    assert with_fill_us - no_fill_us == pytest.approx(40.0 * 1 / 8, rel=1e-6)
    # a ring of the same 8 GPUs (Simple at 1 GiB) charges 8 hops: 8 x the p2p's fill time
    ring = Call(Collective.ALL_GATHER, 8, 1, size)
    assert predict(H100, base, ring).choice.protocol is NcclProtocol.SIMPLE
    assert predict(H100, fill, ring).time_us - predict(H100, base, ring).time_us == pytest.approx(40.0, rel=1e-6)


def test_the_fill_is_a_time_the_same_on_a_slow_link_and_a_fast_one():
    # the pipeline fills in a fixed time (a FIFO's steps refill at the pace of their round trip), not a fixed
    # number of bytes: a large call pays the same fill whatever its link's rate, and a call shorter than the fill
    # moves all its bytes at half the rate
    fast = NcclParams(intra_busbw_gb_s=300.0, nvls_busbw_gb_s=350.0, nic_gb_s=50.0, launch_us=4.0, fill_us=63.0)
    slow = replace(fast, intra_busbw_gb_s=30.0)
    big = Call(Collective.ALL_GATHER, 8, 1, 1 << 30)
    for params in (fast, slow):
        no_fill = predict(H100, replace(params, fill_us=0.0), big).time_us
        assert predict(H100, params, big).time_us - no_fill == pytest.approx(63.0, rel=1e-6)
    assert fill_factor(10.0, big, fast) == pytest.approx(2.0)  # 10 us of transfer: all of it at half the rate
    assert fill_factor(630.0, big, fast) == pytest.approx(1.1)
    four = Call(Collective.ALL_GATHER, 4, 1, 1 << 30)  # a ring through 4 GPUs of a node: half the fill
    assert fill_factor(630.0, four, fast) == pytest.approx(1.05)


def test_genie_beats_astra_sims_validated_h100_config_on_every_single_node_h100_sweep():
    from benchmarks.real_clusters import H100_SWEEPS, beside_astra

    rows = beside_astra()
    assert len(rows) == len(H100_SWEEPS) == 5
    for row in rows:
        # ASTRA-sim's own published figure for its validated config is 9.69 % (8 GPUs) to 20.63 % (2 GPUs); on the
        # same real sweeps its analytical backends, run through genie's drop-in, read 13-79 %
        assert row["genie_3_sizes_pct"] < 9.69, row
        assert row["genie_3_sizes_pct"] < min(row["astra_unaware_pct"], row["astra_aware_pct"]), row


def test_ring_ll_inside_a_node_takes_its_kept_channels_share_and_fills_at_the_full_rate():
    from astra_adapter.nccl.model import TIMING_VERSION, cut_with_fill, fitted_system
    from astra_adapter.nccl.tuning import call_latency_us, table_entry

    params = nominal_params(H100)
    calls = [Call(Collective.ALL_REDUCE, 8, 1, size) for size in (32 << 10, 64 << 10)]
    one, two = (predict(H100, params, c) for c in calls)
    # NCCL keeps a Ring/LL channel per 512 threads x 8 B x 8 ranks = 32 KiB: 1 and 2 of the node's 24 channels
    assert (one.choice.protocol, one.choice.channels, two.choice.channels) == (NcclProtocol.LL, 1, 2)
    system = fitted_system(tuner_system(H100, nodes=1, ranks_per_node=8), H100, params)
    assert system.version == TIMING_VERSION and system.comm_channels == 24
    entry = table_entry(system, Collective.ALL_REDUCE, NcclAlgorithm.RING, NcclProtocol.LL)
    us_per_byte = 1 / (1000.0 * entry.algbw_gb_s)
    fixed = params.launch_us + call_latency_us(system, Collective.ALL_REDUCE, entry, 32 << 10)
    # each kept channel carries the same bytes (32 KiB at 1/24 of LL's rate), the fill the call's own at the full
    assert one.time_us == pytest.approx(fixed + (32 << 10) * us_per_byte * (24 + 1))
    assert two.time_us - one.time_us == pytest.approx((32 << 10) * us_per_byte)
    # between nodes (the network proxy forwards LL's steps) and for Tree/LL the cut is not applied; Simple takes it
    far = Call(Collective.ALL_REDUCE, 16, 2, 32 << 10)
    ring_ll = table_entry(system, Collective.ALL_REDUCE, NcclAlgorithm.RING, NcclProtocol.LL)
    tree_ll = table_entry(system, Collective.ALL_REDUCE, NcclAlgorithm.TREE, NcclProtocol.LL)
    simple = table_entry(system, Collective.ALL_REDUCE, NcclAlgorithm.RING, NcclProtocol.SIMPLE)
    assert cut_with_fill(1.0, 0.5, ring_ll, far, params) == cut_with_fill(1.0, 1.0, ring_ll, far, params)
    assert cut_with_fill(1.0, 0.5, tree_ll, calls[0], params) == cut_with_fill(1.0, 1.0, tree_ll, calls[0], params)
    assert cut_with_fill(1.0, 0.5, ring_ll, calls[0], params) > cut_with_fill(1.0, 1.0, ring_ll, calls[0], params)
    assert cut_with_fill(1.0, 0.5, simple, far, params) == pytest.approx(2 * cut_with_fill(1.0, 1.0, simple, far,
                                                                                          params))
