"""Fault injection without root: the reader and the compact spec, validation against a testbed and a run, the
injector against a fake network, stragglers' compute factor, and the CLI's bad-input path (exit code 2, one
line, nothing started)."""

from __future__ import annotations

import threading
import time

from pathlib import Path

import pytest

from cli_support import run_genie
from genie.core.errors import InputError
from genie.core.protocol import Straggler
from genie.core.topology import LinkShape
from genie.engine.rank import compute_factor
from genie.faults.injector import FaultInjector, FaultOutcome
from genie.faults.model import FaultKind, FaultPlan, ShapeChange, Trigger
from genie.faults.reader import parse_fault_spec, parse_fault_specs, read_faults_yaml
from genie.faults.record import faults_csv, faults_json
from genie.faults.validation import RunBounds, plan_faults
from genie.measure.metrics import iteration_times_ns
from genie.testbed.plan import build_plan
from genie.topology import star

BENCH = RunBounds(timed_ops=20, max_duration_s=25 * 60.0, ranks=4, has_compute=False, command="bench")
REPLAY = RunBounds(timed_ops=3, max_duration_s=100.0, ranks=4, has_compute=True, command="replay")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def info():
    return build_plan(star(4, shape=LinkShape(rate_bps=10**9)), "t1", netem_available=False).info


# ---- reading -------------------------------------------------------------------------------------------------
def test_yaml_and_spec_read_the_same_fault():
    (from_yaml,) = read_faults_yaml("faults:\n  - {kind: degrade, link: h3-s0, rate: 100mbit, at_op: 10}\n",
                                    source="f.yaml")
    from_spec = parse_fault_spec("degrade h3-s0 rate=100mbit at=op10")
    assert from_yaml.kind is FaultKind.DEGRADE and from_yaml.change == ShapeChange(rate_bps=100_000_000)
    assert from_yaml.trigger == from_spec.trigger == Trigger(at_op=10)
    assert (from_yaml.link, from_yaml.change) == (from_spec.link, from_spec.change)
    assert from_spec.spec() == "degrade h3-s0 rate=100mbit at=op10"


@pytest.mark.parametrize("spec, kind, check", [
    ("flap h1-s0 for=200ms at=2s", FaultKind.FLAP, lambda f: f.duration_s == 0.2 and f.trigger.at_s == 2.0),
    ("down h1:s0 at=0s", FaultKind.DOWN, lambda f: f.link == "h1:s0" and f.trigger.at_s == 0.0),
    ("straggler rank=2 factor=3 at=op1", FaultKind.STRAGGLER, lambda f: (f.rank, f.factor) == (2, 3.0)),
    ("straggler 2 factor=1.5 at_op=0", FaultKind.STRAGGLER, lambda f: f.rank == 2 and f.trigger.at_op == 0),
    ("cross_traffic h0 h1 at=1s for=2s", FaultKind.CROSS_TRAFFIC, lambda f: (f.src, f.dst) == ("h0", "h1")),
    ("cross-traffic h0->h1 at=1s", FaultKind.CROSS_TRAFFIC, lambda f: (f.src, f.dst) == ("h0", "h1")),
    ("degrade h3-s0 delay=2ms jitter=1ms loss=1% at=500ms", FaultKind.DEGRADE,
     lambda f: f.change == ShapeChange(delay_us=2000.0, jitter_us=1000.0, loss_pct=1.0)),
])
def test_compact_specs(spec, kind, check):
    fault = parse_fault_spec(spec)
    assert fault.kind is kind and check(fault)


@pytest.mark.parametrize("spec, path, words", [
    ("", "fault", "empty"),
    ("degrad h3-s0 rate=1gbit at=1s", "fault.kind", "did you mean 'degrade'"),
    ("degrade h3-s0 rat=1gbit at=1s", "fault.rat", "did you mean 'rate'"),
    ("degrade h3-s0 at=1s", "fault.rate", "at least one of"),
    ("degrade h3-s0 rate=100 at=1s", "fault.rate", "unit"),
    ("degrade h3-s0 delay=-1ms at=1s", "fault.delay", ">= 0"),
    ("degrade h3-s0 loss=100 at=1s", "fault.loss", "[0, 100)"),
    ("degrade h3-s0 loss=-1 at=1s", "fault.loss", "[0, 100)"),
    ("degrade h3-s0 rate=1gbit", "fault.at", "missing trigger"),
    ("degrade h3-s0 rate=1gbit at=1s at_op=3", "fault.at_op", "not both"),
    ("degrade h3-s0 rate=1gbit at=-1s", "fault.at", ">= 0"),
    ("degrade h3-s0 rate=1gbit at=opx", "fault.at_op", "op index"),
    ("flap h1-s0 at=1s", "fault.duration", "missing field `duration`"),
    ("flap h1-s0 for=0s at=1s", "fault.duration", "> 0"),
    ("straggler rank=1 at=op1", "fault.factor", "missing field `factor`"),
    ("straggler rank=1 factor=0 at=op1", "fault.factor", "factor in (0"),
    ("straggler rank=-1 factor=2 at=op1", "fault.rank", "rank >= 0"),
    ("down h1-s0 extra at=1s", "fault", "unexpected 'extra'"),
])
def test_bad_specs_name_the_field(spec, path, words):
    with pytest.raises(InputError) as err:
        parse_fault_spec(spec)
    assert err.value.path == path, str(err.value)
    assert words in str(err.value)


def test_yaml_errors_name_file_and_index():
    with pytest.raises(InputError) as err:
        read_faults_yaml("faults:\n  - {kind: down, link: h0-s0, at: 1s}\n  - {kind: flap, link: h0-s0, at: 1s}\n",
                         source="f.yaml")
    assert str(err.value).startswith("f.yaml: faults[1].duration:")
    with pytest.raises(InputError, match="did you mean 'faults'"):
        read_faults_yaml("fautls: []\n", source="f.yaml")
    with pytest.raises(InputError, match="duplicate key"):
        read_faults_yaml("faults:\n  - {kind: down, kind: flap}\n", source="f.yaml")
    assert [f.path for f in parse_fault_specs(["down h0-s0 at=1s", "down h1-s0 at=2s"])] == ["fault[0]",
                                                                                            "fault[1]"]


# ---- validation ------------------------------------------------------------------------------------------------
def _plan(specs, info, bounds=BENCH, **kw):
    return plan_faults(parse_fault_specs(specs), info, bounds, **kw)


def test_links_resolve_with_direction(info):
    plan = _plan(["degrade h3-s0 rate=100mbit at=op1", "degrade s0->h2 rate=1mbit at=1s", "down h1:s0 at=op2"], info)
    both, one, down = plan.faults
    assert both.link.link_index == 3 and set(both.link.ends) == {("h3", "s0"), ("s0", "h3")}
    assert one.link.ends == (("s0", "h2"),) and one.link.name == "s0->h2"
    assert down.link.link_index == 1
    assert plan.fault_points() == (1, 2) and [f.index for f in plan.timed()] == [1]


@pytest.mark.parametrize("spec, bounds, path, words", [
    ("degrade h9-s0 rate=1mbit at=1s", BENCH, "fault[0].link", "no link 'h9-s0'"),
    ("degrade h3-s1 rate=1mbit at=1s", BENCH, "fault[0].link", "did you mean 'h3-s0'"),
    ("down h3->s0 at=1s", BENCH, "fault[0].link", "not A->B"),
    ("degrade h3-s0 rate=1mbit at=op20", BENCH, "fault[0].at_op", "past the end of the run"),
    ("degrade h3-s0 rate=1mbit at=2000s", BENCH, "fault[0].at", "past the end of the run"),
    ("degrade h3-s0 jitter=1ms at=1s", BENCH, "fault[0].jitter", "exceeds delay"),
    ("straggler rank=1 factor=2 at=op1", BENCH, "fault[0].kind", "use it with genie replay"),
    ("straggler rank=4 factor=2 at=op1", REPLAY, "fault[0].rank", "no rank 4"),
    ("cross_traffic h0 h7 at=1s", BENCH, "fault[0].dst", "no host 'h7'"),
    ("cross_traffic h0 h0 at=1s", BENCH, "fault[0].dst", "same host"),
])
def test_validation_names_the_field(info, spec, bounds, path, words):
    with pytest.raises(InputError) as err:
        _plan([spec], info, bounds)
    assert err.value.path == path, str(err.value)
    assert words in str(err.value)


def test_delay_changes_need_netem_and_links_need_a_testbed(info):
    with pytest.raises(InputError, match=r"needs netem \(h3-s0\)") as err:
        _plan(["degrade h3-s0 delay=1ms at=1s"], info, delay_check=lambda link: f"needs netem ({link.name})")
    assert err.value.path == "fault[0].delay"
    assert _plan(["degrade h3-s0 delay=1ms at=1s"], info).faults[0].fault.change.delay_us == 1000.0
    with pytest.raises(InputError, match="needs a testbed"):
        _plan(["down h0-s0 at=1s"], None)
    assert _plan(["straggler rank=0 factor=2 at=1s"], None, REPLAY).stragglers()


# ---- the injector -------------------------------------------------------------------------------------------
class FakeNetwork:
    def __init__(self):
        self.calls: list[tuple] = []
        self.fail_on: str | None = None

    def _log(self, *call):
        if self.fail_on == call[0]:
            raise OSError("fake failure")
        self.calls.append(call)

    def degrade(self, target, fault):
        self._log("degrade", target.name, fault.fault.change.rate_bps)

    def restore_shape(self, target):
        self._log("restore", target.name)

    def set_link_up(self, target, up):
        self._log("up" if up else "down", target.name)

    def start_cross_traffic(self, src, dst):
        self._log("start", src, dst)
        return (src, dst)

    def stop_cross_traffic(self, handle):
        self._log("stop", *handle)


def test_injector_applies_at_op_and_restores_at_close(info):
    plan = _plan(["degrade h3-s0 rate=100mbit at=op1", "down h1-s0 at=op2", "straggler rank=1 factor=2 at=op1"],
                 info, REPLAY)
    net = FakeNetwork()
    injector = FaultInjector(plan, net)
    injector.timed_start(time.monotonic_ns())
    injector.fault_point(1)
    assert net.calls == [("degrade", "h3-s0", 100_000_000)]
    records = injector.close()
    assert net.calls[-1] == ("restore", "h3-s0")
    assert [r.outcome for r in records] == [FaultOutcome.APPLIED, FaultOutcome.NOT_REACHED, FaultOutcome.APPLIED]
    assert records[0].applied_at_s is not None and records[0].restored_at_s >= records[0].applied_at_s
    assert records[1].applied_at_s is None and records[2].restored_at_s is None
    text = faults_csv(records)
    assert text.splitlines()[0] == "index,kind,target,params,trigger,applied_at_s,restored_at_s,outcome,detail"
    assert "1,down,h1-s0,,op 2,,,not_reached," in text
    assert '"spec": "down h1-s0 at=op2"' in faults_json(records, plan)


def test_injector_time_triggers_and_durations(info):
    plan = _plan(["flap h1-s0 for=50ms at=20ms", "cross_traffic h0 h2 at=0s for=30ms",
                  "degrade h2-s0 rate=1mbit at=10s"], info)
    net = FakeNetwork()
    injector = FaultInjector(plan, net)
    injector.timed_start(time.monotonic_ns())
    deadline = time.monotonic() + 5
    while len(net.calls) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    records = injector.close()
    assert net.calls == [("start", "h0", "h2"), ("down", "h1-s0"), ("stop", "h0", "h2"), ("up", "h1-s0")]
    flap, cross, late = records
    assert 0.015 < flap.applied_at_s < 1.0 and flap.restored_at_s - flap.applied_at_s >= 0.045
    assert cross.outcome is FaultOutcome.APPLIED and late.outcome is FaultOutcome.NOT_REACHED
    assert not injector.failures()


def test_injector_records_failures_and_never_blocks(info):
    plan = _plan(["down h1-s0 at=op0"], info)
    net = FakeNetwork()
    net.fail_on = "down"
    injector = FaultInjector(plan, net)
    injector.fault_point(0)
    (record,) = injector.close()
    assert record.outcome is FaultOutcome.FAILED and "fake failure" in record.detail
    assert injector.failures() and threading.active_count() < 50


def test_inject_faults_writes_records_and_fails_the_run_when_a_fault_failed(info, tmp_path):
    from genie.core.errors import RunFailure
    from genie.faults.service import inject_faults
    from genie.report.manifest import RunRecorder

    plan = _plan(["down h1-s0 at=op0"], info)
    net = FakeNetwork()
    net.fail_on = "down"
    with pytest.raises(RunFailure, match="could not be applied"):
        with RunRecorder("bench", out=tmp_path / "run") as run:
            with inject_faults(run, plan, info, network=net) as injector:
                injector.fault_point(0)
    assert "failed" in (tmp_path / "run" / "faults.csv").read_text()
    with RunRecorder("bench", out=tmp_path / "run2") as run:
        with inject_faults(run, FaultPlan(), info, network=net) as injector:
            assert injector is None
    assert not (tmp_path / "run2" / "faults.csv").exists()


# ---- engine pieces ---------------------------------------------------------------------------------------------
def test_straggler_compute_factor():
    assert compute_factor([Straggler(factor=3.0, at_op=1, at_s=None)], 0, 0) is None
    assert compute_factor([Straggler(factor=3.0, at_op=1, at_s=None)], 1, 0)(123) == 3.0
    timed = compute_factor([Straggler(factor=2.0, at_op=None, at_s=1.0)], 0, 1_000)
    assert timed(1_000) == 1.0 and timed(1_000 + 10**9) == 2.0


def test_iteration_after_a_fault_point_is_timed_from_its_start():
    per_rank = {0: [(0, 10), (10, 20), (100, 110)], 1: [(0, 11), (11, 21), (105, 112)]}
    assert iteration_times_ns(per_rank) == [11, 10, 91]
    assert iteration_times_ns(per_rank, restarts=[2]) == [11, 10, 7]


# ---- the CLI: bad input → one line, exit code 2, nothing started ------------------------------------------------
@pytest.mark.parametrize("args, words", [
    (["bench", "--loopback", "--fault", "degrade h0-s0 rate=1mbit loss=150 at=1s"], "--fault[0].loss"),
    (["bench", "--loopback", "--fault", "down h0-s0 at=1s"], "needs a testbed"),
    (["bench", "--loopback", "-n", "2", "-w", "0", "-b", "1K", "-e", "1K", "--fault",
      "straggler rank=0 factor=2 at=op0"], "use it with genie replay"),
    (["bench", "--loopback", "--faults", "missing.yaml"], "missing.yaml: cannot read"),
])
def test_cli_bad_faults_exit_2_with_one_line(tmp_path, args, words):
    proc = run_genie(*args, "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], proc.stderr
    assert not (tmp_path / "run").exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("typed, args", [
    ("--fault", ["--fault", "straggler rank=0 factor=2 at=0s"]),
    ("--faults", ["--faults", "faults.yaml"]),
])
@pytest.mark.parametrize("target, words", [
    (["--loopback", "--launcher", "mpi"], "faults are injected on genie's own testbeds: use --launcher local"),
    (["--topology", str(ROOT / "topologies" / "star-4.yaml"), "--time-dilation", "auto", "-b", "1K", "-e", "4K"],
     "a sweep under auto runs each size at its own time dilation"),
])
def test_cli_fault_errors_name_the_flag_typed(tmp_path, typed, args, target, words):
    """A refusal of the faults names the flag the user gave them with: --fault SPEC or --faults FILE."""
    (tmp_path / "faults.yaml").write_text("faults:\n  - {kind: straggler, rank: 0, factor: 2, at: 0s}\n")
    proc = run_genie("bench", *target, *args, "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith(f"genie: error: {typed}: {words}"), proc.stderr


def test_cli_replay_rejects_an_op_past_the_end(tmp_path):
    trace = tmp_path / "t.yaml"
    trace.write_text("format: genie-trace\nversion: 1\nname: small\nranks: 2\nprogram:\n"
                     "  - {id: 0, name: fwd, type: compute, duration: 1ms}\n"
                     "  - {id: 1, name: ar, type: all_reduce, size: 4KiB, deps: [0]}\n")
    faults = tmp_path / "faults.yaml"
    faults.write_text("faults:\n  - {kind: straggler, rank: 1, factor: 2, at_op: 2}\n")
    proc = run_genie("replay", str(trace), "--loopback", "-n", "2", "--faults", str(faults), "--out",
                     str(tmp_path / "run"), cwd=tmp_path)
    assert proc.returncode == 2 and f"{faults}: faults[0].at_op: op 2 is past the end" in proc.stderr
    assert not (tmp_path / "run").exists()


def test_cli_replay_straggler_on_loopback(tmp_path):
    trace = tmp_path / "t.yaml"
    trace.write_text("format: genie-trace\nversion: 1\nname: small\nranks: 2\nprogram:\n"
                     "  - {id: 0, name: fwd, type: compute, duration: 20ms}\n"
                     "  - {id: 1, name: ar, type: all_reduce, size: 4KiB, deps: [0]}\n")
    proc = run_genie("replay", str(trace), "--loopback", "-n", "2", "--fault", "straggler rank=1 factor=3 at=op1",
                     "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split(",") for line in (tmp_path / "run" / "ops.csv").read_text().splitlines()[1:]]
    fwd = {(int(r[0]), int(r[1])): (int(r[9]) - int(r[8])) / 1e6 for r in rows if r[3] == "fwd"}
    assert fwd[(1, 1)] > 2.0 * fwd[(0, 1)] and fwd[(1, 1)] >= 55.0  # 3 x 20 ms, measured
    assert fwd[(1, 0)] < 40.0  # rank 0 is not slowed
    assert "applied" in (tmp_path / "run" / "faults.csv").read_text()


# ---- the userspace emulator's live stage changes ---------------------------------------------------------------
def test_delay_line_overrides_change_stages_live_and_revert():
    from genie.linkemu.config import EmulatorConfig, QueueSpec, StageSpec
    from genie.linkemu.emulator import overrides_path_for
    from genie.linkemu.line import DelayLine, DropReason

    ms = 1_000_000
    line = DelayLine(EmulatorConfig("genie-t-h1", (StageSpec("links[0] h0>h1", delay_ns=ms),),
                                    (QueueSpec(0, "eth0", (0,)),)))
    assert line.admit(0, 0, 0, 1500) == ms
    line.apply_overrides({"links[0] h0>h1": {"delay_ns": 10 * ms, "loss_pct": 99.9999}, "links[9] x>y": {}})
    assert line.admit(0, 1, 0, 1500) == DropReason.LOSS
    line.apply_overrides({"links[0] h0>h1": {"delay_ns": 10 * ms}})
    assert line.admit(0, 2, 0, 1500) == 10 * ms
    assert [r.packet_id for r in line.due(ms)] == [0]  # held packets keep their release times
    line.apply_overrides({})
    assert line.admit(0, 3, 0, 1500) == ms and line.stages[0].spec.loss_pct == 0.0
    from pathlib import Path

    assert overrides_path_for(Path("/x/genie-t-h1.stats.json")) == Path("/x/genie-t-h1.overrides.json")


def test_cli_topology_faults_are_checked_before_the_testbed_is_built(tmp_path):
    """An unknown link with --topology fails before `up` (which would need root): one line, exit code 2."""
    topo = tmp_path / "star.yaml"
    topo.write_text("name: s\nhosts:\n  - {prefix: h, count: 2}\nswitches:\n  - {name: s0, kind: bridge}\n"
                    "links:\n  - {endpoints: [h0, s0]}\n  - {endpoints: [h1, s0]}\n")
    proc = run_genie("bench", "--topology", str(topo), "--fault", "down h2-s0 at=1s", "--out",
                     str(tmp_path / "run"), cwd=tmp_path)
    assert proc.returncode == 2 and "--fault[0].link: no link 'h2-s0' in testbed s (did you mean 'h1-s0'?) (links: h0-s0, h1-s0)" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_injector_times_on_a_dilated_testbed_are_the_stated_fabrics(info):
    """At N = 4 a fault 'at=10ms for=20ms' happens 40 ms into the run for 80 ms of real time, and its record
    says 10 ms and 30 ms (emulated), as every other time of the run."""
    now = [0]
    plan = _plan(["flap h1-s0 for=20ms at=10ms"], info)
    net = FakeNetwork()
    injector = FaultInjector(plan, net, clock_ns=lambda: now[0], dilation=4.0)
    injector.timed_start(0)
    due = [entry[0] for entry in injector._queue]
    assert due == [40_000_000]
    now[0] = 40_000_000
    injector._queue.clear()
    injector._apply(plan.faults[0])
    assert injector._queue[0][0] == 40_000_000 + 80_000_000
    now[0] = 120_000_000
    injector._restore(0)
    (record,) = injector.close()
    assert (record.applied_at_s, record.restored_at_s) == (0.01, 0.03)
