"""Shared by the engine's in-process tests: ranks on threads over one socketpair mesh."""

import threading


def run_ranks(rank_main, ranks: int, mesh) -> None:
    """``rank_main(rank)`` on a thread per rank, joined, then every socket of ``mesh`` closed."""
    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for peers in mesh:
        for link in peers.values():
            link.close()
