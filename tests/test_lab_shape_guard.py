"""`genie lab shape` changes the real network of the machine it runs on: it acts only inside the lab VM it is
told it is (its hostname, as Vagrant set it), and refuses before probing or changing anything elsewhere. Fakes
only: every function that would reach this machine's network is replaced, and the tests fail if one is called
where it must not be."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest

from genie.core.errors import EnvironmentProblem, InputError
from genie.lab import plan_lab, write_lab
from genie.lab.shape import check_lab_machine
from genie.services import lab as lab_service
from genie.testbed import netlink
from genie.topology import load_topology_file
from lab_support import vm_addresses

ROOT = Path(__file__).resolve().parents[1]
needs_keygen = pytest.mark.skipif(shutil.which("ssh-keygen") is None,
                                  reason="ssh-keygen (openssh-client) is not installed")


@pytest.fixture
def lab_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A rendered star-4 lab, and every call `lab shape` would make on this machine's network recorded instead."""
    lab = plan_lab(load_topology_file(ROOT / "topologies" / "star-4.yaml"))
    out = tmp_path / "lab"
    write_lab(lab, out)
    touched: list[str] = []
    monkeypatch.setenv("GENIE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(netlink, "probe_netem", lambda: touched.append("probe_netem") or True)
    monkeypatch.setattr(netlink, "local_addresses", lambda: vm_addresses(lab, "h0"))
    monkeypatch.setattr(netlink, "clear_local_root_qdisc", lambda ifname: touched.append(f"clear {ifname}") or False)
    monkeypatch.setattr(lab_service, "local_macs", lambda: {})
    monkeypatch.setattr(lab_service, "_undo_earlier", lambda machine: touched.append(f"undo {machine}") or 0)
    monkeypatch.setattr(lab_service, "_apply", lambda shaping: touched.append(f"apply {shaping.machine}"))
    return out, lab, touched


@needs_keygen
@pytest.mark.parametrize("remove", [False, True])
def test_lab_shape_refuses_on_a_machine_that_is_not_the_lab_vm(lab_dir, remove: bool,  # type: ignore[no-untyped-def]
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    out, _lab, touched = lab_dir
    monkeypatch.setattr(socket, "gethostname", lambda: "workstation")
    with pytest.raises(EnvironmentProblem, match="refusing to shape this machine's network: its hostname is "
                                                 "'workstation', not 'h0'"):
        lab_service.run_lab_shape(lab_service.LabShapeRequest(out, "h0", remove=remove))
    assert touched == []  # refused before anything was probed or changed


@needs_keygen
def test_lab_shape_acts_inside_the_lab_vm_and_dry_run_anywhere(lab_dir,  # type: ignore[no-untyped-def]
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    out, _lab, touched = lab_dir
    monkeypatch.setattr(socket, "gethostname", lambda: "workstation")
    dry = lab_service.run_lab_shape(lab_service.LabShapeRequest(out, "h0", dry_run=True))
    assert not dry.applied and "apply h0" not in touched
    monkeypatch.setattr(socket, "gethostname", lambda: "H0.lab.example")  # the VM: short name, any case
    assert lab_service.run_lab_shape(lab_service.LabShapeRequest(out, "h0")).applied
    assert touched[-1] == "apply h0"


def test_check_lab_machine_names_the_vm_and_refuses_an_unknown_one() -> None:
    lab = plan_lab(load_topology_file(ROOT / "topologies" / "star-4.yaml"))
    check_lab_machine(lab, "s0", "s0")
    with pytest.raises(EnvironmentProblem, match="not 's0'"):
        check_lab_machine(lab, "s0", "h0")  # inside the lab, but another VM
    with pytest.raises(InputError, match="expected one of the lab's VMs"):
        check_lab_machine(lab, "nope", "nope")
