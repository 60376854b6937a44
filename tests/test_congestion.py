"""The ranks' TCP congestion control follows the time dilation (genie.core.congestion): the rule, the setup
message that carries it, and the services that choose it for a session (no root: loopback ranks in threads)."""

from __future__ import annotations

import socket

import pytest

from genie.core.collective import Algorithm, Collective
from genie.core.congestion import CongestionControl, congestion_control_for
from genie.core.dilation import NO_DILATION, TimeDilation
from genie.core.protocol import BenchCase, BenchJob, Setup, decode_message, encode_message
from genie.core.schedule import CollectiveOp
from genie.engine.inprocess import thread_sessions
from genie.engine.session import SessionOptions
from genie.services.cases import GroupCase, run_cases
from genie.services.target import loopback_placements


def test_cubic_undilated_and_reno_under_any_dilation() -> None:
    assert congestion_control_for(1.0) is CongestionControl.CUBIC
    assert congestion_control_for(0.5) is CongestionControl.CUBIC
    assert congestion_control_for(1.01) is CongestionControl.RENO
    assert congestion_control_for(1000.0) is CongestionControl.RENO


def test_the_setup_message_carries_it_and_defaults_to_cubic() -> None:
    setup = Setup(addresses={0: ("127.0.0.1", 1)}, job=_bench_job(), congestion_control=CongestionControl.RENO)
    doc = encode_message(setup)
    assert doc["congestion_control"] == "reno" and decode_message(doc) == setup
    del doc["congestion_control"]  # an orchestrator of before the field
    assert decode_message(doc).congestion_control is CongestionControl.CUBIC


def _bench_job() -> BenchJob:
    return BenchJob(cases=(BenchCase(op=CollectiveOp(Collective.ALL_REDUCE, 1024, (0, 1), Algorithm.RING,
                                                     dtype_bytes=4), warmup=0, iterations=1),))


def _available(congestion: CongestionControl) -> bool:
    with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as handle:
        return congestion.value in handle.read().split()


@pytest.mark.parametrize("dilation, expected", [(NO_DILATION, CongestionControl.CUBIC),
                                                (TimeDilation(30.0, "asked for"), CongestionControl.RENO)])
def test_a_bench_session_gets_its_dilations_congestion_control(dilation, expected) -> None:
    if not _available(expected):
        pytest.skip(f"{expected.value} is not available on this kernel")
    seen: list[SessionOptions] = []
    algorithms: set[bytes] = set()
    threads = thread_sessions()

    def sessions(placements, options: SessionOptions):
        seen.append(options)
        return threads(placements, options)

    import genie.engine.links as links

    tune = links._tune

    def spy(sock: socket.socket, buffer_bytes, congestion) -> None:  # what the sockets were really given
        tune(sock, buffer_bytes, congestion)
        algorithms.add(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0"))

    op = CollectiveOp(Collective.ALL_REDUCE, 4096, (0, 1), Algorithm.RING, dtype_bytes=4)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(links, "_tune", spy)
        outcome = run_cases([GroupCase((op,), 1, 2)], loopback_placements(2), sessions=sessions, dilation=dilation)
    assert [o.congestion for o in seen] == [expected]
    assert algorithms == {expected.value.encode()}
    assert len(outcome.stats) == 1
