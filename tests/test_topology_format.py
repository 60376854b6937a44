"""Topology YAML: samples load, dump/load round trips, and every bad input is a one-line InputError with a path."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from genie.core.errors import InputError
from genie.core.topology import Host, Link, LinkShape, Switch, SwitchKind, Topology
from genie.topology import dump_topology, leaf_spine, load_topology, load_topology_file, ring, star
from genie.topology.link_properties import LINK_PROPERTIES, format_time_us

SAMPLES = Path(__file__).resolve().parent.parent / "topologies"
GBIT = 10**9

VALID = """\
name: t
defaults:
  bandwidth: 1gbit
hosts:
  - {prefix: h, count: 3}
switches:
  - {name: s0}
links:
  - {endpoints: [h0, s0]}
  - {endpoints: [h1, s0]}
  - {endpoints: [h2, s0]}
"""


def test_every_linkshape_field_has_a_yaml_key() -> None:
    from dataclasses import fields

    assert {p.field for p in LINK_PROPERTIES} == {f.name for f in fields(LinkShape)}


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_sample_loads_and_round_trips(path: Path) -> None:
    topology = load_topology_file(path)
    assert topology.name == path.stem
    assert load_topology(dump_topology(topology)) == topology
    # samples must build on a kernel without sch_netem: delays (the multi-GPU sample's) by the userspace emulator
    from genie.testbed.plan import build_plan
    from genie.testbed.steps import Shaper

    delayed = any(link.shape.needs_delay_emulation for link in topology.links)
    assert build_plan(topology, "sample", netem_available=False,
                      shaper=Shaper.USERSPACE if delayed else Shaper.KERNEL).steps


@pytest.mark.parametrize(("sample", "built"), [
    ("star-4", star(4, shape=LinkShape(rate_bps=GBIT))),
    ("star-8", star(8, shape=LinkShape(rate_bps=GBIT))),
    ("ring-8", ring(8, shape=LinkShape(rate_bps=GBIT))),
    ("leaf-spine-2x4", leaf_spine(2, 4, 2, shape=LinkShape(rate_bps=GBIT), fabric_shape=LinkShape(rate_bps=2 * GBIT))),
])
def test_builders_equal_samples(sample: str, built: Topology) -> None:
    assert load_topology_file(SAMPLES / f"{sample}.yaml") == built


def test_full_format() -> None:
    text = """\
name: full
subnet: 10.20.0.0/16
defaults: {bandwidth: 100mbit, delay: 2ms, jitter: 100us, loss: 0.5, queue: 1000, mtu: 9000}
hosts:
  - gpu0
  - {name: gpu1, ranks: 4}
  - {prefix: w, count: 2, start: 5, ranks: 2}
switches:
  - sw
  - {prefix: r, count: 1, kind: router}
links:
  - {endpoints: [gpu0, sw]}
  - {endpoints: [gpu1, sw], bandwidth: 25gbit, delay: 50us, jitter: 0, loss: '1%', queue: null, mtu: 1500}
  - {endpoints: [w5, r0], bandwidth: null}
  - {endpoints: [w6, r0]}
  - endpoints: [sw, r0]
    delay: 1.5ms
"""
    topology = load_topology(text, source="full.yaml")
    assert topology.subnet == "10.20.0.0/16"
    assert topology.hosts == (Host("gpu0"), Host("gpu1", 4), Host("w5", 2), Host("w6", 2))
    assert topology.switches == (Switch("sw"), Switch("r0", SwitchKind.ROUTER))
    assert topology.rank_hosts() == ("gpu0", "gpu1", "gpu1", "gpu1", "gpu1", "w5", "w5", "w6", "w6")
    default = LinkShape(rate_bps=100 * 10**6, delay_us=2000, jitter_us=100, loss_pct=0.5, queue_packets=1000,
                        mtu_bytes=9000)
    assert topology.links[0] == Link("gpu0", "sw", default)
    assert topology.links[1].shape == LinkShape(rate_bps=25 * GBIT, delay_us=50, jitter_us=0, loss_pct=1.0,
                                                queue_packets=None, mtu_bytes=1500)
    assert topology.links[2].shape.rate_bps is None
    assert topology.links[4].shape.delay_us == 1500
    assert load_topology(dump_topology(topology)) == topology


def test_reads_bytes_and_streams_and_defaults_subnet() -> None:
    expected = load_topology(VALID)
    assert expected.subnet == "198.18.0.0/15"
    assert load_topology(VALID.encode()) == expected
    assert load_topology(io.StringIO(VALID)) == expected
    assert load_topology(io.BytesIO(b"\xef\xbb\xbf" + VALID.encode())) == expected


def test_single_host_needs_no_link() -> None:
    topology = load_topology("name: solo\nhosts: [{name: h0, ranks: 8}]\n")
    assert topology.world_size == 8 and topology.links == ()


def test_round_trip_of_odd_shapes() -> None:
    shapes = [LinkShape(rate_bps=1_234_567, delay_us=0.5, jitter_us=0.25, loss_pct=0.001, queue_packets=7),
              LinkShape(rate_bps=2_500_000_000, delay_us=1_000_000), LinkShape()]
    topology = Topology(name="odd", hosts=(Host("a"), Host("b"), Host("c3"), Host("c4", 2)),
                        links=(Link("a", "b", shapes[0]), Link("b", "c3", shapes[1]), Link("c3", "c4", shapes[2])))
    assert load_topology(dump_topology(topology)) == topology


def test_format_time() -> None:
    assert [format_time_us(v) for v in (0, 50, 2000, 1_000_000, 0.5, 1.5)] == [0, "50us", "2ms", "1s", "500ns",
                                                                              "1500ns"]


def test_load_missing_file() -> None:
    with pytest.raises(InputError, match=r"^/nonexistent/t\.yaml: cannot read topology file"):
        load_topology_file("/nonexistent/t.yaml")


def _links(*entries: str, hosts: str = "[{prefix: h, count: 3}]", switches: str = "[s0]",
           extra: str = "") -> str:
    body = "\n".join(f"  - {e}" for e in entries)
    return f"name: t\n{extra}hosts: {hosts}\nswitches: {switches}\nlinks:\n{body}\n"


STAR3 = ("{endpoints: [h0, s0]}", "{endpoints: [h1, s0]}", "{endpoints: [h2, s0]}")

BAD_INPUTS = {
    # id: (text, path the message names, fragment of the message)
    "yaml syntax": ("name: t\nhosts: [h0\n", "line 3, column 1", "invalid YAML"),
    "yaml tab": ("name: t\nhosts:\n\t- h0\n", "line 3, column 1", "invalid YAML"),
    "duplicate yaml key": ("name: t\nname: u\nhosts: [h0]\n", "line 2, column 1", "duplicate key 'name'"),
    "top level list": ("- h0\n- h1\n", None, "expected a mapping"),
    "empty document": ("", None, "got nothing"),
    "unknown top key": ("name: t\nhost: [h0]\n", "host",
                        "unknown key 'host' (did you mean 'hosts'?); expected one of: name,"),
    "missing name": ("hosts: [h0]\n", "name", "missing required key 'name'"),
    "missing hosts": ("name: t\n", "hosts", "missing required key 'hosts'"),
    "empty hosts": ("name: t\nhosts: []\n", "hosts", "non-empty list of hosts, got an empty list"),
    "bad topology name": ("name: 'a b'\nhosts: [h0]\n", "name", "topology name"),
    "subnet host bits": ("name: t\nsubnet: 198.18.0.1/15\nhosts: [h0]\n", "subnet", "host bits set"),
    "subnet garbage": ("name: t\nsubnet: banana\nhosts: [h0]\n", "subnet", "IPv4 network"),
    "subnet no prefix": ("name: t\nsubnet: 10.0.0.0\nhosts: [h0]\n", "subnet", "IPv4 network"),
    "subnet public": ("name: t\nsubnet: 8.8.0.0/16\nhosts: [h0]\n", "subnet", "not a private"),
    "subnet loopback": ("name: t\nsubnet: 127.0.0.0/8\nhosts: [h0]\n", "subnet", "not a private"),
    "subnet too small": (_links(*STAR3, extra="subnet: 10.0.0.0/30\n"), "subnet", "needs at least 5"),
    "unknown default key": (_links(*STAR3, extra="defaults: {bandwith: 1gbit}\n"), "defaults.bandwith",
                            "did you mean 'bandwidth'?"),
    "default loss": (_links(*STAR3, extra="defaults: {loss: 101}\n"), "defaults.loss", "[0, 100)"),
    "default jitter above delay": (_links(*STAR3, extra="defaults: {delay: 1ms, jitter: 2ms}\n"),
                                   "defaults.jitter", "exceeds delay"),
    "bandwidth without unit": (_links(*STAR3[:2], "{endpoints: [h2, s0], bandwidth: 100}"),
                               "links[2].bandwidth", "unit missing"),
    "bandwidth string without unit": (_links("{endpoints: [h0, s0], bandwidth: '100'}", *STAR3[1:]),
                                      "links[0].bandwidth", "with a unit"),
    "bandwidth unknown unit": (_links("{endpoints: [h0, s0], bandwidth: 1gbyte}", *STAR3[1:]),
                               "links[0].bandwidth", "with a unit"),
    "bandwidth zero": (_links("{endpoints: [h0, s0], bandwidth: 0mbit}", *STAR3[1:]),
                       "links[0].bandwidth", "at least 8bit"),
    "bandwidth boolean": (_links("{endpoints: [h0, s0], bandwidth: yes}", *STAR3[1:]),
                          "links[0].bandwidth", "boolean"),
    "delay without unit": (_links(*STAR3[:1], "{endpoints: [h1, s0], delay: 5}", *STAR3[2:]),
                           "links[1].delay", "with a unit"),
    "negative delay": (_links(*STAR3[:1], "{endpoints: [h1, s0], delay: -5ms}", *STAR3[2:]),
                       "links[1].delay", "expected a time"),
    "huge delay": (_links(*STAR3[:1], "{endpoints: [h1, s0], delay: 11s}", *STAR3[2:]),
                   "links[1].delay", "between 0 and 10s"),
    "jitter above delay": (_links(*STAR3[:1], "{endpoints: [h1, s0], delay: 1ms, jitter: 2ms}", *STAR3[2:]),
                           "links[1].jitter", "exceeds delay"),
    "delay below default jitter": (_links(*STAR3[:1], "{endpoints: [h1, s0], delay: 1us}", *STAR3[2:],
                                          extra="defaults: {delay: 1ms, jitter: 100us}\n"),
                                   "links[1].delay", "exceeds delay"),
    "loss above 100": (_links(*STAR3[:2], "{endpoints: [h2, s0], loss: 101}"), "links[2].loss", "[0, 100)"),
    "loss 100": (_links(*STAR3[:2], "{endpoints: [h2, s0], loss: 100%}"), "links[2].loss", "[0, 100)"),
    "negative loss": (_links(*STAR3[:2], "{endpoints: [h2, s0], loss: -1}"), "links[2].loss", "[0, 100)"),
    "loss garbage": (_links(*STAR3[:2], "{endpoints: [h2, s0], loss: lots}"), "links[2].loss", "percentage"),
    "queue zero": (_links(*STAR3[:2], "{endpoints: [h2, s0], queue: 0}"), "links[2].queue", "at least 1"),
    "queue text": (_links(*STAR3[:2], "{endpoints: [h2, s0], queue: 1k}"), "links[2].queue", "packets"),
    "mtu small": (_links(*STAR3[:2], "{endpoints: [h2, s0], mtu: 500}"), "links[2].mtu", "576 and 65535"),
    "mtu huge": (_links(*STAR3[:2], "{endpoints: [h2, s0], mtu: 70000}"), "links[2].mtu", "576 and 65535"),
    "unknown link key": (_links(*STAR3[:2], "{endpoints: [h2, s0], latency: 1ms}"), "links[2].latency",
                         "expected one of: endpoints, bandwidth, delay"),
    "misspelt link key": (_links(*STAR3[:2], "{endpoints: [h2, s0], bandwidht: 1gbit}"), "links[2].bandwidht",
                          "did you mean 'bandwidth'?"),
    "link not a mapping": (_links(*STAR3[:2], "[h2, s0]"), "links[2]", "expected a mapping"),
    "link no endpoints": (_links(*STAR3[:2], "{bandwidth: 1gbit}"), "links[2].endpoints", "missing 'endpoints'"),
    "link three endpoints": (_links(*STAR3[:2], "{endpoints: [h2, s0, h1]}"), "links[2].endpoints",
                             "two node names"),
    "link numeric endpoint": (_links(*STAR3[:2], "{endpoints: [h2, 7]}"), "links[2].endpoints[1]",
                              "expected a node name"),
    "link unknown node": (_links(*STAR3[:2], "{endpoints: [h2, s1]}"), "links[2].endpoints",
                          "unknown node 's1' (did you mean 's0'?); expected one of the hosts or switches"),
    "self loop": (_links(*STAR3, "{endpoints: [s0, s0]}"), "links[3].endpoints", "self-loop"),
    "duplicate link": (_links(*STAR3, "{endpoints: [s0, h1]}"), "links[3].endpoints",
                       "duplicate link between 's0' and 'h1' (first at links[1])"),
    "duplicate host": ("name: t\nhosts: [{prefix: h, count: 3}, {name: h1}]\n", "hosts[1].name",
                       "duplicate node name 'h1' (first defined at hosts[0])"),
    "host named like switch": (_links(*STAR3, hosts="[h0, h1, h2, s0]"), "switches[0]",
                               "duplicate node name 's0' (first defined at hosts[3])"),
    "bad node name": ("name: t\nhosts: [{name: 'h 0'}]\n", "hosts[0].name", "node name"),
    "long node name": ("name: t\nhosts: [abcdefghijklmnop]\n", "hosts[0]", "1-15 letters"),
    "boolean node name": ("name: t\nhosts: [on]\n", "hosts[0]", "quote it"),
    "group name too long": ("name: t\nhosts: [{prefix: abcdefghijklmn, count: 11}]\n", "hosts[0].prefix",
                            "from prefix"),
    "host name and prefix": ("name: t\nhosts: [{name: a, prefix: h, count: 2}]\n", "hosts[0].prefix",
                             "not both"),
    "host group without count": ("name: t\nhosts: [{prefix: h}]\n", "hosts[0].count", "missing 'count'"),
    "host group zero count": ("name: t\nhosts: [{prefix: h, count: 0}]\n", "hosts[0].count", "between 1 and"),
    "host misspelt key": ("name: t\nhosts: [{name: a, rank: 2}]\n", "hosts[0].rank", "did you mean 'ranks'?"),
    "ranks zero": ("name: t\nhosts: [{name: a, ranks: 0}]\n", "hosts[0].ranks", ">= 1"),
    "ranks text": ("name: t\nhosts: [{name: a, ranks: two}]\n", "hosts[0].ranks", "integer"),
    "host entry number": ("name: t\nhosts: [3]\n", "hosts[0]", "expected a host name, or a mapping"),
    "switch kind": (_links(*STAR3, switches="[{name: s0, kind: route}]"), "switches[0].kind",
                    "expected one of bridge, router, got a string ('route') (did you mean 'router'?)"),
    "switch misspelt key": (_links(*STAR3, switches="[{name: s0, knd: router}]"), "switches[0].knd",
                            "did you mean 'kind'?"),
    "host without link": (_links(*STAR3[:2]), "hosts[0]", "host 'h2' has no link"),
    "switch without link": (_links(*STAR3, switches="[s0, s1]"), "switches[1]", "switch 's1' has no link"),
    "disconnected": (_links("{endpoints: [h0, s0]}", "{endpoints: [h1, h2]}"), "links",
                     "not connected: 'h1', 'h2' cannot reach 'h0'"),
    "bridge loop": (_links("{endpoints: [h0, s0]}", "{endpoints: [h1, s1]}", "{endpoints: [h2, s2]}",
                           "{endpoints: [s0, s1]}", "{endpoints: [s1, s2]}", "{endpoints: [s2, s0]}",
                           switches="[s0, s1, s2]"), "links[5]", "bridge loop"),
    "two links into one bridged segment": (_links(*STAR3, "{endpoints: [h0, s1]}", "{endpoints: [s0, s1]}",
                                                  switches="[s0, s1]"), "links[3]",
                                           "'h0' has a second link into the bridged segment"),
    "hosts not a list": ("name: t\nhosts: h0\n", "hosts", "expected a non-empty list of hosts"),
    "links not a list": ("name: t\nhosts: [h0]\nlinks: {a: b}\n", "links", "expected a list of links, got a mapping"),
    "defaults not a mapping": ("name: t\nhosts: [h0]\ndefaults: 1gbit\n", "defaults", "expected a mapping"),
}


@pytest.mark.parametrize(("text", "path", "fragment"), BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_is_one_line_error_with_source_and_path(text: str, path: str | None, fragment: str) -> None:
    with pytest.raises(InputError) as caught:
        load_topology(text, source="bad.yaml")
    message = str(caught.value)
    assert "\n" not in message
    assert caught.value.source == "bad.yaml"
    assert caught.value.path == path, message
    prefix = f"bad.yaml: {path}: " if path else "bad.yaml: "
    assert message.startswith(prefix), message
    assert fragment in message, message


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(VALID.replace("1gbit", "1000"))
    with pytest.raises(InputError, match=r"bad\.yaml: defaults\.bandwidth: expected a rate with a unit"):
        load_topology_file(bad)


def test_undecodable_bytes() -> None:
    with pytest.raises(InputError, match="^x.yaml: expected UTF-8"):
        load_topology(b"name: \xff\n", source="x.yaml")


def test_subnet_capacity_counts_interfaces() -> None:
    # 3 host ports on a bridge need 3 addresses + network + broadcast: a /29 (8) fits, a /30 (4) does not.
    assert load_topology(_links(*STAR3, extra="subnet: 10.0.0.0/29\n")).subnet == "10.0.0.0/29"


@pytest.mark.parametrize("rate", ["1gbps", "100mbps", "10Gbps"])
def test_bps_rates_are_refused_naming_bits_and_bytes(tmp_path: Path, rate: str) -> None:
    """`1gbps` is gigabits to an iperf user and gigaBYTES/s to tc: refused, never 8 Gbit/s silently (issue #17)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(VALID.replace("1gbit", rate))
    with pytest.raises(InputError, match=r"bad\.yaml: defaults\.bandwidth: .*ambiguous.*bit.*bytes per second"):
        load_topology_file(bad)


# ---- multi-GPU nodes ----------------------------------------------------------------------------------------
def test_a_dgx_like_node_in_a_few_lines() -> None:
    from genie.core.topology import LinkRole, SwitchKind
    from genie.topology import dump_topology, load_topology, load_topology_file, shortest_paths_next_hops

    t = load_topology_file(Path(__file__).resolve().parent.parent / "topologies" / "dgx-2node.yaml")
    assert [h.name for h in t.hosts] == [f"n{n}g{g}" for n in range(2) for g in range(8)]
    assert t.world_size == 16 and all(h.ranks == 1 for h in t.hosts)
    nvlinks = [link for link in t.links if link.role is LinkRole.INTRA_NODE]
    assert len(nvlinks) == 16 and {link.b for link in nvlinks} == {"n0nvs", "n1nvs"}
    assert all(link.shape.rate_bps == 7200 * 10**9 and link.shape.delay_us == 0.5 for link in nvlinks)
    rails = [link for link in t.links if link.b.startswith("leaf") and link.a.startswith("n")]
    assert sorted((link.a, link.b) for link in rails) == sorted(
        (f"n{n}g{g}", f"leaf{g}") for n in range(2) for g in range(8))
    assert all(link.shape.rate_bps == 400 * 10**9 and link.role is LinkRole.NETWORK for link in rails)
    assert next(s for s in t.switches if s.name == "n0nvs").kind is SwitchKind.ROUTER
    hops = shortest_paths_next_hops(t)
    assert hops[("n0g2", "n0g5")] == ("n0nvs",)  # inside a node: NVLink
    assert hops[("n0g2", "n1g2")] == ("leaf2",)  # same rail: the rail switch
    assert load_topology(dump_topology(t)) == t  # the roles survive a round trip


def test_shared_nics_leave_through_the_nvswitch() -> None:
    from genie.topology import load_topology

    t = load_topology("""
name: shared
defaults: {bandwidth: 100gbit}
nodes:
  - {prefix: n, count: 2, gpus: 4, nics: 2, rails: [sw0, sw1], nvlink: {bandwidth: 1tbit}}
switches:
  - {prefix: sw, count: 2, kind: router}
""")
    uplinks = sorted((link.a, link.b) for link in t.links if link.b.startswith("sw"))
    assert uplinks == [("n0nvs", "sw0"), ("n0nvs", "sw1"), ("n1nvs", "sw0"), ("n1nvs", "sw1")]
    assert t.world_size == 8


@pytest.mark.parametrize("nodes, path, wanted", [
    ("[{name: n0, rails: leaf}]", "nodes[0].gpus", "missing 'gpus'"),
    ("[{name: n0, gpus: 0, rails: leaf}]", "nodes[0].gpus", "between 1 and 64"),
    ("[{name: n0, gpus: 2}]", "nodes[0].rails", "missing 'rails'"),
    ("[{name: n0, gpus: 2, rails: [leaf0]}]", "nodes[0].rails", "one switch per NIC (2)"),
    ("[{name: n0, gpus: 2, nics: 3, rails: leaf}]", "nodes[0].nics", "share (1..2)"),
    ("[{name: n0, gpus: 2, rails: leaf, nvlink: {bandwith: 1tbit}}]", "nodes[0].nvlink.bandwith", "unknown key"),
    ("[{name: n0, gpus: 2, rails: nope}]", "nodes[0].rails", "unknown node 'nope0'"),
    ("[{name: averylongnode, gpus: 2, rails: leaf}]", "nodes[0].name", "longer than 15"),
    ("[n0]", "nodes[0]", "expected a mapping"),
])
def test_bad_nodes_are_one_line_errors_naming_the_field(nodes: str, path: str, wanted: str) -> None:
    from genie.topology import load_topology

    text = f"name: t\nnodes: {nodes}\nswitches: [{{prefix: leaf, count: 2, kind: router}}]\n"
    with pytest.raises(InputError) as err:
        load_topology(text, source="t.yaml")
    assert err.value.path is not None and err.value.path.startswith(path), (err.value.path, str(err.value))
    assert wanted in str(err.value)
