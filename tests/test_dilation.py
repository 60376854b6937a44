"""Time dilation without root: the factor and its conversions, the dilated plan (rates / N, delays x N, the
stated topology recorded), what can and cannot hold, auto's choice from measured host figures, and a dilated
run's reported times (emulated) against what the ranks really did (real)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from genie.core.dilation import (NO_DILATION, DilationChoice, DilationMode, HostLimit, TimeDilation,
                                 fixed_dilation)
from genie.core.errors import InputError
from genie.core.protocol import Barrier, CaseResult, Straggler
from genie.core.program import Lane, ProgramNode, RankProgram
from genie.core.testbed import LinkModel
from genie.core.topology import LinkShape
from genie.services.dilation import (emulated_barrier, emulated_result, loopback_dilation, real_program,
                                     real_stragglers, real_timeout_s, running_dilation)
from genie.testbed.dilation_rules import (HostFigures, check_dilation_holds, choose_dilation, demanded_bps,
                                          max_factor, nice_factor, smallest_step_us)
from genie.testbed.plan import build_plan
from genie.testbed.shaping import default_link_model
from genie.testbed.state import info_from_dict, info_to_dict
from genie.testbed.steps import AddHtb, AddNetem, QdiscParent, Shaper, StartEmulator
from genie.testbed.verify import Metric, Status, VerifyRow, emulated_row
from genie.topology import load_topology_file, star

from cli_support import run_genie

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"
GBIT = 10**9


# ---- the factor ------------------------------------------------------------------------------------------
def test_choice_parses_a_factor_or_auto_and_refuses_the_rest() -> None:
    assert DilationChoice.parse(None).is_none
    assert DilationChoice.parse("auto") == DilationChoice(DilationMode.AUTO)
    assert DilationChoice.parse("AUTO").mode is DilationMode.AUTO
    assert DilationChoice.parse("2.5") == DilationChoice(DilationMode.FIXED, 2.5)
    for bad in ("0.5", "0", "-3", "nan", "inf", "1e9", "ten", ""):
        with pytest.raises(InputError) as err:
            DilationChoice.parse(bad)
        assert err.value.path == "time_dilation"


def test_conversions_between_real_and_emulated_time() -> None:
    d = TimeDilation(100.0)
    assert d.real_ns(1_000) == 100_000 and d.emulated_ns(100_000) == 1_000
    assert d.real_s(0.5) == 50.0 and d.emulated_s(50.0) == 0.5
    assert d.emulated_rate(1e8) == 1e10
    assert not NO_DILATION.active and fixed_dilation(1.0) is NO_DILATION
    assert TimeDilation.from_dict(d.to_dict()) == d
    limit = HostLimit("software", 120.0, "us per step", 2400.0, "why")
    assert TimeDilation.from_dict(TimeDilation(2500, "auto", (limit,)).to_dict()).limits == (limit,)


def test_a_dilated_shape_is_n_times_slower_and_longer() -> None:
    shape = LinkShape(rate_bps=400 * GBIT, delay_us=1.0, jitter_us=0.5, loss_pct=0.1, queue_packets=50)
    real = TimeDilation(1000.0).real_shape(shape)
    assert real.rate_bps == 400 * 10**6 and real.delay_us == 1000.0 and real.jitter_us == 500.0
    assert (real.loss_pct, real.queue_packets, real.mtu_bytes) == (0.1, 50, 1500)
    assert TimeDilation(7.0).real_shape(LinkShape()) == LinkShape()  # unshaped stays unshaped


# ---- the plan ----------------------------------------------------------------------------------------------
def test_the_plan_shapes_at_rate_over_n_and_records_the_stated_topology() -> None:
    topology = star(4, shape=LinkShape(rate_bps=100 * GBIT, delay_us=1.0))
    dilation = TimeDilation(500.0, "asked for")
    plan = build_plan(topology, "dil", netem_available=True, dilation=dilation, links=LinkModel.WIRE)
    htbs = [s for s in plan.steps if isinstance(s, AddHtb)]
    netems = [s for s in plan.steps if isinstance(s, AddNetem)]
    assert htbs and all(s.rate_bps == 200 * 10**6 for s in htbs)
    assert netems and all(s.delay_us == 500.0 for s in netems)  # the data's netem and the ACK lane's
    assert all(s.rate_bps == 200 * 10**6 for s in netems if s.parent is QdiscParent.HTB_CLASS)
    assert plan.info.topology == topology  # what runs on it report against
    assert plan.info.dilation == dilation and plan.info.links is LinkModel.WIRE
    assert info_from_dict(info_to_dict(plan.info)) == plan.info  # the state record keeps both


def test_the_userspace_plan_dilates_the_emulator_stages() -> None:
    topology = star(2, shape=LinkShape(rate_bps=100 * GBIT, delay_us=2.0))
    plan = build_plan(topology, "dil", netem_available=False, shaper=Shaper.USERSPACE,
                      dilation=TimeDilation(100.0), links=LinkModel.WIRE)
    stages = [stage for s in plan.steps if isinstance(s, StartEmulator) for stage in s.config.stages]
    assert stages and all(stage.delay_ns == 200_000 and stage.rate_bps == GBIT for stage in stages)
    bucket = build_plan(topology, "dil", netem_available=False, shaper=Shaper.USERSPACE,
                        dilation=TimeDilation(100.0), links=LinkModel.BUCKET)
    assert all(stage.rate_bps is None for s in bucket.steps if isinstance(s, StartEmulator)
               for stage in s.config.stages)


def test_the_default_link_model() -> None:
    plain = load_topology_file(TOPOLOGIES / "star-8.yaml")
    assert default_link_model(plain, NO_DILATION) is LinkModel.BUCKET
    assert default_link_model(plain, TimeDilation(10.0)) is LinkModel.WIRE
    delayed = star(2, shape=LinkShape(rate_bps=GBIT, delay_us=50.0))
    assert default_link_model(delayed, NO_DILATION) is LinkModel.WIRE


def test_a_wire_needs_netem_or_the_userspace_emulator() -> None:
    topology = load_topology_file(TOPOLOGIES / "star-4.yaml")
    with pytest.raises(InputError, match="a wire.*sch_netem"):
        build_plan(topology, "w", netem_available=False, links=LinkModel.WIRE)
    assert build_plan(topology, "w", netem_available=False, links=LinkModel.BUCKET).steps


def test_dry_run_rates_read_with_units() -> None:
    """A dilated plan's rates (1 Gbit/s / 30) print as people read them, not as ``33333333bit``; one format
    (`genie.core.units.describe_rate`) for every rate printed to a user, `format_rate` for what is read again."""
    from genie.core.units import describe_rate, format_rate, parse_rate_bps

    result = run_genie("testbed", "up", TOPOLOGIES / "star-4.yaml", "--dry-run", "--time-dilation", "30",
                       "--links", "bucket")
    assert result.returncode == 0, result.stderr
    assert "class 1:1 rate 33.3 Mbit/s burst" in result.stdout and "bit " not in result.stdout.replace("Mbit/s", "")
    assert [describe_rate(b) for b in (33333333, 10**9, 999_999_999, 1500, 0)] == [
        "33.3 Mbit/s", "1 Gbit/s", "1 Gbit/s", "1.5 kbit/s", "0 bit/s"]
    assert parse_rate_bps(format_rate(33333333)) == 33333333  # what is written back stays exact


def test_cli_dry_run_shows_the_dilated_plan_and_refuses_auto() -> None:
    result = run_genie("testbed", "up", TOPOLOGIES / "star-4.yaml", "--dry-run", "--time-dilation", "10",
                       "--links", "bucket")
    assert result.returncode == 0, (result.stdout + result.stderr)
    assert "rate 100 Mbit/s" in (result.stdout + result.stderr) and "rate 1 Gbit/s" not in (result.stdout + result.stderr)
    result = run_genie("testbed", "up", TOPOLOGIES / "star-4.yaml", "--dry-run", "--time-dilation", "auto")
    assert result.returncode == 2 and "--time-dilation" in (result.stdout + result.stderr) and "dry run" in (result.stdout + result.stderr)
    result = run_genie("testbed", "up", TOPOLOGIES / "star-4.yaml", "--dry-run", "--time-dilation", "0.1")
    assert result.returncode == 2 and "--time-dilation" in (result.stdout + result.stderr) and "Traceback" not in (result.stdout + result.stderr)


# ---- what holds ---------------------------------------------------------------------------------------------
def test_a_dilation_that_makes_a_link_slower_than_tcp_can_treat_as_a_wire_is_refused() -> None:
    topology = star(2, shape=LinkShape(rate_bps=10**6))  # 1 Mbit/s: 12 ms per 1514-byte packet
    assert max_factor(topology) == pytest.approx(10**6 * 0.2 / (8 * 1514))
    check_dilation_holds(topology, TimeDilation(16.0))
    with pytest.raises(InputError, match="cannot hold.*retransmission timeout.*largest factor") as err:
        check_dilation_holds(topology, TimeDilation(17.0), source="t.yaml")
    assert err.value.source == "t.yaml" and err.value.path == "links[0].bandwidth"
    long = star(2, shape=LinkShape(delay_us=2_000_000.0))  # 2 s per hop: x 6 is over 10 s
    with pytest.raises(InputError, match="delay x 6"):
        check_dilation_holds(long, TimeDilation(6.0))


def test_auto_takes_the_binding_limit_rounded_up() -> None:
    topology = star(8, shape=LinkShape(rate_bps=100 * GBIT, delay_us=1.0))
    step_us, pair = smallest_step_us(topology)
    wire_us = 8 * (1024 + 66) / (100 * GBIT) * 1e6
    assert step_us == pytest.approx(2 * (1.0 + wire_us)) and pair == "h0->h1"
    assert demanded_bps(topology) == 8 * 100 * GBIT
    figures = HostFigures(ranks=8, step_us=100.0, aggregate_bps=4 * GBIT, emulator_late_us=20.0)
    dilation = choose_dilation(topology, figures)
    limits = {limit.name: limit for limit in dilation.limits}
    assert limits["software"].needed_factor == pytest.approx(100.0 / (0.02 * step_us))
    assert limits["throughput"].needed_factor == pytest.approx(800 * GBIT / (4 * GBIT))
    assert limits["emulator"].needed_factor == pytest.approx(20.0 / (0.02 * step_us))
    assert dilation.factor == nice_factor(limits["software"].needed_factor) >= limits["software"].needed_factor
    assert "software" in dilation.reason
    # a run whose smallest message is 64 MiB is protected at a much smaller factor: the throughput binds
    big = choose_dilation(topology, figures, reference_bytes=64 << 20)
    assert {limit.name: limit for limit in big.limits}["software"].needed_factor < 1
    assert big.factor == nice_factor(800 * GBIT / (4 * GBIT)) and "throughput" in big.reason
    # a slow fabric on a fast host needs no dilation at all
    slow = star(2, shape=LinkShape(rate_bps=10**7))
    assert choose_dilation(slow, HostFigures(2, 20.0, 10 * GBIT)).factor == 1.0


@pytest.mark.parametrize("size_bytes", [1024, 10 * 1448, 60_000])  # one packet, ten full ones, a short last one
def test_a_messages_least_time_is_the_link_emulators_through_a_chain_of_wires(size_bytes: int) -> None:
    """One rule for a message's least time (`message_us`), the sweep's per size and the replay's per step:
    packets pipeline through a store-and-forward path, so a message is serialized once at its slowest hop and
    one packet of it at each other hop — exactly what the link emulator's chain of wires releases it at for
    equal packets, never later; serializing the whole message at every hop (what auto counted per size
    before) is later than the emulator for any message of more than one packet."""
    from genie.linkemu.config import EmulatorConfig, QueueSpec, StageSpec
    from genie.linkemu.line import TCP_IP_HEADER_BYTES, DelayLine, message_wire_bytes
    from genie.testbed.dilation_rules import message_floor_us, message_us, path_floors

    rate = 100 * GBIT
    stages = tuple(StageSpec(f"links[{i}]", delay_ns=1000, rate_bps=rate, limit_packets=10**6) for i in range(2))
    line = DelayLine(EmulatorConfig("genie-t-h1", stages, (QueueSpec(0, "eth0", (0, 1)),)))
    emulated_us = line.admit(0, 0, 0, size_bytes + TCP_IP_HEADER_BYTES) / 1e3  # one GSO packet through both
    topology = star(2, shape=LinkShape(rate_bps=rate, delay_us=1.0))  # h0 -> s0 -> h1: that chain
    (floor,) = path_floors(topology)
    assert floor == (2.0, ((rate, 1500), (rate, 1500)))
    least_us = message_us(floor, size_bytes)
    assert least_us == message_floor_us(path_floors(topology), size_bytes) == smallest_step_us(topology, size_bytes)[0]
    assert least_us <= emulated_us + 1e-3
    if size_bytes % 1448 == 0 or size_bytes <= 1448:  # equal packets: the emulator's time to the nanosecond
        assert least_us == pytest.approx(emulated_us, abs=2e-3)
    per_hop_us = 2 * (1.0 + 8 * message_wire_bytes(size_bytes) / rate * 1e6)
    if size_bytes <= 1448:
        assert per_hop_us == pytest.approx(least_us)
    else:
        assert per_hop_us > emulated_us + 0.5


def test_auto_refuses_a_factor_the_topology_cannot_hold() -> None:
    topology = star(2, shape=LinkShape(rate_bps=10**6))
    with pytest.raises(InputError, match="auto dilation needs"):
        choose_dilation(topology, HostFigures(2, 20_000.0, 10**6))


def test_nice_factors() -> None:
    assert [nice_factor(x) for x in (0.5, 1, 1.2, 2, 2.1, 7, 9.9, 2345, 8001)] == \
        [1, 1, 1.5, 2, 2.5, 8, 10, 2500, 10000]


# ---- crossing real and emulated time -------------------------------------------------------------------------
def test_results_come_back_divided_by_n() -> None:
    d = TimeDilation(10.0)
    result = CaseResult(0, 1, iterations=((1000, 3000),), steps=((0, 0, 1000, 2000, 64, 64, (2,)),),
                        t0_ns=500, records=((7, 1000, 5000),))
    assert emulated_result(result, d) == CaseResult(0, 1, iterations=((100, 300),),
                                                    steps=((0, 0, 100, 200, 64, 64, (2,)),), t0_ns=50,
                                                    records=((7, 100, 500),))
    assert emulated_result(result, NO_DILATION) is result
    assert emulated_barrier(Barrier(0, iterations=((10, 30),)), d).iterations == ((1, 3),)


def test_what_the_ranks_are_asked_is_n_times_longer() -> None:
    d = TimeDilation(4.0)
    program = RankProgram(0, (ProgramNode(0, "fwd", Lane.COMPUTE, (), duration_ns=5_000),
                              ProgramNode(1, "meta", Lane.NONE, (0,))), frozenset())
    assert [n.duration_ns for n in real_program(program, d).nodes] == [20_000, 0]
    assert real_stragglers((Straggler(2.0, at_s=1.5), Straggler(3.0, at_op=4)), d) == \
        (Straggler(2.0, at_s=6.0), Straggler(3.0, at_op=4))
    assert real_timeout_s(60.0, d) == 240.0


def test_a_running_testbed_keeps_its_dilation() -> None:
    topology = load_topology_file(TOPOLOGIES / "star-4.yaml")
    info = build_plan(topology, "run", netem_available=True, dilation=TimeDilation(10.0)).info
    assert running_dilation(info, DilationChoice()) == info.dilation
    assert running_dilation(info, DilationChoice.parse("10")) == info.dilation
    with pytest.raises(InputError, match="runs at time dilation 10"):
        running_dilation(info, DilationChoice.parse("20"))
    with pytest.raises(InputError, match="loopback has none"):
        loopback_dilation(DilationChoice.parse("auto"))


def test_verify_rows_are_reported_in_the_stated_fabrics_units() -> None:
    rtt = VerifyRow("links[0]", "h0-s0-h1", "h0<->h1", Metric.RTT, 4000.0, 4100.0, 2.5, "±200us", Status.OK, "n")
    rate = VerifyRow("links[0]", "h0-s0-h1", "h0->h1", Metric.THROUGHPUT, 95.6e6, 95.0e6, -0.6, "±5%", Status.OK)
    d = TimeDilation(1000.0)
    assert (emulated_row(rtt, d).configured, emulated_row(rtt, d).measured) == (4.0, 4.1)
    assert emulated_row(rate, d).measured == pytest.approx(95.0e9)
    assert emulated_row(rate, d).status is Status.OK and "real 95.0 Mbit/s" in emulated_row(rate, d).note


def test_a_dilated_loopback_replay_stretches_compute_and_reports_emulated_time(tmp_path: Path) -> None:
    """A compute-only trace of 40 ms at N = 5: the ranks wait 200 ms, the replay reports 40 ms."""
    trace = tmp_path / "compute.yaml"
    trace.write_text("format: genie-trace\nversion: 1\nname: c\nranks: 2\nprogram:\n  - {id: 0, name: fwd, type: compute, duration: 40ms}\n")
    started = time.monotonic()
    result = run_genie("replay", trace, "--loopback", "-n", "1", "--time-dilation", "5", "--out", tmp_path / "r")
    wall_s = time.monotonic() - started
    assert result.returncode == 0, (result.stdout + result.stderr)
    import json

    doc = json.loads((tmp_path / "r" / "replay.json").read_text())
    assert 40e6 <= doc["iteration_median_ns"] < 60e6  # emulated: the 40 ms node, not the 200 ms waited
    assert wall_s >= 0.2  # the ranks really computed 5 x 40 ms
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["time_dilation"]["factor"] == 5.0 and manifest["params"]["time_dilation"] == "5"
    memory = manifest["summary"]["rank_peak_rss_mb"]  # every rank reports its peak resident memory
    assert memory["ranks"] == 2 and 5 < memory["median"] <= memory["max"] < 500


def test_up_chooses_the_default_link_model_before_the_shaper(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A dilated rate-only topology gets wire links by default, so `up` must look for netem or the emulator for
    them (on a kernel without sch_netem: the userspace shaper), not plan netem it cannot have."""
    from genie.core.testbed import Shaping
    from genie.testbed.environment import FakeEnvironment
    from genie.testbed import service
    from genie.testbed.state import STATE_DIR_ENV

    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    environment = FakeEnvironment(netem=False)
    info = service.up(load_topology_file(TOPOLOGIES / "star-4.yaml"), name="wiredefault",
                      dilation=TimeDilation(10.0), environment=environment)
    assert info.links is LinkModel.WIRE and Shaping.USERSPACE in info.shaper
    service.down("wiredefault", environment=environment)
