"""Inventory YAML -> Inventory, with one-line errors naming the file and the field (``hosts[2].address``).

The format is described in docs/inventory.md: an optional ``name``, optional ``defaults`` (ranks, interface,
subnet, ssh_user, ssh_port) and a non-empty list of ``hosts``. Each field is checked where it is written (a bad
default is reported at ``defaults.<key>``); `validate_inventory` then checks the hosts together (duplicates,
loopback mixed with real addresses).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import IO, Any

from genie.core.errors import InputError, shown
from genie.core.files import InputKind, read_input
from genie.input_yaml import as_text, describe, parse_yaml
from genie.inventory.model import DEFAULT_INVENTORY_NAME, Inventory, InventoryHost
from genie.inventory.validation import (HOST_FIELD_CHECKS, InventoryPaths, host_name_problem,
                                        inventory_name_problem, validate_inventory)
from genie.topology.validation import did_you_mean

TOP_LEVEL_KEYS = ("name", "defaults", "hosts")
DEFAULT_KEYS = ("ranks", "interface", "subnet", "ssh_user", "ssh_port")
HOST_KEYS = ("name", "address", *DEFAULT_KEYS)

_Fail = Callable[[str, str], InputError]


def load_inventory(data: str | bytes | IO[str] | IO[bytes], *, source: str = "<string>") -> Inventory:
    """Read an inventory from YAML text, bytes or a stream; `source` names it in error messages."""
    document = parse_yaml(as_text(data, source, reader="load_inventory"), source)

    def fail(path: str, message: str) -> InputError:
        return InputError(message, source=source, path=path)

    inventory, paths = _inventory_from_document(document, source, fail)
    return validate_inventory(inventory, source=source, paths=paths)


def load_inventory_file(path: str | os.PathLike[str]) -> Inventory:
    """Read an inventory YAML file; errors name the file."""
    return load_inventory(read_input(path, InputKind.INVENTORY), source=os.fspath(path))


# --- YAML ------------------------------------------------------------------------------------------------


# --- document -> Inventory ----------------------------------------------------------------------------------


def _check_keys(mapping: dict[Any, Any], allowed: tuple[str, ...], path: str, fail: _Fail) -> None:
    for key in mapping:
        where = f"{path}.{key}" if path else str(key)
        if not isinstance(key, str):
            raise fail(where, f"expected a key among {', '.join(allowed)}, got {describe(key)}")
        if key not in allowed:
            raise fail(where, f"unknown key {shown(key)}{did_you_mean(key, allowed)}; expected one of: {', '.join(allowed)}")


def _read_fields(mapping: dict[str, Any], keys: tuple[str, ...], path: str, fail: _Fail) -> dict[str, Any]:
    """The values of `keys` present in `mapping`, each checked, errors at ``<path>.<key>``."""
    values = {}
    for key in keys:
        if key in mapping:
            if problem := HOST_FIELD_CHECKS[key](mapping[key]):
                raise fail(f"{path}.{key}", problem)
            values[key] = mapping[key]
    return values


def _inventory_from_document(document: object, source: str, fail: _Fail) -> tuple[Inventory, InventoryPaths]:
    if not isinstance(document, dict):
        raise InputError(f"expected a mapping with keys {', '.join(TOP_LEVEL_KEYS)} at the top level, "
                         f"got {describe(document)}", source=source)
    _check_keys(document, TOP_LEVEL_KEYS, "", fail)
    name = document.get("name", DEFAULT_INVENTORY_NAME)
    if problem := inventory_name_problem(name):
        raise fail("name", problem)
    defaults_doc = document.get("defaults")
    if defaults_doc is None:
        defaults: dict[str, Any] = {}
    elif not isinstance(defaults_doc, dict):
        raise fail("defaults", f"expected a mapping of host settings ({', '.join(DEFAULT_KEYS)}), "
                               f"got {describe(defaults_doc)}")
    else:
        _check_keys(defaults_doc, DEFAULT_KEYS, "defaults", fail)
        defaults = _read_fields(defaults_doc, DEFAULT_KEYS, "defaults", fail)
    entries = document.get("hosts")
    if "hosts" not in document:
        raise fail("hosts", "missing required key 'hosts'; expected a list such as [{name: h0, address: 10.0.0.11}]")
    if not isinstance(entries, list) or not entries:
        raise fail("hosts", f"expected a non-empty list of hosts, got {describe(entries)}")
    hosts, names, addresses = [], [], []
    for index, entry in enumerate(entries):
        host, name_path, address_path = _read_host(entry, f"hosts[{index}]", defaults, fail)
        hosts.append(host)
        names.append(name_path)
        addresses.append(address_path)
    return Inventory(name=name, hosts=tuple(hosts)), InventoryPaths(tuple(names), tuple(addresses))


def _read_host(entry: object, path: str, defaults: dict[str, Any], fail: _Fail) -> tuple[InventoryHost, str, str]:
    """One host entry: a bare name (its address is the name) or a mapping. Returns the host and the paths of
    its name and address."""
    if isinstance(entry, str):
        if problem := host_name_problem(entry):
            raise fail(path, problem)
        return InventoryHost(name=entry, address=entry, **defaults), path, path
    if not isinstance(entry, dict):
        raise fail(path, f"expected a host name, or a mapping such as {{name: h0, address: 10.0.0.11, ranks: 2}}, "
                         f"got {describe(entry)}")
    _check_keys(entry, HOST_KEYS, path, fail)
    if "name" not in entry:
        raise fail(f"{path}.name", "missing 'name'; expected a short label for the host such as h0")
    own = _read_fields(entry, HOST_KEYS, path, fail)
    address_path = f"{path}.address" if "address" in own else f"{path}.name"
    fields = {**defaults, **own}
    fields.setdefault("address", fields["name"])
    return InventoryHost(**fields), f"{path}.name", address_path
