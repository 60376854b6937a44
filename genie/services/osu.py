"""OSU micro-benchmarks' point-to-point tests as bench sweeps (`genie bench --osu TEST`): each is a send_recv
schedule the bench service already runs, on 2 ranks (mbw_mr: pairs of ranks, all at once).

- latency: ping-pong (`Algorithm.PING_PONG`), latency = round trip / 2, as osu_latency;
- bw: rank 0 streams to rank 1 (`Algorithm.P2P`, iterations back to back), bandwidth = size / time;
- bibw: both directions at once (the ring shift on 2 ranks), bandwidth = 2 x size / time;
- mbw_mr: rank i streams to rank i + pairs, every pair at once; aggregate MB/s and messages/s.

OSU's window (64 messages in flight before an ack) has no counterpart: genie's iterations run back to back
without an ack, so the sender is limited only by the transport, which is what the window approximates."""

from __future__ import annotations

from dataclasses import replace

from genie.core.collective import Algorithm, Collective
from genie.core.errors import InputError
from genie.measure.osu import OsuTest


_ALGORITHMS = {OsuTest.LATENCY: Algorithm.PING_PONG, OsuTest.BW: Algorithm.P2P, OsuTest.BIBW: Algorithm.RING,
               OsuTest.MBW_MR: Algorithm.P2P}


def osu_request(test: OsuTest, request):
    """`request` (a genie.services.bench.BenchRequest) turned into `test`'s sweep: send_recv with the test's
    algorithm, on 2 ranks, or on `2 x pairs` ranks for mbw_mr (pairs: request.ranks // 2, default 1)."""
    if request.min_bytes < 4:
        raise InputError("genie moves 4-byte elements: OSU sizes start at 4 B", path="min_bytes")
    ranks = 2
    pairs = None
    if test is OsuTest.MBW_MR:
        pairs = max(1, (request.ranks or 2) // 2)
        ranks = 2 * pairs
    elif request.ranks not in (None, 2):
        raise InputError(f"OSU's {test.value} test runs on 2 ranks, got {request.ranks}", path="ranks")
    return replace(request, collectives=(Collective.SEND_RECV,), algorithm=_ALGORITHMS[test], ranks=ranks,
                   pairs=pairs, in_place=False)
