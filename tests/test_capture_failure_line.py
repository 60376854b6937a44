"""The one line `genie trace capture` prints for a failed job (`_failure_line`), on torchrun's output as torch
2.13 writes it: a Python error, a rank killed by a signal, a rank exiting with a code and no error of its own."""

from __future__ import annotations

from genie.services.trace_capture import _failure_line


def _torchrun_tail(rank: int, exitcode: int, pid: int, signal_name: str) -> str:
    """torchrun's ChildFailedError summary (torch/distributed/elastic/multiprocessing/errors)."""
    sig = f" ({signal_name})" if signal_name else ""
    return ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
            "======================================================\n"
            "/work/genie/capture/torch_harness.py FAILED\n"
            "------------------------------------------------------\n"
            "Failures:\n  <NO_OTHER_FAILURES>\n"
            "------------------------------------------------------\n"
            "Root Cause (first observed failure):\n[0]:\n"
            "  time      : 2026-12-05_17:00:20\n  host      : localhost\n"
            f"  rank      : {rank} (local_rank: {rank})\n"
            f"  exitcode  : {exitcode} (pid: {pid}) {sig}\n"
            "  error_file: <N/A>\n"
            "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
            "======================================================")


def test_a_python_error_is_the_line_with_its_rank_after_it() -> None:
    text = ("Traceback (most recent call last):\n  File \"crash.py\", line 6\n"
            "RuntimeError: boom: rank 1 fell over\n" + _torchrun_tail(1, 1, 4242, ""))
    assert _failure_line(text) == "RuntimeError: boom: rank 1 fell over (rank 1 (pid 4242) exited with code 1)"


def test_a_rank_exiting_without_an_error_is_named_not_the_banner() -> None:
    assert _failure_line(_torchrun_tail(3, 1, 77, "")) == "rank 3 (pid 77) exited with code 1"


def test_a_signal_comes_first_then_the_errors_it_caused() -> None:
    text = ("[rank0]: RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer\n"
            + _torchrun_tail(2, -9, 1957, "SIGKILL"))
    assert _failure_line(text) == ("rank 2 (pid 1957) was killed by SIGKILL; RuntimeError: "
                                   "[gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer")


def test_a_cxx_abort_says_what_was_thrown() -> None:
    text = ("terminate called after throwing an instance of 'c10::Error'\n"
            + _torchrun_tail(0, -6, 12, "SIGABRT"))
    assert _failure_line(text) == ("rank 0 (pid 12) was killed by SIGABRT; "
                                   "terminate called after throwing an instance of 'c10::Error'")


def test_output_without_torchruns_summary_falls_back_to_its_last_line() -> None:
    assert _failure_line("starting\nsomething odd happened\n") == "something odd happened"
    assert _failure_line("") == "no output"


def test_a_segfault_names_its_signal_and_faulthandlers_line() -> None:
    text = ("Fatal Python error: Segmentation fault\n\nThread 0x00007f (most recent call first):\n"
            "  File \"torch_harness.py\", line 190 in main\n" + _torchrun_tail(1, -11, 99, "SIGSEGV"))
    assert _failure_line(text) == "rank 1 (pid 99) was killed by SIGSEGV; Fatal Python error: Segmentation fault"
