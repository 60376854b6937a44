"""Equal-cost next hops toward every host: star, ring, leaf-spine."""

from __future__ import annotations

from genie.core.topology import Host, Link, Switch, SwitchKind, Topology
from genie.topology import hop_count, leaf_spine, ring, shortest_paths_next_hops, star


def test_star_goes_through_the_bridge() -> None:
    t = star(3)
    hops = shortest_paths_next_hops(t)
    assert hops[("h0", "h1")] == ("s0",)
    assert hops[("s0", "h1")] == ("h1",)
    assert ("h1", "h1") not in hops
    # every node toward every other host: 3 hosts * 2 other hosts + bridge * 3 hosts
    assert len(hops) == 3 * 2 + 3
    assert list(hops)[:3] == [("h0", "h1"), ("h0", "h2"), ("h1", "h0")]  # sorted in node order


def test_even_ring_has_two_equal_ways_to_the_opposite_host() -> None:
    hops = shortest_paths_next_hops(ring(8))
    assert hops[("h0", "h4")] == ("h1", "h7")
    assert hops[("h2", "h6")] == ("h1", "h3")
    assert hops[("h0", "h1")] == ("h1",)
    assert hops[("h0", "h3")] == ("h1",)
    assert hops[("h0", "h5")] == ("h7",)
    assert hop_count(ring(8), "h0", "h4") == 4


def test_odd_ring_has_one_shortest_way() -> None:
    hops = shortest_paths_next_hops(ring(5))
    assert hops[("h0", "h2")] == ("h1",)
    assert hops[("h0", "h3")] == ("h4",)


def test_two_host_ring() -> None:
    assert shortest_paths_next_hops(ring(2)) == {("h0", "h1"): ("h1",), ("h1", "h0"): ("h0",)}


def test_leaf_spine_spreads_over_both_spines() -> None:
    t = leaf_spine(2, 4, 2)
    hops = shortest_paths_next_hops(t)
    assert hops[("leaf0", "h4")] == ("spine0", "spine1")  # ECMP
    assert hops[("leaf0", "h1")] == ("h1",)
    assert hops[("h0", "h5")] == ("leaf0",)
    assert hops[("spine0", "h5")] == ("leaf1",)
    assert hops[("spine1", "h0")] == ("leaf0",)
    assert hop_count(t, "h0", "h5") == 4
    assert hops[("leaf1", "h0")] == ("spine0", "spine1")
    assert len(leaf_spine(2, 1, 4).links) == 2 + 8
    assert shortest_paths_next_hops(leaf_spine(2, 1, 4))[("leaf0", "h1")] == (
        "spine0", "spine1", "spine2", "spine3")


def test_mixed_fabric_counts_bridges_as_hops() -> None:
    # h0 - br - r0 - h1, and h0 - br - r1 - h1: two equal ways from the bridge to h1
    t = Topology(name="mixed", hosts=(Host("h0"), Host("h1")),
                 switches=(Switch("br"), Switch("r0", SwitchKind.ROUTER), Switch("r1", SwitchKind.ROUTER)),
                 links=(Link("h0", "br"), Link("br", "r0"), Link("br", "r1"), Link("r0", "h1"), Link("r1", "h1")))
    hops = shortest_paths_next_hops(t)
    assert hops[("h0", "h1")] == ("br",)
    assert hops[("br", "h1")] == ("r0", "r1")
    assert hops[("h1", "h0")] == ("r0", "r1")
    assert hop_count(t, "h0", "h1") == 3
