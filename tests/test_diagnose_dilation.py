"""`genie diagnose` under time dilation (issue #36): its bandwidth test and op timeouts are sized in real time, so
a dilated testbed's diagnosis ends in a time stated up front (8 MiB per transfer at 1 Gbit/s / 400 was 28 s
real, 105 min for an 8-host star's first pass). Pure: a fake session, no root."""

from __future__ import annotations

import pytest

from genie.core.dilation import NO_DILATION, TimeDilation
from genie.core.errors import RunFailure
from genie.core.testbed import HostEndpoint
from genie.core.testbed import TestbedInfo as Info
from genie.core.topology import LinkShape
from genie.services.diagnose import DiagnoseRequest, plan_diagnose, run_diagnose
from genie.topology import star

GBIT = 10**9


def _star8(dilation: TimeDilation = NO_DILATION) -> Info:
    topology = star(8, shape=LinkShape(rate_bps=GBIT))
    hosts = tuple(HostEndpoint(h.name, None, "127.0.0.1") for h in topology.hosts)
    return Info("dd", "genie-dd", topology, hosts, dilation=dilation)


class _Stop(RunFailure):
    pass


def _jobs_sent(info: Info, request: DiagnoseRequest = DiagnoseRequest()):
    """What run_diagnose gives rank 0 (its job's cases) and the session's options; nothing runs."""
    seen = {}

    class Session:
        def run(self, job, on_case=None):
            seen["job"] = job(0)
            raise _Stop("stop")

    def sessions(placements, options):
        seen["options"] = options
        return Session()

    with pytest.raises(_Stop):
        run_diagnose(info, request, sessions=sessions)
    return seen["job"], seen["options"]


def test_at_400_the_bandwidth_test_lasts_half_a_second_real_and_every_wait_is_bounded() -> None:
    info = _star8(TimeDilation(400.0))
    plan = plan_diagnose(info)
    # 8 MiB at 2.5 Mbit/s real is 28 s a transfer; 128 KiB (0.44 s) is the largest power of two under 0.5 s
    assert plan.bandwidth_bytes == 128 << 10 and plan.transfer_real_s == pytest.approx(0.441, abs=0.001)
    assert plan.pairs == 56 and plan.wire_real_s < 180  # 224 transfers and 1232 latency exchanges on the wires
    assert "not 8MiB" in plan.describe(info.dilation) and "--size" in plan.describe(info.dilation)
    job, options = _jobs_sent(info)
    bandwidth = [case for case in job.cases if case.op.size_bytes > 1024]
    assert {case.op.size_bytes for case in bandwidth} == {128 << 10}
    assert job.timeout_s == pytest.approx(60 + 100 * plan.transfer_real_s)  # real s (it was 60 x 400 = 6.7 h)
    assert options.idle_timeout_s <= 23 * 105  # the orchestrator's backstop: every case's ops at their timeout


def test_a_size_asked_for_is_kept_and_its_time_stated() -> None:
    info = _star8(TimeDilation(400.0))
    plan = plan_diagnose(info, DiagnoseRequest(bandwidth_bytes=8 << 20))
    assert plan.bandwidth_bytes == 8 << 20 and plan.transfer_real_s > 27
    assert "bandwidth test 8MiB (28.07 s real per transfer); at least 105 min real" in plan.describe(info.dilation)


def test_an_undilated_diagnosis_is_unchanged() -> None:
    plan = plan_diagnose(_star8())
    assert (plan.bandwidth_bytes, plan.op_timeout_s) == (8 << 20, 60.0)
    job, _ = _jobs_sent(_star8())
    assert {case.op.size_bytes for case in job.cases if case.op.size_bytes > 1024} == {8 << 20}
    assert job.timeout_s == 60.0
