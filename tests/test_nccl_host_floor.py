"""One host thread launching a call on several GPUs (nccl-tests -g N): the reader tells such runs, the model times
their calls as the longer of the host's launches and the GPUs' time, and the fit reads the floor off the small sizes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from genie.core.collective import Collective
from genie.measure.nccl_output import parse_nccl_tests

from astra_adapter.nccl.fit import Observation, fit
from astra_adapter.nccl.hardware import Cluster, Interconnect
from astra_adapter.nccl.model import Call, host_bound_us, nominal_params, predict
from astra_adapter.nccl.observations import table_observations

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "real-nccl"
A100 = Cluster("dgx-a100", 1, 8, "A100", 80, Interconnect.NVSWITCH, 240.0, 0.5, 8, 25.0, 1.0)
_ROWS = """#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024           256   float     sum    36.07    0.03    0.05    N/A    35.77    0.03    0.05    N/A
"""


def _devices(pids: list[int]) -> str:
    return "# Using devices\n" + "".join(f"#   Rank {r} Pid {p} on host device {r} [0x00] A100-SXM4-40GB\n"
                                         for r, p in enumerate(pids))


def test_the_reader_tells_one_thread_driving_several_gpus():
    table = parse_nccl_tests((DATA / "superbench-a100sxm4-40g-8gpu-1node" / "all_reduce-8r.txt").read_bytes(),
                             source="sb").tables[0]
    assert table.gpus_per_thread == 8 and {d.pid for d in table.devices} == {112424}
    # a process per GPU (mpirun): nGpus 1 in the header
    multi = parse_nccl_tests((DATA / "xxrjun-cluster01-h100-8gpu-1node" / "all_gather-8r.txt").read_bytes(),
                             source="mp").tables[0]
    assert multi.gpus_per_thread == 1 and len({d.pid for d in multi.devices}) == 8
    # no header: the ranks sharing a process; pids differ per rank: 1
    shared = parse_nccl_tests((_devices([7, 7, 7, 7]) + _ROWS).encode(), source="x", collective=Collective.ALL_REDUCE)
    apart = parse_nccl_tests((_devices([7, 8, 9, 10]) + _ROWS).encode(), source="x",
                             collective=Collective.ALL_REDUCE)
    assert shared.tables[0].gpus_per_thread == 4 and apart.tables[0].gpus_per_thread == 1
    # the header's nGpus wins (-t 2 -g 2: one process, each thread launches on 2 GPUs)
    threads = parse_nccl_tests(("# nThread 2 nGpus 2 minBytes 8 maxBytes 8 step: 2(factor)\n" + _devices([7] * 4)
                                + _ROWS).encode(), source="x", collective=Collective.ALL_REDUCE)
    assert threads.tables[0].gpus_per_thread == 2


def test_a_call_launched_by_one_thread_on_several_gpus_takes_the_longer_of_host_and_gpus():
    params = replace(nominal_params(A100), launch_per_gpu_us=4.0)
    for size in (8, 1 << 16, 1 << 30):
        alone = predict(A100, params, Call(Collective.ALL_REDUCE, 8, 1, size))
        shared = predict(A100, params, Call(Collective.ALL_REDUCE, 8, 1, size, gpus_per_thread=8))
        assert shared.time_us == pytest.approx(max(32.0, alone.time_us))
        assert shared.choice == alone.choice
    small = Call(Collective.ALL_TO_ALL, 8, 1, 1024, gpus_per_thread=8)
    assert predict(A100, params, small).time_us == 32.0  # the send/receive operations too
    assert host_bound_us(params, replace(small, gpus_per_thread=1), 5.0) == 5.0  # a thread per GPU: no floor
    assert predict(A100, params, Call(Collective.ALL_REDUCE, 8, 1, 1 << 30, gpus_per_thread=8)).time_us > 32.0


def test_the_fit_reads_the_host_floor_off_the_small_sizes():
    truth = replace(nominal_params(A100), launch_per_gpu_us=4.3, latency_scale=1.5, intra_busbw_gb_s=230.0)
    sizes = [1 << k for k in range(3, 34, 2)]
    obs = [Observation(c, predict(A100, truth, c).time_us)
           for c in (Call(Collective.ALL_REDUCE, 8, 1, s, gpus_per_thread=8) for s in sizes)]
    assert obs[0].measured_us == pytest.approx(8 * 4.3)  # the smallest sizes sit on the floor
    result = fit(A100, obs)
    assert "launch_per_gpu_us" in result.fitted
    assert result.params.launch_per_gpu_us == pytest.approx(4.3, rel=0.01)
    assert result.rms_error_pct < 1.0
    # a thread per GPU: the floor is not seen and stays nominal
    alone = fit(A100, [Observation(replace(o.call, gpus_per_thread=1), o.measured_us) for o in obs])
    assert "launch_per_gpu_us" not in alone.fitted


def test_superbench_observations_carry_the_run_shape():
    case = DATA / "superbench-a100sxm4-40g-8gpu-1node"
    table = parse_nccl_tests((case / "alltoall-8r.txt").read_bytes(), source="sb",
                             collective=Collective.ALL_TO_ALL).tables[0]
    obs = table_observations(table, A100, max_nodes=1)
    assert obs and all(o.call.gpus_per_thread == 8 for o in obs)
