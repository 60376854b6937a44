"""What the testbed service acts on: the `TestbedEnvironment` protocol and the real machine behind it.

The service (`genie.testbed.service`) never reaches for the kernel itself: it asks an environment for a backend
that applies and undoes plan steps, and for the namespace probes and process ends of teardown. `KERNEL` is the
machine (pyroute2, imported on first use, plus the userspace emulator backend); `genie.testbed.kernel_model`
models the same objects in memory, and `FakeEnvironment` here drives the real service with it, without root.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Protocol

from genie.core.process import own_status_field
from genie.testbed.backend import Backend, FakeBackend, TestbedBackend
from genie.testbed.emulators import (EmulatorBackend, EmulatorProcess, end_emulators, is_running, reap_children,
                                     userspace_problem)
from genie.testbed.kernel_model import KernelModel
from genie.testbed.lifecycle import terminate_pids
from genie.testbed.observed import NamespaceStatus
from genie.testbed.steps import PlanStep

CAP_NET_ADMIN_BIT = 12
KILL_GRACE_S = 1.0
OnStarted = Callable[[EmulatorProcess], None]


class TestbedEnvironment(Protocol):
    """Where testbeds are built: a backend for the steps, and the probes and process ends around it."""

    __test__ = False  # not a pytest test class

    def backend(self, testbed: str, on_started: OnStarted | None = None) -> AbstractContextManager[Backend]:
        """A backend applying and undoing the steps of `testbed`; ``on_started`` is told of every link
        emulator started (before it is waited for)."""

    def has_net_admin(self) -> bool:
        """May this process change namespaces (CAP_NET_ADMIN)?"""

    def netem_listed(self) -> bool:
        """Does this kernel list sch_netem (loaded, built in or installed)? Changes nothing: what a dry run
        asks instead of `probe_netem`, which adds a qdisc in a scratch namespace."""

    def probe_netem(self) -> bool:
        """Can a netem qdisc be added here?"""

    def userspace_problem(self) -> str | None:
        """Why the userspace shaper cannot run here, or None."""

    def netns_exists(self, name: str) -> bool: ...

    def namespace_identity(self, name: str) -> tuple[int, int] | None:
        """(device, inode) of namespace `name` (`genie.testbed.namespaces.identity`), None if it does not exist."""

    def namespace_pids(self, name: str) -> list[int]:
        """PIDs of the processes inside namespace `name`."""

    def list_genie_namespaces(self) -> list[str]:
        """Every namespace carrying genie's prefix, sorted."""

    def remove_namespace(self, name: str) -> bool:
        """Remove namespace `name`; False if it did not exist."""

    def inspect_namespace(self, name: str) -> NamespaceStatus: ...

    def end_processes(self, pids: list[int]) -> list[int]:
        """End the processes (by PID, never oneself); returns those that were ended."""

    def end_emulators(self, processes: list[EmulatorProcess]) -> list[int]:
        """End the link emulators still running (PID and start time must match)."""

    def emulator_running(self, process: EmulatorProcess) -> bool: ...


def has_net_admin() -> bool:
    effective = own_status_field("CapEff")
    if effective is None:
        return os.geteuid() == 0
    return bool(int(effective, 16) >> CAP_NET_ADMIN_BIT & 1)


def netem_listed() -> bool:
    """sch_netem loaded, or listed among this kernel's built-in or installed modules; True when the kernel's
    module lists cannot be read (as a dry run without root assumes)."""
    if os.path.exists("/sys/module/sch_netem"):
        return True
    modules = os.path.join("/lib/modules", os.uname().release)
    listed = False
    for name in ("modules.builtin", "modules.dep"):
        try:
            with open(os.path.join(modules, name)) as lines:
                listed = True
                if any("sch_netem" in line for line in lines):
                    return True
        except OSError:
            continue
    return not listed


class KernelEnvironment:
    """This machine: steps through pyroute2 (`genie.testbed.netlink`) and the userspace emulator backend."""

    __test__ = False

    @contextmanager
    def backend(self, testbed: str, on_started: OnStarted | None = None) -> Iterator[Backend]:
        with _netlink().NetlinkBackend() as netlink_backend:
            yield TestbedBackend(netlink_backend, EmulatorBackend(testbed, on_started=on_started))

    def has_net_admin(self) -> bool:
        return has_net_admin()

    def probe_netem(self) -> bool:
        return bool(_netlink().probe_netem())

    def netem_listed(self) -> bool:
        return netem_listed()

    def userspace_problem(self) -> str | None:
        return userspace_problem()

    def netns_exists(self, name: str) -> bool:
        from genie.testbed.namespaces import netns_exists

        return netns_exists(name)

    def namespace_identity(self, name: str) -> tuple[int, int] | None:
        from genie.testbed.namespaces import identity

        return identity(name)

    def namespace_pids(self, name: str) -> list[int]:
        from genie.testbed.namespaces import namespace_pids

        return namespace_pids(name)

    def list_genie_namespaces(self) -> list[str]:
        return list(_netlink().list_genie_namespaces())

    def remove_namespace(self, name: str) -> bool:
        return bool(_netlink().remove_namespace(name))

    def inspect_namespace(self, name: str) -> NamespaceStatus:
        status: NamespaceStatus = _netlink().inspect_namespace(name)
        return status

    def end_processes(self, pids: list[int]) -> list[int]:
        ended = terminate_pids(pids, grace_s=KILL_GRACE_S)
        reap_children()
        return ended

    def end_emulators(self, processes: list[EmulatorProcess]) -> list[int]:
        return end_emulators(processes)

    def emulator_running(self, process: EmulatorProcess) -> bool:
        return is_running(process)


KERNEL = KernelEnvironment()


@dataclass
class FakeEnvironment:
    """The service's environment in memory: every backend is a `FakeBackend` on the one ``kernel`` model
    (``fail_at`` / ``fail_undo`` are handed to each backend made; ``backends`` keeps them, for their calls).
    Processes are the model's: nothing is ever signalled. ``ended`` lists every PID the service asked to end."""

    __test__ = False

    kernel: KernelModel = field(default_factory=KernelModel)
    netem: bool = True
    net_admin: bool = True
    fail_at: int | None = None
    fail_undo: frozenset[PlanStep] = frozenset()
    backends: list[FakeBackend] = field(default_factory=list)
    ended: list[int] = field(default_factory=list)
    probes: int = 0  # probe_netem calls (each would make a scratch namespace on a real kernel)

    @contextmanager
    def backend(self, testbed: str, on_started: OnStarted | None = None) -> Iterator[Backend]:
        def started(pid: int, netns: str) -> None:
            if on_started is not None:
                on_started(EmulatorProcess(netns, pid, pid))

        backend = FakeBackend(fail_at=self.fail_at, fail_undo=self.fail_undo, kernel=self.kernel, on_started=started)
        self.backends.append(backend)
        yield backend

    def has_net_admin(self) -> bool:
        return self.net_admin

    def probe_netem(self) -> bool:
        self.probes += 1
        return self.netem

    def netem_listed(self) -> bool:
        return self.netem

    def userspace_problem(self) -> str | None:
        return None

    def netns_exists(self, name: str) -> bool:
        return self.kernel.netns_exists(name)

    def namespace_identity(self, name: str) -> tuple[int, int] | None:
        return self.kernel.namespace_identity(name)

    def namespace_pids(self, name: str) -> list[int]:
        return self.kernel.namespace_pids(name)

    def list_genie_namespaces(self) -> list[str]:
        return self.kernel.genie_namespaces()

    def remove_namespace(self, name: str) -> bool:
        return self.kernel.remove_namespace(name)

    def inspect_namespace(self, name: str) -> NamespaceStatus:
        return self.kernel.inspect_namespace(name)

    def end_processes(self, pids: list[int]) -> list[int]:
        self.ended += pids
        return self.kernel.end_processes(pids)

    def end_emulators(self, processes: list[EmulatorProcess]) -> list[int]:
        return self.end_processes([p.pid for p in processes if self.emulator_running(p)])

    def emulator_running(self, process: EmulatorProcess) -> bool:
        return process.pid in self.kernel.processes


def _netlink() -> ModuleType:
    """The pyroute2 backend, imported on first use: pyroute2 takes ~0.3 s to import, and only commands that
    touch the kernel should pay for it."""
    from genie.testbed import netlink

    return netlink
