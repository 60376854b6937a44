"""Inventory -> text: the inventory YAML itself, MPI hostfiles and an ssh client configuration.

* `dump_inventory`: ``load_inventory(dump_inventory(i)) == i``; settings every host shares become ``defaults``.
* `hostfile`: one line per host, in rank order, naming the host by its ``address`` with its ranks as slots:
  MPICH (hydra) ``10.0.0.11:2``, Open MPI ``10.0.0.11 slots=2``. Both accept ``#`` comments.
* `ssh_config`: a ``Host`` block per host that needs a non-default ssh user or port (MPI launchers start their
  remote daemons through plain ``ssh <address>``, so these settings must live in ``~/.ssh/config``).
"""

from __future__ import annotations

from typing import Any

import yaml

from genie.inventory.model import DEFAULT_INVENTORY_NAME, HostfileFormat, Inventory, InventoryHost

_SHAREABLE = ("ranks", "interface", "subnet", "ssh_user", "ssh_port")
_MODEL_DEFAULTS = {"ranks": 1, "interface": None, "subnet": None, "ssh_user": None, "ssh_port": None}


class _Flow(dict):  # type: ignore[type-arg]
    """A mapping written on one line: ``{name: h0, address: 10.0.0.11}``."""


class _Dumper(yaml.SafeDumper):
    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


_Dumper.add_representer(
    _Flow, lambda dumper, data: dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=True))


def dump_inventory(inventory: Inventory, *, header: str | None = None) -> str:
    """YAML text for `inventory` (format: docs/inventory.md); `header` lines become leading comments."""
    document: dict[str, Any] = {}
    if inventory.name != DEFAULT_INVENTORY_NAME:
        document["name"] = inventory.name
    defaults = {key: getattr(inventory.hosts[0], key) for key in _SHAREABLE}
    defaults = {key: value for key, value in defaults.items()
                if value != _MODEL_DEFAULTS[key] and all(getattr(h, key) == value for h in inventory.hosts)}
    if defaults:
        document["defaults"] = defaults
    document["hosts"] = [_host_entry(host, defaults) for host in inventory.hosts]
    text = yaml.dump(document, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)
    comments = "".join(f"# {line}\n" if line else "#\n" for line in (header or "").splitlines())
    return comments + text


def _host_entry(host: InventoryHost, defaults: dict[str, Any]) -> _Flow:
    entry = _Flow(name=host.name, address=host.address)
    for key in _SHAREABLE:
        value = getattr(host, key)
        if key in defaults:
            if value != defaults[key]:
                entry[key] = value
        elif value != _MODEL_DEFAULTS[key]:
            entry[key] = value
    return entry


def hostfile(inventory: Inventory, hostfile_format: HostfileFormat = HostfileFormat.MPICH) -> str:
    """An MPI hostfile: hosts by address, in rank order, slots = ranks (see the module docstring)."""
    kind = "MPICH hydra" if hostfile_format is HostfileFormat.MPICH else "Open MPI"
    lines = [f"# genie inventory {inventory.name}: {inventory.world_size} ranks on {len(inventory.hosts)} hosts "
             f"({kind} hostfile; ranks are numbered host by host in this order)"]
    for host in inventory.hosts:
        if hostfile_format is HostfileFormat.MPICH:
            lines.append(f"{host.address}:{host.ranks}")
        else:
            lines.append(f"{host.address} slots={host.ranks}")
    return "\n".join(lines) + "\n"


def ssh_config(inventory: Inventory, *, identity_file: str | None = None,
               extra: tuple[str, ...] = ()) -> str:
    """``~/.ssh/config`` blocks: one per host with an ssh user, port or `identity_file` to set, keyed by the
    address the hostfile names (and by the host's label, so ``ssh h0`` works too). `extra` lines (such as
    ``StrictHostKeyChecking accept-new``) go into every block. Empty when nothing needs setting."""
    blocks = []
    for host in inventory.hosts:
        settings = []
        if host.address != host.name:
            settings.append(f"HostName {host.address}")
        if host.ssh_user:
            settings.append(f"User {host.ssh_user}")
        if host.ssh_port:
            settings.append(f"Port {host.ssh_port}")
        if identity_file:
            settings.append(f"IdentityFile {identity_file}")
        settings.extend(extra)
        if settings == ([f"HostName {host.address}"] if host.address != host.name else []):
            continue
        patterns = host.name if host.address == host.name else f"{host.name} {host.address}"
        blocks.append(f"Host {patterns}\n" + "".join(f"    {line}\n" for line in settings))
    return "\n".join(blocks)
