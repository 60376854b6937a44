"""Builders: shapes of star, ring and leaf-spine, and their argument errors."""

from __future__ import annotations

import pytest

from genie.core.errors import InputError
from genie.core.topology import LinkShape, SwitchKind
from genie.topology import dump_topology, leaf_spine, load_topology, ring, star, validate_topology

SHAPE = LinkShape(rate_bps=10**9)


def test_star() -> None:
    t = star(3, shape=SHAPE, ranks_per_host=2)
    assert t.name == "star-3"
    assert [h.name for h in t.hosts] == ["h0", "h1", "h2"] and t.world_size == 6
    assert [(s.name, s.kind) for s in t.switches] == [("s0", SwitchKind.BRIDGE)]
    assert [link.endpoints for link in t.links] == [("h0", "s0"), ("h1", "s0"), ("h2", "s0")]
    assert all(link.shape == SHAPE for link in t.links)
    assert star(1).links[0].endpoints == ("h0", "s0")
    assert star(2, name="pair").name == "pair"


def test_ring() -> None:
    t = ring(4, shape=SHAPE)
    assert t.switches == ()
    assert [link.endpoints for link in t.links] == [("h0", "h1"), ("h1", "h2"), ("h2", "h3"), ("h3", "h0")]
    assert [link.endpoints for link in ring(2).links] == [("h0", "h1")]
    assert [link.endpoints for link in ring(3).links] == [("h0", "h1"), ("h1", "h2"), ("h2", "h0")]


def test_leaf_spine() -> None:
    fabric = LinkShape(rate_bps=4 * 10**9)
    t = leaf_spine(3, 2, 2, shape=SHAPE, fabric_shape=fabric, ranks_per_host=4)
    assert t.name == "leaf-spine-3x2" and t.world_size == 24
    assert [s.name for s in t.switches] == ["leaf0", "leaf1", "leaf2", "spine0", "spine1"]
    assert all(s.kind is SwitchKind.ROUTER for s in t.switches)
    host_links = [link for link in t.links if link.a.startswith("h")]
    assert [link.endpoints for link in host_links] == [
        ("h0", "leaf0"), ("h1", "leaf0"), ("h2", "leaf1"), ("h3", "leaf1"), ("h4", "leaf2"), ("h5", "leaf2")]
    assert all(link.shape == SHAPE for link in host_links)
    fabric_links = t.links[len(host_links):]
    assert [link.endpoints for link in fabric_links] == [
        (f"leaf{leaf}", f"spine{spine}") for leaf in range(3) for spine in range(2)]
    assert all(link.shape == fabric for link in fabric_links)
    assert leaf_spine(1, 1, 1).links[-1].shape == LinkShape()


@pytest.mark.parametrize("topology", [star(5, shape=SHAPE), ring(5), leaf_spine(2, 3, 3, shape=SHAPE),
                                      ring(2, shape=LinkShape(delay_us=100, jitter_us=10, loss_pct=0.1))],
                         ids=lambda t: t.name)
def test_builders_round_trip_and_validate(topology) -> None:  # type: ignore[no-untyped-def]
    assert validate_topology(topology) is topology
    assert load_topology(dump_topology(topology)) == topology


@pytest.mark.parametrize(("call", "expected"), [
    (lambda: star(0), "star: n: expected an integer >= 1, got 0"),
    (lambda: ring(1), "ring: n: expected an integer >= 2, got 1"),
    (lambda: ring(3, ranks_per_host=0), "ring: ranks_per_host: expected an integer >= 1, got 0"),
    (lambda: leaf_spine(2, 0, 2), "leaf_spine: hosts_per_leaf: expected an integer >= 1, got 0"),
    (lambda: leaf_spine(2, 2, True), "leaf_spine: spines: expected an integer >= 1, got True"),
    (lambda: star(3, shape=LinkShape(loss_pct=150)), "star: links[0].loss: expected a loss percentage"),
    (lambda: star(2, name="bad name"), "star: name: expected a topology name"),
])
def test_builder_errors(call, expected: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError) as caught:
        call()
    assert str(caught.value).startswith(expected), str(caught.value)
