"""Issue #18: numbers that overflow, absurd counts and rates, bad timeouts and silently accepted options are
refused when they are read, with the limit in the message and nothing created."""

from __future__ import annotations

from pathlib import Path

import pytest

from genie.core.limits import MAX_RANKS, MAX_TRACE_RANKS
from genie.core.protocol import BenchJob, Setup, decode_message, encode_message
from genie.core.units import parse_rate_bps, parse_size_bytes, parse_time_ns
from tests.hostile_support import assert_refused, run_capped, run_cli, tree

LINK = "name: t\nhosts: [h0, h1]\nlinks: [{{endpoints: [h0, h1], {key}: {value}}}]\n"


@pytest.mark.parametrize("parse, text, message", [
    (parse_rate_bps, "1e400gbit", "too large a number"),
    (parse_rate_bps, "1e300tbit", "at most 10tbit"),
    (parse_rate_bps, "99999999999tbit", "at most 10tbit"),
    (parse_time_ns, "1e400ms", "too large a number"),
    (parse_time_ns, "1e300s", "at most 30 days"),
    (parse_size_bytes, "1e400G", "too large a number"),
    (parse_size_bytes, 1 << 50, "at most 1TiB"),
])
def test_units_refuse_overflow_with_a_value_error(parse, text, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse(text)


@pytest.mark.parametrize("key, value, message", [
    ("bandwidth", "1e400gbit", "links[0].bandwidth: expected a rate such as"),
    ("delay", "1e400ms", "links[0].delay: expected a time such as"),
    ("bandwidth", "99999999999tbit", "links[0].bandwidth: expected a rate of at most 10tbit"),
])
def test_a_topology_with_an_overflowing_value_is_refused(tmp_path: Path, key: str, value: str, message: str) -> None:
    topology = tmp_path / "t.yaml"
    topology.write_text(LINK.format(key=key, value=value))
    assert_refused(run_cli(["testbed", "up", str(topology), "--dry-run"]), f"t.yaml: {message}", max_lines=1)


@pytest.mark.parametrize("fault, message", [
    ("{kind: degrade, link: h0-s0, rate: 1e400mbit, at: 1s}", "faults[0].rate: expected a rate such as"),
    ("{kind: degrade, link: h0-s0, rate: 1mbit, at: 1e400s}", "faults[0].at: expected a time such as"),
])
def test_a_fault_with_an_overflowing_value_is_refused(tmp_path: Path, fault: str, message: str) -> None:
    faults = tmp_path / "f.yaml"
    faults.write_text(f"faults:\n  - {fault}\n")
    outcome = run_cli(["bench", "--loopback", "--faults", str(faults), "--out", str(tmp_path / "run")])
    assert_refused(outcome, f"f.yaml: {message}", max_lines=1)
    assert tree(tmp_path) == {"f.yaml"}


def test_a_trace_duration_that_overflows_is_refused(tmp_path: Path) -> None:
    trace = tmp_path / "t.yaml"
    trace.write_text("format: genie-trace\nranks: 2\nprogram:\n  - {id: 1, type: compute, duration: 1e400us}\n")
    assert_refused(run_cli(["trace", "show", str(trace)]), "t.yaml: program[0].duration: expected a time",
                   max_lines=1)


def test_a_billion_ranks_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    topology = tmp_path / "t.yaml"
    topology.write_text("name: t\nhosts: [{name: h0, ranks: 1000000000}, h1]\nlinks: [{endpoints: [h0, h1]}]\n")
    for argv in (["testbed", "up", str(topology), "--dry-run"],
                 ["bench", "--topology", str(topology), "--out", str(tmp_path / "run")]):
        outcome = run_capped(argv, cwd=tmp_path, timeout_s=30)
        assert_refused(outcome, "t.yaml: hosts[0].ranks", f"at most {MAX_RANKS} ranks", max_lines=1)
    assert tree(tmp_path) == {"t.yaml"}


def test_a_topology_whose_hosts_add_up_to_too_many_ranks_is_refused(tmp_path: Path) -> None:
    topology = tmp_path / "t.yaml"
    topology.write_text("name: t\nhosts: [{prefix: h, count: 2, ranks: 4000}]\nswitches: [s0]\n"
                        "links: [{endpoints: [h0, s0]}, {endpoints: [h1, s0]}]\n")
    assert_refused(run_cli(["testbed", "up", str(topology), "--dry-run"]), "t.yaml: hosts[0]: the hosts so far "
                   f"have 8000 ranks; genie runs at most {MAX_RANKS}", max_lines=1)


def test_an_inventory_and_a_trace_with_a_billion_ranks_are_refused(tmp_path: Path) -> None:
    inventory = tmp_path / "i.yaml"
    inventory.write_text("hosts: [{name: h0, address: 198.18.0.1, ranks: 1000000000}]\n")
    outcome = run_capped(["bench", "--inventory", str(inventory), "--launcher", "mpi"], cwd=tmp_path, timeout_s=30)
    assert_refused(outcome, "i.yaml: hosts[0].ranks", f"at most {MAX_RANKS} ranks", max_lines=1)
    trace = tmp_path / "t.yaml"
    trace.write_text("format: genie-trace\nranks: 1000000000\nprogram: [{id: 1, type: compute, duration: 1us}]\n")
    outcome = run_capped(["trace", "show", str(trace)], cwd=tmp_path, timeout_s=30)
    assert_refused(outcome, "t.yaml: ranks:", f"(1 to {MAX_TRACE_RANKS})", max_lines=1)


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "1e400"])
@pytest.mark.parametrize("command", [["bench", "--loopback"], ["replay", "{trace}", "--loopback"]])
def test_a_timeout_that_is_not_a_positive_finite_number_is_refused_before_the_run(
        tmp_path: Path, command: list[str], value: str) -> None:
    trace = tmp_path / "t.yaml"
    trace.write_text("format: genie-trace\nranks: 2\nprogram: [{id: 1, type: compute, duration: 1us}]\n")
    argv = [a.format(trace=trace) for a in command] + ["--timeout", value, "--out", str(tmp_path / "run")]
    assert_refused(run_cli(argv), "--timeout: must be a number of seconds above 0", max_lines=1)
    assert tree(tmp_path) == {"t.yaml"}


def test_connection_setup_takes_the_op_timeout_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from genie.engine import rank

    job = BenchJob(cases=(), timeout_s=7.0)
    setup = decode_message(encode_message(Setup(addresses={0: ("127.0.0.1", 1)}, job=job)))
    assert setup.connect_timeout_s is None
    seen: list[float] = []

    def connect_mesh(*_args, timeout_s: float, **_kwargs):
        seen.append(timeout_s)
        raise RuntimeError("stop here")

    monkeypatch.setattr(rank, "connect_mesh", connect_mesh)
    with socket.socket() as listener:
        for connect_timeout_s, expected in ((setup.connect_timeout_s, 7.0), (3.0, 3.0)):
            with pytest.raises(RuntimeError, match="stop here"):
                rank.run_job_over_tcp(job, 0, listener, setup.addresses, None, {},  # type: ignore[arg-type]
                                      connect_timeout_s=connect_timeout_s)
    assert seen == [7.0, 3.0]


@pytest.mark.parametrize("argv, message", [
    (["bench", "--loopback", "--ranks", "0"], "--ranks: must be between 1 and"),
    (["bench", "--loopback", "--ranks", "100000"], "--ranks: must be between 1 and"),
    (["bench", "--loopback", "-c", ""], "--collective: names no collective"),
    (["bench", "--loopback", "--iters", "100000000"], "must be at most 1000000"),
])
def test_bench_options_that_were_silently_replaced_are_refused(tmp_path: Path, argv: list[str], message: str) -> None:
    assert_refused(run_cli(argv + ["--out", str(tmp_path / "run")]), message, max_lines=1)
    assert tree(tmp_path) == set()
