"""Time dilation per size without root: the plan (size -> factor -> link shapes) from measured host figures,
auto's refusal naming the size, the live reshape between sizes on the kernel model (and its failure leaving the
testbed as it was), and the bench service's runs of sizes at one factor each."""

from __future__ import annotations

from pathlib import Path

import pytest

from genie.core.collective import Algorithm, Collective
from genie.core.dilation import TimeDilation, WeighedStep
from genie.core.errors import InputError, RunFailure
from genie.core.schedule import CollectiveOp
from genie.core.topology import LinkShape
from genie.core.units import format_size
from genie.faults.live import LiveTestbed
from genie.services.bench import sweep_sizes
from genie.services.cases import BenchOutcome, GroupCase, run_cases_per_size
from genie.services.dilation import SizeDilator
from genie.core.protocol import BenchCase, BenchJob
from genie.testbed.backend import FakeBackend, apply_plan
from genie.testbed.dilation_plan import plan_per_size, single_plan
from genie.testbed.dilation_rules import HostFigures, choose_dilation
from genie.testbed.kernel_model import KernelModel, KernelNetlink
from genie.testbed.plan import build_plan
from genie.testbed.steps import RTO_MIN_US, Shaper
from genie.linkemu.line import message_wire_bytes
from genie.topology import load_topology_file, star

from cli_support import run_genie

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"
GBIT = 10**9
SIZES = sweep_sizes(1024, 64 << 20, 4)
FIGURES = HostFigures(ranks=8, step_us=60.0, aggregate_bps=4 * GBIT, emulator_late_us=10.0)


# ---- the plan -------------------------------------------------------------------------------------------------
def test_each_size_gets_autos_factor_for_that_size() -> None:
    topology = load_topology_file(TOPOLOGIES / "star-8-100g.yaml")
    plan = plan_per_size(topology, FIGURES, SIZES)
    assert [s.size_bytes for s in plan.sizes] == SIZES
    for entry in plan.sizes:  # each factor is exactly auto's for a run whose smallest message is that size
        assert entry.dilation == choose_dilation(topology, FIGURES, reference_bytes=entry.size_bytes)
        assert ("software" not in entry.dilation.reason) or f"{entry.size_bytes}-byte message" in entry.dilation.reason
    factors = [s.dilation.factor for s in plan.sizes]
    assert factors == sorted(factors, reverse=True) and plan.per_size
    assert plan.first.factor == factors[0] > factors[-1]
    # the largest sizes are held by the host's throughput, not its software: 800 Gbit/s asked, 4 delivered
    assert factors[-1] == 200 and "throughput" in plan.sizes[-1].dilation.reason
    assert plan.dilation_for(64 << 20).factor == 200 and plan.dilation_for(1000).factor == factors[0]
    assert plan.dilation_for(5000) == plan.sizes[1].dilation  # an aligned size between two planned ones
    assert plan.reasons() == [f"{format_size(s.size_bytes)}: time dilation {s.dilation.factor:g} "
                              f"({s.dilation.reason})" for s in plan.sizes]  # what the run prints at its end
    lines = plan.describe(topology)
    assert len(lines) == len(SIZES) and "100 Gbit/s 1us -> 500 Mbit/s 200us" in lines[-1]
    assert plan.to_dict()[-1] == {"size_bytes": 64 << 20, "factor": 200.0, "reason": plan.sizes[-1].dilation.reason}


def test_one_factor_is_every_sizes() -> None:
    plan = single_plan([4096, 1024, 4096], TimeDilation(10.0, "asked for"))
    assert [s.size_bytes for s in plan.sizes] == [1024, 4096] and not plan.per_size


def test_a_size_whose_factor_cannot_hold_is_refused_by_name() -> None:
    slow = star(2, shape=LinkShape(rate_bps=10**6))  # holds up to N = 16
    with pytest.raises(InputError) as info:
        plan_per_size(slow, HostFigures(2, 20_000.0, 10 * GBIT), [1 << 20, 1024, 4096])
    message = str(info.value)
    assert message.startswith("time_dilation: size 1KiB: auto dilation needs N >=")
    assert "holds only up to 16" in message and "\n" not in message


def test_cli_refuses_per_size_before_anything_is_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from genie.services import host_probe
    from genie.testbed import service

    topology = tmp_path / "slow.yaml"
    topology.write_text("name: slow\ndefaults: {bandwidth: 1mbit}\nhosts: [{prefix: h, count: 2}]\n"
                        "switches: [{name: s0, kind: bridge}]\n"
                        "links: [{endpoints: [h0, s0]}, {endpoints: [h1, s0]}]\n")
    monkeypatch.setattr(host_probe, "measure_host", lambda *_a, **_k: HostFigures(2, 20_000.0, 10 * GBIT))

    def never(*_a, **_k):
        raise AssertionError("a testbed was brought up")

    monkeypatch.setattr(service, "temporary_testbed", never)
    out = tmp_path / "run"
    for extra in ((), ("--dry-run",)):
        result = run_genie("bench", "--topology", topology, "--time-dilation", "auto", "-b", "1K", "-e", "1M",
                           "--out", out, *extra)
        text = result.stdout + result.stderr
        assert result.returncode == 2, text
        assert "size 1KiB" in text and "holds only up to" in text and "Traceback" not in text
        assert len(result.stderr.strip().splitlines()) == 1
        assert not out.exists()


def test_cli_dry_run_prints_the_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from genie.services import host_probe

    monkeypatch.setattr(host_probe, "measure_host", lambda *_a, **_k: FIGURES)
    result = run_genie("bench", "--topology", TOPOLOGIES / "star-8-100g.yaml", "--time-dilation", "auto",
                       "-b", "1K", "-e", "64M", "-f", "4", "--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line for line in result.stdout.splitlines() if "N = " in line]
    assert len(rows) == len(SIZES) and rows[-1].split()[0] == "64MiB" and "N = 200" in rows[-1]
    result = run_genie("bench", "--topology", TOPOLOGIES / "star-8-100g.yaml", "--time-dilation", "auto",
                       "-b", "1K", "-e", "64K", "--fault", "degrade h0-s0 rate=1gbit at=0.1", "--dry-run")
    assert result.returncode == 2 and "one clock" in result.stderr


# ---- the live reshape, on the kernel model --------------------------------------------------------------------
def _testbed(kernel: KernelModel, dilation: TimeDilation, netlink: KernelNetlink) -> LiveTestbed:
    topology = star(3, shape=LinkShape(rate_bps=100 * GBIT, delay_us=1.0))
    plan = build_plan(topology, "fk-dps", netem_available=True, shaper=Shaper.KERNEL, dilation=dilation)
    apply_plan(FakeBackend(kernel=kernel), plan.steps)
    return LiveTestbed(plan.info, plan.steps, Shaper.KERNEL, netlink=netlink)


def _egress(kernel: KernelModel) -> dict:
    return {(ns, name): (i.htb, i.leaf, i.ack_leaf) for ns, space in sorted(kernel.namespaces.items())
            for name, i in sorted(space.interfaces.items()) if i.htb or i.leaf}


def test_redilate_reshapes_every_link_and_back() -> None:
    kernel = KernelModel()
    up = TimeDilation(1000.0, "auto")
    live = _testbed(kernel, up, KernelNetlink(kernel))
    built = _egress(kernel)
    live.redilate(TimeDilation(100.0, "auto"))
    changed = _egress(kernel)
    assert changed.keys() == built.keys() and len(changed) == 6  # both ends of 3 links
    rates = {htb.rate_bps for htb, _, _ in changed.values() if htb}
    assert rates == {GBIT}  # 100 Gbit/s / 100
    delays = {leaf.delay_us for _, leaf, _ in changed.values() if leaf is not None and hasattr(leaf, "delay_us")}
    assert delays == {100.0}
    live.redilate(up)
    assert _egress(kernel) == built


def _rto_min_us(kernel: KernelModel, live: LiveTestbed) -> set[str | None]:
    return {kernel.namespaces[h.netns].sysctls.get(RTO_MIN_US) for h in live.info.hosts if h.netns}


def test_redilate_sets_every_hosts_minimum_rto_and_back() -> None:
    kernel = KernelModel()
    live = _testbed(kernel, TimeDilation(1000.0, "auto"), KernelNetlink(kernel))
    assert _rto_min_us(kernel, live) == {"120000000"}  # 200 ms x 1000 is past the kernel's RTO ceiling
    live.redilate(TimeDilation(100.0, "auto"))
    assert _rto_min_us(kernel, live) == {"20000000"}
    live.redilate(TimeDilation(1.0, "auto"))
    assert _rto_min_us(kernel, live) == {"200000"}  # the kernel's own
    live.redilate(TimeDilation(1000.0, "auto"))
    assert _rto_min_us(kernel, live) == {"120000000"}


def test_a_failed_reshape_leaves_the_testbed_as_it_was() -> None:
    kernel = KernelModel()
    up = TimeDilation(1000.0, "auto")
    netlink = KernelNetlink(kernel, fail_at=4)  # part-way through the 6 link ends
    live = _testbed(kernel, up, netlink)
    built = _egress(kernel)
    dilator = SizeDilator(live.info, live)
    with pytest.raises(RunFailure) as info:
        dilator.use(TimeDilation(100.0, "auto"), size_bytes=1 << 20)
    message = str(info.value)
    assert "for size 1MiB failed" in message and "back at time dilation 1000" in message and "\n" not in message
    assert _egress(kernel) == built and dilator.current == up and live.dilation == up


def _bucket_testbed(kernel: KernelModel, dilation: TimeDilation) -> LiveTestbed:
    """A rate-only testbed on bucket links: a live reshape changes each end's HTB class in place (as the
    userspace-shaped testbeds' links do, whose delays live in the link emulators)."""
    from genie.core.testbed import LinkModel

    plan = build_plan(star(3, shape=LinkShape(rate_bps=100 * GBIT)), "fk-gone", netem_available=True,
                      shaper=Shaper.KERNEL, dilation=dilation, links=LinkModel.BUCKET)
    apply_plan(FakeBackend(kernel=kernel), plan.steps)
    return LiveTestbed(plan.info, plan.steps, Shaper.KERNEL, netlink=KernelNetlink(kernel))


def _delete_root_qdisc(kernel: KernelModel, live: LiveTestbed) -> None:
    """What `tc qdisc del dev eth0 root` in a host's namespace does under a running sweep."""
    end = next(e for e in live.info.link_ends if e.netns and e.node == "h1")
    interface = kernel.interface(end.netns, end.ifname)
    interface.htb = interface.leaf = interface.ack_leaf = None


def test_a_reshape_that_cannot_be_undone_fails_in_one_line_and_keeps_the_sizes_before_it() -> None:
    """A qdisc genie made deleted under the sweep before a reshape: the reshape fails, so does putting it back;
    the run fails with that one RunFailure (the end-of-sweep restore does not replace it with the kernel's
    error)."""
    sizes = [1024, 64 << 20]
    plan = plan_per_size(load_topology_file(TOPOLOGIES / "star-8-100g.yaml"), FIGURES, sizes)
    kernel = KernelModel()
    live = _bucket_testbed(kernel, plan.first)  # up at the smallest size's factor, as a sweep's testbed is
    _delete_root_qdisc(kernel, live)
    seen, rows = [], []
    with pytest.raises(RunFailure) as info:
        run_cases_per_size(_cases(sizes), plan, SizeDilator(live.info, live), _fake_run(seen),
                           lambda *row: rows.append(row))
    message = str(info.value)
    assert "for size 64MiB failed" in message and f"restoring its shapes at {plan.first.factor:g} failed too" in message
    assert "genie testbed down fk-gone" in message and "\n" not in message
    assert rows == [(1, 2, "stats 1024")]
    # the run's own scratch testbed (of a topology): the run removes it, so the message does not send the user there
    kernel = KernelModel()
    live = _bucket_testbed(kernel, plan.first)
    _delete_root_qdisc(kernel, live)
    with pytest.raises(RunFailure) as info:
        run_cases_per_size(_cases(sizes), plan, SizeDilator(live.info, live, scratch=True), _fake_run([]),
                           lambda *row: None)
    assert "the run removes its scratch testbed" in str(info.value) and "testbed down" not in str(info.value)


def test_putting_the_links_back_after_the_sweep_fails_in_one_line() -> None:
    """The sizes ran, then the last reshape (back to the testbed's own factor) fails: a RunFailure naming the
    testbed and the factors, not the kernel's error; the rows are all kept."""
    sizes = [1024, 64 << 20]
    plan = plan_per_size(load_topology_file(TOPOLOGIES / "star-8-100g.yaml"), FIGURES, sizes)
    kernel = KernelModel()
    live = _bucket_testbed(kernel, plan.first)
    seen, rows = [], []
    run = _fake_run(seen)

    def deleting(part, **kwargs):  # the qdisc goes while the last size runs
        if part[0].op.size_bytes == 64 << 20:
            _delete_root_qdisc(kernel, live)
        return run(part, **kwargs)

    dilator = SizeDilator(live.info, live)
    with pytest.raises(RunFailure) as info:
        run_cases_per_size(_cases(sizes), plan, dilator, deleting, lambda *row: rows.append(row))
    message = str(info.value)
    assert message.startswith(f"putting testbed fk-gone's links back at time dilation {plan.first.factor:g} "
                              f"(from {plan.sizes[-1].dilation.factor:g}) failed")
    assert "genie testbed down fk-gone" in message and "\n" not in message
    assert [r[0] for r in rows] == [1, 2]


# ---- the sweep in runs of one factor ----------------------------------------------------------------------------
def _cases(sizes) -> list[GroupCase]:
    return [GroupCase((CollectiveOp(Collective.ALL_REDUCE, s, (0, 1), Algorithm.RING, dtype_bytes=4),), 1, 2)
            for s in sizes]


class _Dilator:
    def __init__(self, fail_factor: float | None = None) -> None:
        self.used: list[float] = []
        self.restored = 0
        self.fail_factor = fail_factor

    def use(self, dilation: TimeDilation, *, size_bytes: int) -> None:
        if dilation.factor == self.fail_factor:
            raise RunFailure(f"reshape for {size_bytes} failed")
        self.used.append(dilation.factor)

    def restore(self) -> None:
        self.restored += 1


def _fake_run(seen: list):
    def run(part, *, dilation, progress):
        seen.append((dilation.factor, [c.op.size_bytes for c in part]))
        for i, _ in enumerate(part, 1):
            progress(i, len(part), f"stats {part[i - 1].op.size_bytes}")
        job = BenchJob(cases=tuple(BenchCase(c.op, c.warmup, c.iterations) for c in part))
        return BenchOutcome(stats=tuple(f"stats {c.op.size_bytes}" for c in part), job=job, placements=(),
                            peak_rss_kb={0: 10 * len(seen)})
    return run


def test_sizes_run_in_sessions_of_one_factor_and_join_as_one_sweep() -> None:
    sizes = [1024, 4096, 16384, 65536]
    plan = plan_per_size(load_topology_file(TOPOLOGIES / "star-8-100g.yaml"), FIGURES, sizes)
    expected = [s.dilation.factor for s in plan.sizes]
    seen, rows, dilator = [], [], _Dilator()
    outcome = run_cases_per_size(_cases(sizes * 2), plan, dilator, _fake_run(seen),  # two collectives' worth
                            lambda done, total, stats: rows.append((done, total, stats)))
    assert [f for f, _ in seen] == [f for i, f in enumerate(expected * 2) if i == 0 or f != (expected * 2)[i - 1]]
    assert dilator.used == [f for f, _ in seen] and dilator.restored == 1
    assert [d for d, _, _ in rows] == list(range(1, 9)) and {t for _, t, _ in rows} == {8}
    assert outcome.stats == tuple(f"stats {s}" for s in sizes * 2)
    assert [c.op.size_bytes for c in outcome.job.cases] == sizes * 2
    assert outcome.peak_rss_kb == {0: 10 * len(seen)}


def test_a_reshape_that_fails_keeps_the_sizes_before_it() -> None:
    sizes = [1024, 64 << 20]
    plan = plan_per_size(load_topology_file(TOPOLOGIES / "star-8-100g.yaml"), FIGURES, sizes)
    seen, rows, dilator = [], [], _Dilator(fail_factor=plan.sizes[1].dilation.factor)
    with pytest.raises(RunFailure):
        run_cases_per_size(_cases(sizes), plan, dilator, _fake_run(seen), lambda *row: rows.append(row))
    assert rows == [(1, 2, "stats 1024")] and dilator.restored == 1



# ---- a replay: one clock, and it says which ----------------------------------------------------------------------
def test_a_replay_says_its_one_factor_and_why(tmp_path: Path) -> None:
    trace = tmp_path / "compute.yaml"
    trace.write_text("format: genie-trace\nversion: 1\nname: c\nranks: 2\nprogram:\n"
                     "  - {id: 0, name: fwd, type: compute, duration: 1ms}\n")
    result = run_genie("replay", trace, "--loopback", "-n", "1", "-w", "0", "--time-dilation", "4",
                       "--out", tmp_path / "r")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "# time dilation 4 (asked for); a replay runs the whole trace at one factor" in result.stdout


def test_autos_reason_names_the_message_that_drove_it() -> None:
    topology = load_topology_file(TOPOLOGIES / "star-8-100g.yaml")
    software = choose_dilation(topology, FIGURES, reference_bytes=16 << 10)
    assert software.reason.startswith("auto: software needs N >=") and "for a 16384-byte message" in software.reason
    throughput = choose_dilation(topology, FIGURES, reference_bytes=64 << 20)
    assert throughput.reason == "auto: throughput needs N >= 200, rounded up"


# ---- a replay: auto weighs the iteration, not its smallest message -----------------------------------------------
def _programs(text: str):
    from genie.engine.program import build_programs
    from genie.workloads.native import read_native

    return build_programs(read_native(text, source="t"), source="t")


STEP_TRACE = ("format: genie-trace\nversion: 1\nname: step\nranks: 8\nprogram:\n"
              "  - {id: 0, type: all_reduce, size: 16KiB}\n"
              "  - {id: 1, type: compute, duration: 20ms, deps: [0]}\n"
              "  - {id: 2, type: all_reduce, size: 64MiB, algorithm: ring, deps: [1]}\n")


def test_a_replays_iteration_is_its_steps_and_the_chain_they_wait_on() -> None:
    from genie.services.dilation import replay_iteration
    from genie.testbed.dilation_rules import iteration_floor, message_floor_us, path_floors

    text = ("format: genie-trace\nversion: 1\nname: two\nranks: 2\nprogram:\n"
            "  - {id: 0, type: compute, duration: 1ms}\n"
            "  - {id: 1, type: all_reduce, size: 512KiB, algorithm: ring, deps: [0]}\n"
            "  - {id: 2, type: compute, duration: 500us}\n")  # beside the other two: not on their chain
    iteration = replay_iteration(_programs(text))
    assert iteration.smallest_bytes == 512 << 10 and len(iteration.ranks) == 2
    compute, reduce, beside = iteration.ranks[0]
    assert (compute.compute_ns, compute.steps) == (1_000_000, ())
    assert reduce.deps == (0,) and reduce.steps == (WeighedStep(((1, 256 << 10),), ((1, 256 << 10),)),) * 2  # 2 ring steps, no token
    assert reduce.steps[0].largest_bytes == 256 << 10
    assert (beside.deps, beside.compute_ns) == ((), 500_000)
    topology = star(2, shape=LinkShape(rate_bps=100 * GBIT, delay_us=1.0))
    floors = path_floors(topology)
    # both hops' delay, the bytes serialized once (pipelined) and at the other hop its last packet (256 KiB is
    # 181 packets of 1448 bytes and one of 56)
    step_us = message_floor_us(floors, 256 << 10)
    assert step_us == pytest.approx(2.0 + 8 * (message_wire_bytes(256 << 10, 1500) + message_wire_bytes(56, 1500))
                                    / (100 * GBIT) * 1e6)
    floor = iteration_floor(topology, iteration)
    assert (floor.steps, floor.compute_us) == (2, 1000.0)
    assert floor.floor_us == pytest.approx(1000.0 + 2 * step_us)  # the longest chain, not the sum of all
    # a collective whose peer gets >= 1 MiB runs a clear-to-send token first: a step of its own
    big = replay_iteration(_programs(text.replace("512KiB", "4MiB"))).ranks[0][1]
    assert big.steps[0] == WeighedStep(((1, 8),), ((1, 8),)) and len(big.steps) == 3
    assert big.steps[0].largest_bytes == 8


def test_auto_sizes_a_replay_by_its_iteration_not_its_smallest_message() -> None:
    from genie.services.dilation import replay_iteration

    topology = load_topology_file(TOPOLOGIES / "star-8-100g.yaml")
    figures = HostFigures(ranks=8, step_us=60.0, aggregate_bps=4 * GBIT, emulator_late_us=10.0)
    iteration = replay_iteration(_programs(STEP_TRACE))
    by_message = choose_dilation(topology, figures, reference_bytes=16 << 10)
    by_iteration = choose_dilation(topology, figures, iteration=iteration)
    assert by_message.factor == 1000 and "for a 16384-byte message" in by_message.reason
    # 30 steps (14 + a token + 14, and a token) against an iteration of > 20 ms: the host's 60 us per step is far
    # under 2 %; the 800 Gbit/s the links ask of a host that carries 4 binds
    assert by_iteration.factor == 200 and by_iteration.reason == "auto: throughput needs N >= 200, rounded up"
    software = {limit.name: limit for limit in by_iteration.limits}["software"]
    assert software.needed_factor < 10 and "rank 0's iteration" in software.detail
    # an iteration of small messages only keeps a factor as large as its messages need
    chain = "".join(f"  - {{id: {i}, type: all_reduce, size: 16KiB{f', deps: [{i - 1}]' if i else ''}}}\n"
                    for i in range(50))
    small = choose_dilation(topology, figures, iteration=replay_iteration(_programs(STEP_TRACE.split("  - ")[0] + chain)))
    assert small.factor >= by_message.factor and small.reason.endswith("for the iteration, rounded up")


def test_cli_replay_under_auto_weighs_the_iteration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from genie.services import host_probe
    from genie.testbed import service

    trace = tmp_path / "step.yaml"
    trace.write_text(STEP_TRACE)
    monkeypatch.setattr(host_probe, "measure_host", lambda *_a, **_k: HostFigures(8, 60.0, 4 * GBIT, 10.0))
    chosen = []

    def stop(*_a, dilation, **_k):  # what the testbed would come up with; then stop before anything is up
        chosen.append(dilation)
        raise InputError("stopped before bringing the testbed up", path="topology")

    monkeypatch.setattr(service, "temporary_testbed", stop)
    result = run_genie("replay", trace, "--topology", TOPOLOGIES / "star-8-100g.yaml", "--time-dilation", "auto",
                       "-n", "1", "--out", tmp_path / "r")
    assert result.returncode == 2 and "stopped before" in result.stderr, result.stdout + result.stderr
    assert [d.factor for d in chosen] == [200] and "throughput" in chosen[0].reason


# ---- an experiment: its sweep per size, its replay by genie replay's rule -------------------------------------
def test_an_experiments_plan_gives_its_replay_the_replays_factor() -> None:
    from genie.services.dilation import replay_iteration

    topology = load_topology_file(TOPOLOGIES / "star-8-100g.yaml")
    iteration = replay_iteration(_programs(STEP_TRACE))
    plan = plan_per_size(topology, FIGURES, [16 << 10, 64 << 20], iteration=iteration)
    assert plan.replay == choose_dilation(topology, FIGURES, iteration=iteration)  # the one rule, as genie replay
    assert plan.replay.factor == 200 and plan.dilation_for(16 << 10).factor == 1000  # not its smallest message's
    assert plan.first.factor == 1000 and plan.per_size
    assert plan.describe(topology)[-1].split()[:4] == ["replay", "N", "=", "200"]
    # one size at the replay's factor is still a plan of two factors; one factor for both is not per size
    assert plan_per_size(topology, FIGURES, [16 << 10], iteration=iteration).per_size
    assert not plan_per_size(topology, FIGURES, [64 << 20], iteration=iteration).per_size
    # a replay whose factor the topology cannot hold is refused by name
    small = replay_iteration(_programs(STEP_TRACE.split("  - ")[0] + "  - {id: 0, type: all_reduce, size: 1KiB}\n"))
    with pytest.raises(InputError) as info:
        plan_per_size(star(8, shape=LinkShape(rate_bps=10**6)), HostFigures(8, 20_000.0, 10 * GBIT), [],
                      iteration=small)
    assert str(info.value).startswith("time_dilation: the replay: auto dilation needs N >=")
    assert "holds only up to 16" in str(info.value)


def test_cli_experiment_under_auto_replays_at_the_replays_factor(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import contextlib
    import json

    from genie.services import dilation as dilation_service, host_probe
    from genie.services.dilation import replay_iteration
    from genie.testbed import service

    (tmp_path / "step.yaml").write_text(STEP_TRACE)
    spec = tmp_path / "exp.yaml"
    spec.write_text(f"name: step\nworkload: {{trace: step.yaml}}\ntopology: {TOPOLOGIES / 'star-8-100g.yaml'}\n"
                    "algorithms: {all_reduce: ring}\nsweep: {iterations: 1, warmup: 0, grid: [16KiB, 64MiB]}\n"
                    "replay: {iterations: 1, warmup: 0}\n")
    monkeypatch.setattr(host_probe, "measure_host", lambda *_a, **_k: FIGURES)
    up: list[TimeDilation] = []

    @contextlib.contextmanager
    def testbed(topology, *, dilation, links=None, **_k):  # the testbed's description, nothing brought up
        up.append(dilation)
        yield build_plan(topology, "fk-exp", netem_available=True, dilation=dilation, links=links).info

    def stop(_info, **_k):  # where the experiment would first reshape the links: the manifest is written by then
        raise RunFailure("stopped before reshaping the links")

    monkeypatch.setattr(service, "temporary_testbed", testbed)
    monkeypatch.setattr(dilation_service, "SizeDilator", stop)
    result = run_genie("experiment", spec, "--time-dilation", "auto", "--out", tmp_path / "run",
                       env={"GENIE_STATE_DIR": str(tmp_path / "state")})
    assert "stopped before reshaping" in result.stderr, result.stdout + result.stderr
    topology = load_topology_file(TOPOLOGIES / "star-8-100g.yaml")
    replay = choose_dilation(topology, FIGURES, iteration=replay_iteration(_programs(STEP_TRACE)))
    assert replay.factor == 200  # its 16 KiB all-reduce alone would need 1000 (the old rule's replay factor)
    dilation = json.loads((tmp_path / "run" / "manifest.json").read_text())["time_dilation"]
    assert dilation["replay"]["factor"] == replay.factor and dilation["replay"]["reason"] == replay.reason
    # each size weighed on the ring all-reduce the sweep runs there, as genie bench weighs it (one 16 KiB message: 1000)
    assert [(s["size_bytes"], s["factor"]) for s in dilation["per_size"]] == [(16 << 10, 1500), (64 << 20, 200)]
    assert "for the 16KiB all_reduce" in dilation["per_size"][0]["reason"]
    assert [d.factor for d in up] == [1500] and dilation["factor"] == 1500  # up at the smallest size's
    said = result.stdout + result.stderr  # each size's factor and why, and the replay's, before the sweep
    assert "# time dilation per size (docs/dilation.md):\n" in said
    assert f"#   16KiB: time dilation 1500 ({dilation['per_size'][0]['reason']})\n" in said
    assert f"#   64MiB: time dilation 200 ({dilation['per_size'][1]['reason']})\n" in said
    assert f"#   the replay: time dilation 200 ({replay.reason})\n" in said


# ---- a sweep size weighs the collective it runs, not one message of the size ----------------------------------
WIRE_FIGURES = HostFigures(ranks=8, step_us=522.0, aggregate_bps=4 * GBIT, emulator_late_us=184.0)


def _all_to_all(size: int, ranks: int = 8) -> CollectiveOp:
    return CollectiveOp(Collective.ALL_TO_ALL, size, tuple(range(ranks)), Algorithm.DIRECT, dtype_bytes=4)


def test_an_uneven_all_to_alls_sends_leave_the_host_as_their_own_bytes() -> None:
    """All-to-allv: the host's link carries each send's own bytes, not every send at the largest one's size."""
    from genie.services.dilation import collective_steps
    from genie.testbed.dilation_rules import message_floor_us, path_floors, rank_floors

    topology = load_topology_file(TOPOLOGIES / "star-8.yaml")
    floors = path_floors(topology)
    big, small = 512 << 10, 4 << 10
    split = tuple(tuple(0 if i == j else (big if (i, j) == (0, 1) else small) for j in range(8)) for i in range(8))
    op = CollectiveOp(Collective.ALL_TO_ALL, 8 * big, tuple(range(8)), Algorithm.DIRECT, dtype_bytes=4,
                      split_bytes=split)
    (node,) = collective_steps((op,)).ranks[0]
    sent = sorted(size for step in node.steps for _, size in step.sends)
    assert sent == [small] * 6 + [big]
    floor = next(f for f in rank_floors(topology, collective_steps((op,))) if f.rank == 0)
    # rank 0's sends leave at once: 512 KiB + 6 x 4 KiB at 1 Gbit/s (not 7 x 512 KiB), and never less than its
    # largest message's own time between two hosts
    together = sum(8 * message_wire_bytes(n, 1500) for n in sent) / GBIT * 1e6
    assert floor.floor_us == pytest.approx(sum(max(message_floor_us(floors, step.largest_bytes), together)
                                               if len(step.sends) > 1 else message_floor_us(floors, step.largest_bytes)
                                               for step in node.steps))
    assert floor.floor_us < 2 * 8 * message_wire_bytes(big, 1500) / GBIT * 1e6  # far from 7 x the largest


def test_sends_to_ranks_on_the_same_host_do_not_leave_it() -> None:
    """Two ranks per host: an all-to-all's send to the rank beside it stays on the host (no wire), so the
    host's link carries the other six, and the per-step cost still counts all seven messages."""
    from genie.services.dilation import collective_steps
    from genie.testbed.dilation_rules import message_floor_us, path_floors, rank_floors

    shape = LinkShape(rate_bps=GBIT, delay_us=1.0)
    two_per_host = star(4, shape=shape, ranks_per_host=2)
    one_per_host = star(8, shape=shape)
    steps = collective_steps((_all_to_all(1 << 20),))
    (node,) = steps.ranks[0]
    assert [peer for step in node.steps for peer, _ in step.sends] == list(range(1, 8))
    floors = path_floors(two_per_host)
    block = 128 << 10
    six = 6 * 8 * message_wire_bytes(block, 1500) / GBIT * 1e6
    shared = next(f for f in rank_floors(two_per_host, steps) if f.rank == 0)
    alone = next(f for f in rank_floors(one_per_host, steps) if f.rank == 0)
    assert shared.steps == alone.steps == 7
    assert shared.floor_us == pytest.approx(max(message_floor_us(floors, block), six))
    assert alone.floor_us == pytest.approx(7 * 8 * message_wire_bytes(block, 1500) / GBIT * 1e6)


def test_a_step_that_never_leaves_its_host_takes_no_wire_time() -> None:
    """A TP all-reduce whose group sits on one host talks over loopback: its steps still pay the per-step cost,
    but no floor of the stated fabric's links; a ring across the hosts keeps its floor."""
    from genie.services.dilation import collective_steps
    from genie.testbed.dilation_rules import rank_floors

    topology = star(2, shape=LinkShape(rate_bps=GBIT, delay_us=1.0), ranks_per_host=4)
    tp = collective_steps(tuple(CollectiveOp(Collective.ALL_REDUCE, 4 << 20, group, Algorithm.RING, dtype_bytes=4)
                                for group in ((0, 1, 2, 3), (4, 5, 6, 7))))
    assert rank_floors(topology, tp) == []  # every step on its host: no rank has a floor on the fabric
    across = collective_steps((CollectiveOp(Collective.ALL_REDUCE, 4 << 20, (0, 4), Algorithm.RING, dtype_bytes=4),))
    (floor,) = rank_floors(topology, across)[:1]
    assert floor.rank == 0 and floor.floor_us > 0


def test_a_steps_sends_at_once_share_the_hosts_link() -> None:
    from genie.services.dilation import collective_steps
    from genie.testbed.dilation_rules import (host_egress, iteration_floor, message_floor_us, path_floors,
                                              step_floor_us)

    topology = load_topology_file(TOPOLOGIES / "star-8.yaml")  # 1 Gbit/s per host, one link each
    floors, egress = path_floors(topology), host_egress(topology)
    assert egress == (GBIT, 1500)
    steps = collective_steps((_all_to_all(1 << 20),))
    assert steps.label == "1MiB all_to_all" and len(steps.ranks) == 8
    (node,) = steps.ranks[0]
    sends = sum(step.messages for step in node.steps)
    assert sends == 7 and max(step.largest_bytes for step in node.steps) == 128 << 10
    # 7 messages of 128 KiB leave one host at once: at least their bytes at the host's 1 Gbit/s, not one's
    one = message_floor_us(floors, 128 << 10)
    shared = 7 * 8 * message_wire_bytes(128 << 10, 1500) / GBIT * 1e6
    assert step_floor_us(floors, egress, 128 << 10, (128 << 10,) * 7) == pytest.approx(shared) and shared > 6 * one
    assert step_floor_us(floors, egress, 128 << 10, (128 << 10,)) == one  # one send: its message's time, as before
    floor = iteration_floor(topology, steps)
    assert floor.steps == 7 and floor.floor_us == pytest.approx(
        sum(step_floor_us(floors, egress, step.largest_bytes, tuple(size for _, size in step.sends))
            for step in node.steps))
    # a host with an unshaped link bounds nothing
    assert host_egress(star(2, shape=LinkShape(delay_us=1.0))) is None


def test_a_sweep_size_weighs_the_collective_it_runs() -> None:
    from genie.services.bench import BenchRequest, size_steps

    topology = load_topology_file(TOPOLOGIES / "star-8.yaml")
    request = BenchRequest(collectives=(Collective.ALL_TO_ALL,), min_bytes=1 << 20, max_bytes=4 << 20)
    sizes = sweep_sizes(1 << 20, 4 << 20, 2)
    by_message = plan_per_size(topology, WIRE_FIGURES, sizes)
    weighed = plan_per_size(topology, WIRE_FIGURES, sizes, size_steps=size_steps(request, topology))
    # one message of the size: 522 us is 2 % of a 1 MiB message at N = 3, and 2 serves the rest (throughput)
    assert [s.dilation.factor for s in by_message.sizes] == [3, 2, 2]
    # the all-to-all: 7 sends per rank pay the per-step cost, against its least time (7 x 128 KiB on one link)
    assert [s.dilation.factor for s in weighed.sizes] == [25, 15, 6]
    first = weighed.sizes[0].dilation
    assert first.reason == "auto: software needs N >= 23.8 for the 1MiB all_to_all, rounded up"
    software = {limit.name: limit for limit in first.limits}["software"]
    assert "rank 0's 1MiB all_to_all (7 steps in at least 7.676 ms" in software.detail
    assert {limit.name for limit in first.limits} == {"software", "throughput", "emulator"}  # no wake-ups
    # wake-ups measured for an experiment's replay are not a sweep size's: its iterations do not sleep
    woken = plan_per_size(topology, HostFigures(8, 522.0, 4 * GBIT, 184.0, wake_us=50_000.0), sizes,
                          size_steps=size_steps(request, topology))
    assert [s.dilation.factor for s in woken.sizes] == [25, 15, 6]
    # several collectives at a size: the largest factor of them
    both = BenchRequest(collectives=(Collective.ALL_REDUCE, Collective.ALL_TO_ALL), min_bytes=1 << 20,
                        max_bytes=4 << 20)
    mixed = plan_per_size(topology, WIRE_FIGURES, sizes, size_steps=size_steps(both, topology))
    ring = plan_per_size(topology, WIRE_FIGURES, sizes, size_steps=size_steps(
        BenchRequest(min_bytes=1 << 20, max_bytes=4 << 20), topology))
    assert [s.dilation.factor for s in mixed.sizes] == [max(a.dilation.factor, b.dilation.factor)
                                                         for a, b in zip(weighed.sizes, ring.sizes)]
    # too few ranks on the topology for the run: nothing to weigh (the run refuses it itself)
    assert size_steps(BenchRequest(ranks=9), topology) == {}


def test_cli_dry_run_weighs_the_collective(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from genie.services import host_probe

    monkeypatch.setattr(host_probe, "measure_host", lambda *_a, **_k: WIRE_FIGURES)
    for sizes, factors in ((("-b", "1M", "-e", "4M"), [25, 15, 6]), (("-b", "1M", "-e", "1M"), [25])):
        result = run_genie("bench", "--topology", TOPOLOGIES / "star-8.yaml",  # wire links: dilated's default
                           "--time-dilation", "auto", "--collective", "all_to_all", *sizes, "--dry-run")
        assert result.returncode == 0, result.stdout + result.stderr
        rows = [line for line in result.stdout.splitlines() if "N = " in line]
        assert [float(row.split("N = ")[1].split()[0]) for row in rows] == factors
        assert "for the 1MiB all_to_all" in rows[0]


# ---- a running testbed keeps its factor ----------------------------------------------------------------------------
def test_auto_on_a_running_testbed_brought_up_at_auto_says_what_to_do_instead() -> None:
    """`genie testbed up T --time-dilation auto`, then `genie bench --testbed T --time-dilation auto`: refused
    (a running testbed keeps its factor), and the advice is not to bring it up at auto again (which it was)."""
    from genie.cli.flags import RUN_FLAGS, flag_names
    from genie.core.dilation import DilationChoice
    from genie.services.dilation import running_dilation

    up = TimeDilation(500.0, "auto: software needs N >= 490.5 for a 1024-byte message, rounded up")
    info = build_plan(star(2, shape=LinkShape(rate_bps=GBIT)), "fk-auto", netem_available=True, dilation=up).info
    assert running_dilation(info, DilationChoice.parse("500")) == up  # its own factor, given: fine
    with pytest.raises(InputError) as caught, flag_names(RUN_FLAGS):
        running_dilation(info, DilationChoice.parse("auto"))
    message = str(caught.value)
    assert message.startswith("--time-dilation: testbed fk-auto runs at time dilation 500")
    assert "--time-dilation auto`" not in message and "keeps its factor" in message
    assert "give the topology (--topology FILE) instead of the testbed" in message and "\n" not in message
    with pytest.raises(InputError) as caught:  # another fixed factor: bring it up at that one
        running_dilation(info, DilationChoice.parse("10"))
    assert "`genie testbed up --time-dilation 10`" in str(caught.value)


# ---- the report says what each size ran at, and why ------------------------------------------------------------
def test_the_html_report_of_a_per_size_run_names_each_sizes_factor_and_why(tmp_path: Path) -> None:
    """`genie report show` on a bench run under auto: the factor the testbed came up at, each size's and the
    limits auto weighed, from the manifest; a fixed factor in one row; an undilated run none."""
    import json

    from genie.core.collective import Collective
    from genie.report.html import build_page
    from genie.report.rundata import load_run
    from report_runs import bench_run

    topology = load_topology_file(TOPOLOGIES / "star-8-100g.yaml")
    plan = plan_per_size(topology, FIGURES, [1024, 64 << 20])
    t = (100.0, 101.0, 102.0)
    out = bench_run(tmp_path / "b", [(Collective.ALL_REDUCE, 8, 1024, t), (Collective.ALL_REDUCE, 8, 64 << 20, t)])
    manifest = out / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["time_dilation"] = {**plan.first.to_dict(), "per_size": plan.to_dict()}  # what a run under auto records
    manifest.write_text(json.dumps(doc))
    page = build_page(load_run(out)).html
    for entry in plan.sizes:
        assert f"<td>time dilation, {format_size(entry.size_bytes)}</td><td>time dilation " \
               f"{entry.dilation.factor:g} (auto: " in page
    assert plan.sizes[-1].dilation.reason.replace(">", "&gt;") in page
    assert all(f"auto&#39;s limit: {limit.name}" in page for limit in plan.first.limits)
    doc["time_dilation"] = TimeDilation(10.0, "asked for").to_dict()
    manifest.write_text(json.dumps(doc))
    assert "<td>time dilation</td><td>time dilation 10 (asked for)</td>" in build_page(load_run(out)).html
    doc["time_dilation"] = TimeDilation().to_dict()
    manifest.write_text(json.dumps(doc))
    assert "time dilation" not in build_page(load_run(out)).html


def test_a_bench_at_one_factor_says_which_and_why(tmp_path: Path) -> None:
    """A sweep whose sizes share one factor (a fixed one, or auto's for a single size) says it at the end, as a
    replay does; before, only a per-size plan was printed."""
    result = run_genie("bench", "--loopback", "--ranks", "2", "-b", "1K", "-e", "4K", "-n", "1", "-w", "0",
                       "-c", "0", "--time-dilation", "4", "--out", tmp_path / "r")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "\n# time dilation 4 (asked for)\n" in result.stdout
    result = run_genie("bench", "--loopback", "--ranks", "2", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0",
                       "-c", "0", "--out", tmp_path / "u")
    assert result.returncode == 0 and "time dilation" not in result.stdout + result.stderr


def test_putting_the_links_back_never_takes_the_place_of_the_run_s_own_failure() -> None:
    """Ctrl-C while a size runs, and the end-of-sweep reshape fails too: the run is still interrupted (its
    manifest `interrupted`, exit 130), the reshape's failure a note on it (review2 s34)."""
    sizes = [1024, 64 << 20]
    plan = plan_per_size(load_topology_file(TOPOLOGIES / "star-8-100g.yaml"), FIGURES, sizes)
    kernel = KernelModel()
    live = _bucket_testbed(kernel, plan.first)

    def interrupted(part, **kwargs):
        if part[0].op.size_bytes == 64 << 20:
            _delete_root_qdisc(kernel, live)
            raise KeyboardInterrupt
        return _fake_run([])(part, **kwargs)

    with pytest.raises(KeyboardInterrupt) as info:
        run_cases_per_size(_cases(sizes), plan, SizeDilator(live.info, live, scratch=True), interrupted,
                           lambda *row: None)
    assert any("putting testbed fk-gone's links back" in note for note in info.value.__notes__)


def test_an_experiment_s_sweep_leaves_the_links_to_the_replay_s_reshape() -> None:
    """`restore=False`: the sweep ends at its last size's factor (the experiment reshapes to the replay's at
    once, not through the testbed's own factor first: one reshape of every link end a round, not two)."""
    sizes = [1024, 64 << 20]
    plan = plan_per_size(load_topology_file(TOPOLOGIES / "star-8-100g.yaml"), FIGURES, sizes)
    live = _bucket_testbed(KernelModel(), plan.first)
    dilator = SizeDilator(live.info, live, scratch=True)
    run_cases_per_size(_cases(sizes), plan, dilator, _fake_run([]), lambda *row: None, restore=False)
    assert dilator.current == plan.sizes[-1].dilation != plan.first
