"""Issue #35 item 11: the sizes of a bench that bucket links can carry faster than a wire (one rule, pure)."""

from __future__ import annotations

from genie.core.dilation import TimeDilation
from genie.core.testbed import LinkModel
from genie.testbed.shaping import bucket_burst, htb_class
from genie.topology import load_topology

SIZES = [1024 * 2**i for i in range(12)]  # 1 KiB .. 2 MiB


def _star(rate: str, delay: str = "") -> object:
    extra = f", delay: {delay}" if delay else ""
    return load_topology(f"name: t\nhosts: [h0, h1]\nswitches: [s0]\nlinks: [{{endpoints: [h0, s0], bandwidth: "
                          f"{rate}{extra}}}, {{endpoints: [h1, s0], bandwidth: {rate}{extra}}}]\n", source="t.yaml")


def test_undilated_1_gbit_links_burst_up_to_their_rate_bucket() -> None:
    burst = bucket_burst(_star("1gbit"), LinkModel.BUCKET, TimeDilation(), SIZES)
    assert burst is not None
    assert burst.burst_bytes == 1_000_000 == htb_class("n", "e", 10**9, 1500).burst_bytes  # 8 ms at 1 Gbit/s
    assert burst.sizes_bytes == tuple(s for s in SIZES if s <= 1_000_000)  # 1 KiB .. 512 KiB, 64 KiB among them
    assert 65536 in burst.sizes_bytes and 1024 * 1024 not in burst.sizes_bytes
    assert "1KiB-512KiB" in burst.describe() and "~977KiB token-bucket burst" in burst.describe()


def test_dilation_shrinks_the_burst_to_the_ceil_bucket_floor() -> None:
    # at N = 10 the real rate is 100 Mbit/s: 8 ms of it is 100 kB, under the 128 KiB floor of the buckets
    burst = bucket_burst(_star("1gbit"), LinkModel.BUCKET, TimeDilation(factor=10.0), SIZES)
    assert burst is not None and burst.burst_bytes == 128 * 1024
    assert burst.sizes_bytes[-1] == 128 * 1024


def test_no_note_for_wires_unshaped_links_or_sizes_past_the_burst() -> None:
    assert bucket_burst(_star("1gbit"), LinkModel.WIRE, TimeDilation(), SIZES) is None
    unshaped = load_topology("name: t\nhosts: [h0, h1]\nlinks: [{endpoints: [h0, h1]}]\n", source="t.yaml")
    assert bucket_burst(unshaped, LinkModel.BUCKET, TimeDilation(), SIZES) is None
    assert bucket_burst(_star("1gbit"), LinkModel.BUCKET, TimeDilation(), [2 * 1024 * 1024, 64 * 1024 * 1024]) is None


def test_the_fastest_link_sets_the_range() -> None:
    topo = load_topology("name: t\nhosts: [h0, h1, h2]\nswitches: [s0]\nlinks: [{endpoints: [h0, s0], bandwidth: "
                          "10gbit}, {endpoints: [h1, s0], bandwidth: 100mbit}, {endpoints: [h2, s0]}]\n",
                          source="t.yaml")
    burst = bucket_burst(topo, LinkModel.BUCKET, TimeDilation(), [4 * 1024 * 1024, 16 * 1024 * 1024])
    assert burst is not None and burst.burst_bytes == 10_000_000 and burst.sizes_bytes == (4 * 1024 * 1024,)
