"""Host inventories: the YAML format, one-line errors with paths, hostfiles, ssh config, TestbedInfo, traffic NIC."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from genie.core.errors import EnvironmentProblem, InputError
from genie.core.testbed import Shaping
from genie.inventory import (HostfileFormat, Inventory, InventoryHost, dump_inventory, hostfile,
                             inventory_to_testbed_info, load_inventory, load_inventory_file, ssh_config,
                             traffic_address, validate_inventory)

FULL = """\
name: rack1
defaults:
  interface: eth1
  ssh_user: genie
hosts:
  - {name: gpu0, address: 10.1.0.11, ranks: 2}
  - {name: gpu1, address: gpu1.cluster.example.org, ranks: 2, ssh_port: 2222}
  - name: gpu2
    address: 10.1.0.13
    interface: enp65s0f0
    subnet: 10.2.0.0/16
  - node3
"""


def test_full_format() -> None:
    inventory = load_inventory(FULL, source="rack1.yaml")
    assert inventory == Inventory("rack1", (
        InventoryHost("gpu0", "10.1.0.11", 2, interface="eth1", ssh_user="genie"),
        InventoryHost("gpu1", "gpu1.cluster.example.org", 2, interface="eth1", ssh_user="genie", ssh_port=2222),
        InventoryHost("gpu2", "10.1.0.13", 1, interface="enp65s0f0", subnet="10.2.0.0/16", ssh_user="genie"),
        InventoryHost("node3", "node3", 1, interface="eth1", ssh_user="genie"),
    ))
    assert inventory.world_size == 6
    assert inventory.rank_hosts() == ("gpu0", "gpu0", "gpu1", "gpu1", "gpu2", "node3")


def test_minimal_and_input_kinds(tmp_path: Path) -> None:
    text = "hosts: [{name: a, address: 10.0.0.1}, {name: b, address: 10.0.0.2}]\n"
    expected = Inventory("inventory", (InventoryHost("a", "10.0.0.1"), InventoryHost("b", "10.0.0.2")))
    assert load_inventory(text) == expected
    assert load_inventory(text.encode()) == expected
    assert load_inventory(io.BytesIO(text.encode())) == expected
    assert load_inventory(io.StringIO(text)) == expected
    path = tmp_path / "hosts.yaml"
    path.write_text(text)
    assert load_inventory_file(path) == expected


@pytest.mark.parametrize("text", [
    FULL,
    "hosts: [h0]\n",
    "name: x\ndefaults: {ranks: 4, subnet: 10.0.0.0/24}\nhosts:\n  - {name: a, address: 10.0.0.1}\n"
    "  - {name: b, address: 10.0.0.2, ranks: 1}\n",
    "hosts: [{name: a, address: 127.0.0.1}, {name: b, address: 127.0.0.2, ssh_user: me}]\n",
])
def test_dump_round_trips(text: str) -> None:
    inventory = load_inventory(text)
    dumped = dump_inventory(inventory, header="comment line")
    assert dumped.startswith("# comment line\n")
    assert load_inventory(dumped) == inventory


def test_dump_moves_shared_settings_to_defaults() -> None:
    inventory = Inventory("lab", tuple(InventoryHost(f"h{i}", f"10.0.0.{i + 1}", ssh_user="vagrant")
                                       for i in range(3)))
    dumped = dump_inventory(inventory)
    assert "defaults:\n  ssh_user: vagrant\n" in dumped
    assert "  - {name: h0, address: 10.0.0.1}\n" in dumped


def test_hostfiles() -> None:
    inventory = load_inventory(FULL)
    mpich = hostfile(inventory)
    assert mpich.splitlines()[1:] == ["10.1.0.11:2", "gpu1.cluster.example.org:2", "10.1.0.13:1", "node3:1"]
    assert mpich.startswith("# genie inventory rack1: 6 ranks on 4 hosts (MPICH")
    openmpi = hostfile(inventory, HostfileFormat.OPENMPI)
    assert openmpi.splitlines()[1:] == ["10.1.0.11 slots=2", "gpu1.cluster.example.org slots=2",
                                        "10.1.0.13 slots=1", "node3 slots=1"]


def test_ssh_config() -> None:
    inventory = load_inventory(FULL)
    config = ssh_config(inventory)
    assert "Host gpu1 gpu1.cluster.example.org\n    HostName gpu1.cluster.example.org\n    User genie\n" \
           "    Port 2222\n" in config
    assert "Host node3\n    User genie\n" in config
    plain = load_inventory("hosts: [{name: a, address: 10.0.0.1}, b]")
    assert ssh_config(plain) == ""
    assert "IdentityFile ~/.ssh/k" in ssh_config(plain, identity_file="~/.ssh/k")


def test_testbed_info_places_ranks_on_real_hosts() -> None:
    from genie.services.target import placements_for

    inventory = load_inventory(FULL)
    info = inventory_to_testbed_info(inventory)
    assert info.name == "rack1" and info.prefix == "" and info.link_ends == ()
    assert info.shaper is Shaping.NONE and info.shaper.label == "none"
    assert [(h.host, h.netns, h.address) for h in info.hosts] == [
        ("gpu0", None, "10.1.0.11"), ("gpu1", None, "gpu1.cluster.example.org"), ("gpu2", None, "10.1.0.13"),
        ("node3", None, "node3")]
    assert info.topology.rank_hosts() == inventory.rank_hosts()
    placements = placements_for(info, None)
    assert [(p.rank, p.host, p.netns, p.address) for p in placements][:3] == [
        (0, "gpu0", None, "10.1.0.11"), (1, "gpu0", None, "10.1.0.11"), (2, "gpu1", None, "gpu1.cluster.example.org")]


LOCAL = [("lo", "127.0.0.1/8"), ("eth0", "10.0.2.15/24"), ("eth1", "198.18.0.10/24"), ("eth1", "198.18.1.7/24"),
         ("eth2", "10.2.3.4/16")]


@pytest.mark.parametrize(("host", "expected"), [
    (InventoryHost("h", "node.example.org"), "node.example.org"),
    (InventoryHost("h", "node.example.org", interface="eth1"), "198.18.0.10"),
    (InventoryHost("h", "198.18.1.7", interface="eth1"), "198.18.1.7"),  # the inventory address wins
    (InventoryHost("h", "node", subnet="10.2.0.0/16"), "10.2.3.4"),
    (InventoryHost("h", "node", interface="eth1", subnet="198.18.1.0/24"), "198.18.1.7"),
])
def test_traffic_address(host: InventoryHost, expected: str) -> None:
    assert traffic_address(host, LOCAL) == expected


def test_traffic_address_missing() -> None:
    with pytest.raises(EnvironmentProblem, match=r"host h: no IPv4 address on interface eth9 .*this machine has: "
                                                 r"lo 127.0.0.1/8, eth0 10.0.2.15/24"):
        traffic_address(InventoryHost("h", "node", interface="eth9"), LOCAL)
    with pytest.raises(EnvironmentProblem, match="inside 10.9.0.0/16"):
        traffic_address(InventoryHost("h", "node", interface="eth1", subnet="10.9.0.0/16"), LOCAL)


BAD = [
    ("hosts: []", "hosts: expected a non-empty list of hosts, got an empty list"),
    ("name: x", "hosts: missing required key 'hosts'"),
    ("hostz: [h0]", "hostz: unknown key 'hostz' (did you mean 'hosts'?)"),
    ("hosts: [{name: h0, adress: 10.0.0.1}]", "hosts[0].adress: unknown key 'adress' (did you mean 'address'?)"),
    ("defaults: {rank: 2}\nhosts: [h0]", "defaults.rank: unknown key 'rank' (did you mean 'ranks'?)"),
    ("defaults: {ranks: 0}\nhosts: [h0]", "defaults.ranks: expected the number of ranks on the host (an integer >= 1)"),
    ("hosts: [{name: h0, ranks: 0}]", "hosts[0].ranks: expected the number of ranks"),
    ("hosts: [{name: h0, ranks: 1.5}]", "hosts[0].ranks: expected the number of ranks"),
    ("hosts: [{name: h0, ranks: yes}]", "hosts[0].ranks: expected the number of ranks on the host (an integer >= 1), "
                                        "got a boolean"),
    ("hosts: [h0, {name: h1, address: 10.0.0.2}, {name: h2, address: 10.0.0.02}]",
     "hosts[2].address: expected a hostname or an IPv4 address"),
    ("hosts: [{name: h0, address: 10.0.0.300}]", "not a valid IPv4 address"),
    ("hosts: [{name: h0, address: 224.0.0.1}]", "hosts[0].address: expected a hostname or an IPv4 address such as "
                                                "node1.example.org or 10.0.0.11, got '224.0.0.1' (not a unicast"),
    ("hosts: [{name: h0, address: 0.0.0.0}]", "(not a unicast host address)"),
    ("hosts: [{name: h0, address: under_score.example}]", "a hostname is dot-separated labels"),
    ("hosts: [{name: h0, address: 'fe80::1'}]", "hosts[0].address: IPv6 is not supported yet"),
    ("hosts: [{name: h0, address: 10.0.0.1}, {name: h1, address: 10.0.0.1}]",
     "hosts[1].address: duplicate address '10.0.0.1' (also host 'h0' at hosts[0])"),
    ("hosts: [{name: h0, address: Node.Example.org}, {name: h1, address: node.example.org.}]",
     "hosts[1].address: duplicate address"),
    ("hosts: [node1, {name: h1, address: node1}]", "hosts[1].address: duplicate address 'node1' (also host 'node1' "
                                                   "at hosts[0])"),
    ("hosts: [{name: h0, address: 10.0.0.1}, {name: h0, address: 10.0.0.2}]",
     "hosts[1].name: duplicate host name 'h0' (first defined at hosts[0])"),
    ("hosts: [h0, h0]", "hosts[1]: duplicate host name 'h0' (first defined at hosts[0])"),
    ("hosts: [{name: h0, address: 10.0.0.1}, {name: h1, address: 127.0.0.1}]",
     "hosts[1].address: loopback address '127.0.0.1' mixed with hosts on other addresses (such as 'h0' at hosts[0])"),
    ("hosts: [{name: h0, interface: 'eth 1'}]", "hosts[0].interface: expected a network interface name"),
    ("hosts: [{name: h0, interface: averyveryverylongname}]", "hosts[0].interface: expected a network interface"),
    ("hosts: [{name: h0, interface: eth0/1}]", "hosts[0].interface:"),
    ("defaults: {interface: 1}\nhosts: [h0]", "defaults.interface: expected a network interface name such as eth1 "
                                              "or enp65s0f0 (1-15 characters, no '/', ':' or spaces), got a number"),
    ("hosts: [{name: h0, subnet: 10.0.0.1/24}]", "hosts[0].subnet: expected an IPv4 network such as 10.0.0.0/24, "
                                                 "got '10.0.0.1/24' (10.0.0.1/24 has host bits set)"),
    ("hosts: [{name: h0, subnet: 10.0.0.0}]", "hosts[0].subnet: expected an IPv4 network"),
    ("hosts: [{name: h0, ssh_port: 0}]", "hosts[0].ssh_port: expected an ssh port (an integer between 1 and 65535)"),
    ("hosts: [{name: h0, ssh_user: 'a b'}]", "hosts[0].ssh_user: expected a user name"),
    ("hosts: [10.0.0.1]", "hosts[0]: expected a host name of 1-15 letters, digits, '-' or '_' starting with a "
                          "letter, got '10.0.0.1'; for a machine known by a DNS name or IP write {name: <label>, "
                          "address: 10.0.0.1}"),
    ("hosts: [{address: 10.0.0.1}]", "hosts[0].name: missing 'name'"),
    ("hosts: [[h0]]", "hosts[0]: expected a host name, or a mapping"),
    ("name: 'bad name'\nhosts: [h0]", "name: expected an inventory name"),
    ("- h0", "expected a mapping with keys name, defaults, hosts at the top level, got a list"),
    ("hosts: [h0]\nhosts: [h1]", "line 2, column 1: invalid YAML: found duplicate key 'hosts'"),
    ("hosts:\n\t- h0", "line 2, column 1: invalid YAML: found character '\\t' that cannot start any token"),
    ("hosts: [h0", "invalid YAML"),
    (b"hosts: [\xff]", "expected UTF-8 text, got an undecodable byte at offset 8"),
]


@pytest.mark.parametrize(("text", "expected"), BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_is_one_line_with_path(text: str | bytes, expected: str) -> None:
    with pytest.raises(InputError) as caught:
        load_inventory(text, source="hosts.yaml")
    message = str(caught.value)
    assert message.startswith("hosts.yaml: "), message
    assert expected in message, message
    assert "\n" not in message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nope.yaml: cannot read inventory file: No such file"):
        load_inventory_file(tmp_path / "nope.yaml")


def test_validate_built_inventory() -> None:
    with pytest.raises(InputError, match=r"^<inventory>: hosts\[1\].ranks: expected the number of ranks"):
        validate_inventory(Inventory("x", (InventoryHost("a", "10.0.0.1"), InventoryHost("b", "10.0.0.2", 0))))
    with pytest.raises(InputError, match=r"hosts: expected at least one host"):
        validate_inventory(Inventory("x", ()))
    ok = Inventory("x", (InventoryHost("a", "10.0.0.1"),))
    assert validate_inventory(ok) is ok


def test_all_loopback_is_fine() -> None:
    inventory = load_inventory("hosts: [{name: a, address: 127.0.0.1, ranks: 2}, {name: b, address: localhost}]")
    assert inventory.world_size == 3
