"""The peers harness times genie's op alone: the pass whose rows the report shows never records steps."""

from pathlib import Path

from genie.core.collective import Collective

from benchmarks.peers.plan import Iterations, bands
from benchmarks.peers.systems import genie_bench_argv, genie_passes


def test_timed_pass_alone_without_steps():
    (only,) = genie_passes(Path("/w"), 0, "auto", steps=False)
    assert only.timed and not only.record_steps and only.out == Path("/w/genie-0")


def test_step_records_come_from_a_second_untimed_pass():
    timed, recording = genie_passes(Path("/w"), 1, "ring", steps=True)
    assert (timed.timed, timed.record_steps) == (True, False)
    assert (recording.timed, recording.record_steps) == (False, True)
    assert timed.out == Path("/w/genie-ring-1") and recording.out != timed.out and recording.log != timed.log
    # benchmarks.pat_allgather reads the timed passes' sweep.csv by this glob: the recording pass stays out
    assert [p.out.name for p in (timed, recording) if Path(p.out.name).match("genie-ring-[0-9]*")] == ["genie-ring-1"]


def test_argv_of_each_pass():
    (band,) = bands([64, 1024], [(1 << 20, Iterations(20, 300))])
    for p in genie_passes(Path("/w"), 0, "auto", steps=True):
        argv = genie_bench_argv("tb", [Collective.ALL_REDUCE], band, p.out, steps=p.record_steps)
        assert ("--steps" in argv) == p.record_steps
        assert argv[argv.index("-n") + 1] == "300" and argv[argv.index("-w") + 1] == "20"
        assert argv[argv.index("--out") + 1] == str(p.out)
