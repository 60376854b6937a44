"""Where each rank of a run sits: on a testbed's hosts, or all on loopback. Below the services that stage a
target (genie.services.target), so that the host probe can place its scratch runs too."""

from __future__ import annotations

from genie.core.errors import InputError
from genie.core.placement import RankPlacement
from genie.core.testbed import TestbedInfo


def placements_for(testbed: TestbedInfo, ranks: int | None) -> list[RankPlacement]:
    """Global ranks are numbered host by host in topology order; `ranks` takes the first N."""
    hosts = testbed.topology.rank_hosts()
    n = len(hosts) if ranks is None else ranks
    if n < 1 or n > len(hosts):
        raise InputError(f"testbed {testbed.name} has {len(hosts)} ranks, asked for {n}", path="ranks")
    out = []
    for rank, host in enumerate(hosts[:n]):
        ep = testbed.endpoint(host)
        out.append(RankPlacement(rank=rank, host=host, netns=ep.netns, address=ep.address))
    return out


def loopback_placements(ranks: int) -> list[RankPlacement]:
    """All ranks in the current namespace on 127.0.0.1: no root needed (tests, quick checks)."""
    if ranks < 1:
        raise InputError("must be >= 1", path="ranks")
    return [RankPlacement(rank=r, host="localhost", netns=None, address="127.0.0.1") for r in range(ranks)]
