"""Diagnosis from pairwise matrices (pure): exactly the degraded link is named, nothing when healthy."""

import itertools
import random

from genie.core.topology import LinkShape
from genie.measure.diagnose import PairMeasurement, diagnose, path_links
from genie.topology import leaf_spine, star

GBIT = LinkShape(rate_bps=1_000_000_000)


def _matrix(topology, *, slow_link=None, slow_factor=1.0, extra_delay_us=0.0, seed=1):
    rng = random.Random(seed)
    hosts = [h.name for h in topology.hosts]
    out = {}
    for src, dst in itertools.permutations(hosts, 2):
        links = path_links(topology, src, dst)
        bw = 0.1196 * rng.uniform(0.97, 1.0)
        lat = 180.0 * rng.uniform(0.9, 1.2)
        back = path_links(topology, dst, src)
        if slow_link and any((d.src, d.dst) == slow_link for d in links):
            bw *= slow_factor
        if slow_link and any((d.src, d.dst) == slow_link for d in links | back):
            lat += extra_delay_us  # latency comes from an exchange: both directions of the pair see it
        out[(src, dst)] = PairMeasurement(src, dst, lat, bw)
    return out


def test_healthy_star_flags_nothing():
    topo = star(8, shape=GBIT)
    d = diagnose(topo, _matrix(topo))
    assert not d.flagged and d.suspect_links == () and d.suspect_hosts == ()


def test_one_tenth_rate_on_one_direction_names_exactly_that_link():
    topo = star(8, shape=GBIT)
    d = diagnose(topo, _matrix(topo, slow_link=("h3", "s0"), slow_factor=0.1))
    assert [x.label() for x in d.suspect_links] == ["h3->s0"] and d.suspect_link_indices == (3,)
    assert d.suspect_hosts == ("h3",)
    assert {(p.measurement.src, p.measurement.dst) for p in d.pairs if p.flagged} == {
        ("h3", h) for h in [f"h{i}" for i in range(8)] if h != "h3"}


def test_added_delay_on_a_switch_port_names_that_direction():
    topo = star(8, shape=GBIT)
    d = diagnose(topo, _matrix(topo, slow_link=("s0", "h5"), extra_delay_us=2000))
    assert sorted(x.label() for x in d.suspect_links) == ["h5->s0", "s0->h5"]
    assert d.suspect_link_indices == (5,)


def test_leaf_spine_paths_use_both_spines_and_localise_a_fabric_link():
    topo = leaf_spine(2, 4, 2, shape=GBIT)
    links = path_links(topo, "h0", "h4")
    assert {(d.src, d.dst) for d in links} == {("h0", "leaf0"), ("leaf0", "spine0"), ("leaf0", "spine1"),
                                              ("spine0", "leaf1"), ("spine1", "leaf1"), ("leaf1", "h4")}
    d = diagnose(topo, _matrix(topo, slow_link=("h6", "leaf1"), slow_factor=0.2))
    assert [x.label() for x in d.suspect_links] == ["h6->leaf1"]
