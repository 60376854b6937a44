"""Runs inside each torchrun rank (``genie trace capture``): the user's script, one step of it traced.

Usage (torchrun's script): ``torch_harness.py --out DIR --warmup N -- SCRIPT ARGS...``. Only torch and the
standard library are imported here (genie need not be importable in the job's environment).

A step ends at each ``Optimizer.step`` (a global post-hook). After ``--warmup`` untraced steps the next one is
traced with ``ExecutionTraceObserver`` + a Kineto CPU profile (``torch.profiler``) inside a
``ProfilerStep#<n>`` range; then the script is stopped (every rank stops after the same step). Each
torch.distributed call made from Python runs inside a ``genie::pg=<group name>`` record_function, so the trace
says which process group the c10d op under it used (gloo records the group as an opaque object) and how long
the call blocked; each ``Work.wait`` runs inside a ``genie::wait`` one (the wait for an asynchronous op). Without a
CUDA device, ``init_process_group`` is given the gloo backend. Per rank the harness writes
``host.<rank>.json`` (execution trace; its process groups recorded again at the end of the step, so a trace
begun before ``new_group`` has them), ``device.<rank>.json`` (Kineto) and ``steps.<rank>.json`` (the
untraced and traced step times, seconds).
"""

from __future__ import annotations

import argparse
import faulthandler
import functools
import json
import os
import runpy
import sys
import time

PG_HINT = "genie::pg="
WAIT_HINT = "genie::wait"
# every torch.distributed call that communicates (names a torch version lacks are skipped); FSDP2 calls
# all_gather_single / reduce_scatter_single (torch >= 2.12)
_WRAPPED = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_single", "_all_gather_base",
            "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single", "_reduce_scatter_base",
            "all_reduce_coalesced", "all_gather_coalesced", "all_to_all", "all_to_all_single", "broadcast", "reduce",
            "gather", "scatter", "barrier", "monitored_barrier", "send", "recv",
            "all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list",
            "send_object_list", "recv_object_list")
# dist.isend/dist.irecv keep their identity (P2POp accepts only those two objects, and batch_isend_irecv tells a
# send from a recv by `op is isend`): their group's point-to-point methods are wrapped instead, which also sees
# the sends and recvs batch_isend_irecv and torch's own code issue
_P2P_METHODS = ("send", "recv", "recv_anysource")


class CaptureDone(BaseException):
    """Raised from the optimizer hook after the traced step: unwinds the user's script."""


def _wrap_collectives(torch, dist) -> None:
    import inspect
    import threading

    inside = threading.local()  # a wrapped call in progress on this thread: calls under it are its own

    def group_name(group) -> str:
        group = group if group is not None else dist.group.WORLD
        name = getattr(group, "group_name", None)
        return str(name) if name is not None else "0"

    def marked(group, fn, args, kwargs):
        if getattr(inside, "depth", 0):
            return fn(*args, **kwargs)
        inside.depth = 1
        try:
            with torch.autograd.profiler.record_function(PG_HINT + group_name(group)):
                return fn(*args, **kwargs)
        finally:
            inside.depth = 0

    for fname in _WRAPPED:
        fn = getattr(dist, fname, None)
        if fn is None:
            continue
        sig = inspect.signature(fn)

        def wrapper(*args, __fn=fn, __sig=sig, **kwargs):
            try:
                group = __sig.bind_partial(*args, **kwargs).arguments.get("group")
            except TypeError:
                group = None
            return marked(group, __fn, args, kwargs)

        functools.update_wrapper(wrapper, fn)
        setattr(dist, fname, wrapper)
    for method in _P2P_METHODS:
        fn = getattr(dist.ProcessGroup, method, None)
        if fn is None:
            continue

        def p2p(self, *args, __fn=fn, **kwargs):
            return marked(self, __fn, (self, *args), kwargs)

        functools.update_wrapper(p2p, fn)
        setattr(dist.ProcessGroup, method, p2p)
    work = getattr(dist, "Work", None)
    if work is not None and hasattr(work, "wait"):  # the time a rank waits for an asynchronous op it issued
        original_wait = work.wait

        @functools.wraps(original_wait)
        def wait(self, *args, **kwargs):
            with torch.autograd.profiler.record_function(WAIT_HINT):
                return original_wait(self, *args, **kwargs)

        work.wait = wait


def _force_gloo(torch, dist) -> None:
    original = dist.init_process_group

    @functools.wraps(original)
    def init(*args, **kwargs):
        if not torch.cuda.is_available():
            args = args[1:] if args and isinstance(args[0], str) else args
            kwargs["backend"] = "gloo"
        return original(*args, **kwargs)

    dist.init_process_group = init


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="torch_harness")
    parser.add_argument("--out", required=True)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    opts = parser.parse_args(argv)
    faulthandler.enable()  # a rank that crashes in C (SIGSEGV, SIGABRT) says where, in torchrun's log
    import torch
    import torch.distributed as dist
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile

    rank = int(os.environ.get("RANK", "0"))
    os.makedirs(opts.out, exist_ok=True)
    _force_gloo(torch, dist)
    _wrap_collectives(torch, dist)
    state = {"steps": 0, "last": time.perf_counter(), "untraced": [], "traced": None, "prof": None, "et": None,
             "range": None}

    def begin() -> None:
        et = ExecutionTraceObserver()
        et.register_callback(os.path.join(opts.out, f"host.{rank}.json"))
        prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True, execution_trace_observer=et)
        prof.start()
        rng = torch.autograd.profiler.record_function(f"ProfilerStep#{state['steps']}")
        rng.__enter__()
        state.update(prof=prof, et=et, range=rng)

    def end() -> None:
        state["range"].__exit__(None, None, None)
        # the groups again, as the observer records them when it starts: a trace begun before init_process_group
        # and new_group (--warmup 0) has none of them at its start, only their genie::pg= markers
        state["et"]._record_pg_config()
        state["prof"].stop()
        state["prof"].export_chrome_trace(os.path.join(opts.out, f"device.{rank}.json"))
        state["et"].stop()
        state["et"].unregister_callback()

    def after_step(_optimizer, _args, _kwargs) -> None:
        now = time.perf_counter()
        took, state["last"] = now - state["last"], now
        state["steps"] += 1
        if state["prof"] is not None:
            state["traced"] = took
            end()
            raise CaptureDone()
        state["untraced"].append(took)
        if state["steps"] == opts.warmup:
            begin()
            state["last"] = time.perf_counter()

    from torch.optim.optimizer import register_optimizer_step_post_hook
    register_optimizer_step_post_hook(after_step)
    if opts.warmup == 0:
        begin()
    script = os.path.abspath(opts.script)
    sys.argv = [script, *opts.args]
    sys.path.insert(0, os.path.dirname(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except CaptureDone:
        pass
    if state["traced"] is None:
        print(f"CaptureError: the script made {state['steps']} optimizer step(s); it needs {opts.warmup + 1} "
              f"({opts.warmup} untraced, 1 traced)", file=sys.stderr)
        return 3
    with open(os.path.join(opts.out, f"steps.{rank}.json"), "w") as f:
        json.dump({"untraced_step_s": state["untraced"], "traced_step_s": state["traced"]}, f)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
