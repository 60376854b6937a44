"""The emulated testbed: Topology -> plan of steps (pure) -> pyroute2 backend with an undo log -> live testbed.

Public API (the pyroute2 backend itself lives in `genie.testbed.netlink`, the only module importing pyroute2):

* `plan_testbed(topology, name, *, netem_available, shaper)` -> list of steps, each with `describe()`
* `up(..., shaper=ShaperChoice.AUTO)`, `down`, `down_all`, `status`, `list_testbeds`, `load_info`,
  `register_pids`, `temporary_testbed`, `resolve_shaper`
* `Backend`, `FakeBackend`, `TestbedBackend`, `apply_plan`, `undo_steps`; `signals_raise`, `signals_deferred`
* every service call takes ``environment=`` (`genie.testbed.environment`: `KERNEL`, the machine, by default;
  `FakeEnvironment`, an in-memory `genie.testbed.kernel_model.KernelModel`, for tests without root)
* link emulation without sch_netem: `genie.testbed.userspace` (plan), `genie.testbed.emulators` (processes),
  `genie.linkemu` (the emulator); measuring links: `genie.testbed.verify` (pure), `genie.testbed.verify_run`
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from genie.testbed.backend import Backend, FakeBackend, StepFailed, TestbedBackend, apply_plan, undo_steps
    from genie.testbed.lifecycle import Terminated, signals_deferred, signals_raise
    from genie.testbed.plan import TestbedPlan, build_plan, describe_plan, plan_testbed
    from genie.testbed.service import (down, down_all, list_testbeds, load_info, register_pids, resolve_shaper,
                                       status, temporary_testbed, up)
    from genie.testbed.steps import PlanStep, Shaper, ShaperChoice

#: where each public name lives. The names are imported when first used (PEP 562), so that a program that needs
#: one small module of the package (the probes `genie testbed verify` starts, ~40 of them per check of a
#: leaf-spine) does not import the backend, the kernel model and the topology reader first (0.27 s each time).
_HOME = {
    **dict.fromkeys(["Backend", "FakeBackend", "StepFailed", "TestbedBackend", "apply_plan", "undo_steps"],
                    "backend"),
    **dict.fromkeys(["Terminated", "signals_deferred", "signals_raise"], "lifecycle"),
    **dict.fromkeys(["TestbedPlan", "build_plan", "describe_plan", "plan_testbed"], "plan"),
    **dict.fromkeys(["down", "down_all", "list_testbeds", "load_info", "register_pids", "resolve_shaper", "status",
                     "temporary_testbed", "up"], "service"),
    **dict.fromkeys(["PlanStep", "Shaper", "ShaperChoice"], "steps"),
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


__all__ = [
    "Backend",
    "FakeBackend",
    "PlanStep",
    "Shaper",
    "ShaperChoice",
    "StepFailed",
    "Terminated",
    "TestbedBackend",
    "TestbedPlan",
    "apply_plan",
    "build_plan",
    "describe_plan",
    "down",
    "down_all",
    "list_testbeds",
    "load_info",
    "plan_testbed",
    "register_pids",
    "resolve_shaper",
    "signals_deferred",
    "signals_raise",
    "status",
    "temporary_testbed",
    "undo_steps",
    "up",
]
