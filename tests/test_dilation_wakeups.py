"""`auto` for a replay counts how late the ranks wake (the iteration's start, a compute node's end), not only
their per-step cost: the rule on a software-bound trace, the count of wake-ups per rank, a throughput-bound
trace unchanged, and the probe's statistic from records."""

from __future__ import annotations

from pathlib import Path

import pytest

from genie.core.records import IterationRecords, RankRecords
from genie.core.topology import LinkShape
from genie.services.host_probe import WAKE_COMPUTE_US, wake_cost_us
from genie.testbed.dilation_rules import (TARGET_SHARE, HostFigures, choose_dilation, iteration_floor, rank_floors,
                                          wake_floor)
from genie.topology import load_topology_file, star

ROOT = Path(__file__).resolve().parent.parent
GBIT = 10**9
HEADER = "format: genie-trace\nversion: 1\nname: t\nranks: {ranks}\nprogram:\n"
SOFTWARE_BOUND = (HEADER.format(ranks=2) +
                  "  - {id: 0, type: all_reduce, size: 16KiB}\n"
                  "  - {id: 1, type: compute, duration: 2ms, deps: [0]}\n"
                  "  - {id: 2, type: all_reduce, size: 4MiB, deps: [1]}\n")
TWO_HOSTS_10G = star(2, shape=LinkShape(rate_bps=10 * GBIT, delay_us=5.0))


def _iteration(text: str):
    from genie.engine.program import build_programs
    from genie.services.dilation import replay_iteration
    from genie.workloads.native import read_native

    return replay_iteration(build_programs(read_native(text, source="t"), source="t"))


def test_a_software_bound_replay_is_sized_by_how_late_its_ranks_wake() -> None:
    # session 19's case: 2 hosts at 10 Gbit/s, a 16 KiB all-reduce, 2 ms of compute, a 4 MiB all-reduce; the
    # host measured ~220 us per step and 1.33 Gbit/s of shaped throughput, and its ranks woke ~3 ms late
    # (a scheduler slice) at the iteration's start and the compute's end, which the per-step rule missed
    iteration = _iteration(SOFTWARE_BOUND)
    floor = wake_floor(TWO_HOSTS_10G, iteration)
    assert floor.wakes == 2  # the iteration's start, the compute's end (it hands over to the 4 MiB all-reduce)
    without = choose_dilation(TWO_HOSTS_10G, HostFigures(2, 220.0, 1.33 * GBIT), iteration=iteration)
    assert without.factor == 20 and "throughput" in without.reason  # the old rule: 3 ms x 2 is 5 % of 5.6 ms
    figures = HostFigures(2, 220.0, 1.33 * GBIT, wake_us=3000.0)
    dilation = choose_dilation(TWO_HOSTS_10G, figures, iteration=iteration)
    need = 3000.0 * 2 / (TARGET_SHARE * floor.floor_us)  # 2 wake-ups x 3 ms under 2 % of 5.575 ms
    assert need == pytest.approx(53.8, abs=0.1)
    assert dilation.factor == 60 and dilation.reason == f"auto: wake-up needs N >= {need:.4g} for the iteration, rounded up"
    assert 2 * 3000.0 / dilation.factor <= TARGET_SHARE * floor.floor_us
    limits = {limit.name: limit for limit in dilation.limits}
    assert (limits["wake-up"].measured, limits["wake-up"].needed_factor) == (3000.0, pytest.approx(need))
    assert "rank 0's 2 wake-ups per iteration" in limits["wake-up"].detail and "(5.575 ms)" in limits["wake-up"].detail
    assert limits["software"].needed_factor == pytest.approx(5 * 220.0 / (TARGET_SHARE * floor.floor_us))
    # a sweep size is one op between barriers: the wake-ups weigh only on a replay's iteration
    by_size = choose_dilation(TWO_HOSTS_10G, figures, reference_bytes=16 << 10)
    assert "wake-up" not in {limit.name for limit in by_size.limits}


def test_a_ranks_wake_ups_are_its_start_and_each_compute_that_hands_over() -> None:
    text = (HEADER.format(ranks=2) +
            "  - {id: 0, type: compute, duration: 1ms}\n"
            "  - {id: 1, type: compute, duration: 1ms, deps: [0]}\n"  # after compute only: made up by its deadline
            "  - {id: 2, type: all_reduce, size: 64KiB, deps: [1]}\n"  # node 1 hands over to it
            "  - {id: 3, type: compute, duration: 1ms, deps: [2]}\n"
            "  - {id: 4, type: compute, duration: 1ms, deps: [3]}\n"
            "  - {id: 5, type: all_reduce, size: 64KiB, deps: [3]}\n"  # node 3 hands over to compute and to this
            "  - {id: 6, type: compute, duration: 1ms, deps: [4]}\n")  # ends the iteration
    floors = rank_floors(TWO_HOSTS_10G, _iteration(text))
    assert [f.wakes for f in floors] == [4, 4]  # start + nodes 1, 3 and 6; not 0 or 4
    assert floors[0].steps == iteration_floor(TWO_HOSTS_10G, _iteration(text)).steps


def test_a_throughput_bound_replay_keeps_its_factor() -> None:
    from genie.engine.program import build_programs
    from genie.services.dilation import replay_iteration
    from genie.services.replay import load_checked_trace

    trace, _ = load_checked_trace(ROOT / "traces" / "gen_tp2_dp4_gpt3", None)
    iteration = replay_iteration(build_programs(trace, source="tp2dp4"))
    topology = load_topology_file(ROOT / "topologies" / "star-8-100g.yaml")
    # TP2xDP4: 41 wake-ups per rank (the start, 40 compute nodes that hand over) against 43.3 ms; session 19's
    # host figures with its 8 ranks waking 5 ms late on average (software 148, wake-ups 237, each a limit
    # of its own) still leave the throughput binding at 500
    floor = wake_floor(topology, iteration)
    assert floor.wakes == 41 and floor.floor_us == pytest.approx(43_267, rel=1e-3)
    dilation = choose_dilation(topology, HostFigures(8, 910.0, 1.6 * GBIT, 373.0, 5000.0), iteration=iteration)
    assert dilation.factor == 500 and dilation.reason == "auto: throughput needs N >= 500, rounded up"
    limits = {limit.name: limit for limit in dilation.limits}
    assert limits["wake-up"].needed_factor == pytest.approx(41 * 5000.0 / (TARGET_SHARE * floor.floor_us))  # 237
    assert limits["software"].needed_factor == pytest.approx(141 * 910.0 / (TARGET_SHARE * floor.floor_us))  # 148


def test_the_probe_takes_the_mean_of_what_a_wake_up_costs_the_slowest_rank() -> None:
    c = WAKE_COMPUTE_US * 1000

    def rank(r: int, t0: int, start: int, end0: int, late: int, end2: int) -> RankRecords:
        """node 0 from t0 + start to t0 + end0, compute to its deadline + late, node 2 ends t0 + end2"""
        return RankRecords(r, t0, ((0, t0 + start, t0 + end0), (1, t0 + end0, t0 + end0 + c + late),
                                   (2, t0 + end0 + c + late, t0 + end2)))

    iterations = (  # times in ns; rank 1 of iteration 0 starts 300 us late and its compute deadline is the latest
        IterationRecords(0, (rank(0, 1_000_000, 10_000, 400_000, 0, 400_000 + c + 900_000),
                             rank(1, 1_000_000, 300_000, 500_000, 40_000, 500_000 + c + 700_000))),
        IterationRecords(1, (rank(0, 9_000_000, 20_000, 60_000, 3_000_000, 60_000 + c + 3_100_000),
                             rank(1, 9_000_000, 0, 70_000, -5_000, 70_000 + c + 3_100_000))),
    )
    # per iteration: the latest first all-reduce's end after the start (500, 70 us) and the latest second
    # all-reduce's end after the latest compute deadline (900 - 100 = 800, 3_100 us), less what
    # the all-reduce's steps cost at the probe's per-step time (50 us)
    assert wake_cost_us(iterations, WAKE_COMPUTE_US, 50.0) == pytest.approx((500 + 70 + 800 + 3100) / 4 - 50)
    # the steps may cost less after a wake-up than the probe's per-step time says; the mean is never below 0
    assert wake_cost_us(iterations[:1], WAKE_COMPUTE_US, 5000.0) == 0.0
    assert wake_cost_us((), WAKE_COMPUTE_US, 50.0) is None


def test_a_replay_under_auto_measures_the_wake_ups_and_a_sweep_does_not(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from cli_support import run_genie
    from genie.core.errors import InputError
    from genie.services import host_probe
    from genie.testbed import service

    asked: list[bool] = []

    def measure(_topology, _links, *, wakes=False):
        asked.append(wakes)
        return HostFigures(2, 220.0, 1.33 * GBIT, wake_us=3000.0 if wakes else None)

    def stop(*_a, dilation, **_k):  # what the testbed would come up with; then stop before anything is up
        raise InputError(f"stopped before bringing the testbed up at {dilation.factor:g}", path="topology")

    monkeypatch.setattr(host_probe, "measure_host", measure)
    monkeypatch.setattr(service, "temporary_testbed", stop)
    topology = tmp_path / "star2.yaml"
    from genie.topology import dump_topology

    topology.write_text(dump_topology(TWO_HOSTS_10G))
    trace = tmp_path / "t.yaml"
    trace.write_text(SOFTWARE_BOUND)
    result = run_genie("replay", trace, "--topology", topology, "--time-dilation", "auto", "-n", "1",
                       "--out", tmp_path / "r")
    assert result.returncode == 2 and "stopped before bringing the testbed up at 60" in result.stderr, result.stderr
    result = run_genie("bench", "--topology", topology, "--time-dilation", "auto", "-b", "1K", "-e", "4K",
                       "-n", "1", "--out", tmp_path / "b")
    assert result.returncode == 2 and "stopped before" in result.stderr, result.stderr
    assert asked == [True, False]


# ---- the throughput probe: only a shortfall that a lower rate relieves is the host's throughput (session 35) --
STAR_2M = star(4, shape=LinkShape(rate_bps=2 * 10**6))  # 8 Mbit/s asked at once: far under any host's limit


def _probe(monkeypatch: pytest.MonkeyPatch, share) -> tuple[float, list[int]]:  # type: ignore[no-untyped-def]
    """`_shaped_throughput` on STAR_2M with the probe's measurement replaced by `share(rate per host)`."""
    from genie.core.testbed import LinkModel
    from genie.services import host_probe

    rates: list[int] = []

    def efficiency(_topology, _links, _hosts, rate_bps: int, **_: object) -> float:  # type: ignore[no-untyped-def]
        rates.append(rate_bps)
        return share(rate_bps)

    monkeypatch.setattr(host_probe, "_efficiency", efficiency)
    return host_probe._shaped_throughput(STAR_2M, LinkModel.WIRE, 8e6), rates


def test_the_throughput_probe_does_not_blame_throughput_for_slow_links(monkeypatch: pytest.MonkeyPatch) -> None:
    """Measured on a 4-host wire star: 0.86-0.90 of the payload limit at 0.8 Mbit/s per host, 0.99 at 2 and at
    100 Mbit/s - a cost per message that weighs more the slower the link. The probe lowered the rates on
    (x2.5 per round, each round slower links) and `auto` blamed throughput: `needs N >= 150 on this host
    (throughput), but the topology holds only up to 13.21`. This host carries 100 Mbit/s per host: the
    shortfall is the slow links', and that aggregate counts as carried."""
    carried, rates = _probe(monkeypatch, lambda rate: 0.99 if rate >= 10**7 else 0.86)
    assert carried == 4 * 10**8 and rates == [2 * 10**6, 10**8]  # host_probe.CHECK_RATE_BPS per host


def test_the_throughput_probe_still_finds_a_real_throughput_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host that carries 1.5 Mbit/s in all: the faster check fails too, and each lower rate delivers a larger
    share until one holds."""
    carried, rates = _probe(monkeypatch, lambda rate: min(1.0, 1.5e6 / (4 * rate)))
    assert carried == 8e6 / 8 and rates == [2 * 10**6, 10**8, 8 * 10**5, 250_000]  # N = 1 (+ check), 2.5, 8
