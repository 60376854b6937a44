"""MoE token routing with skew: how many tokens each expert-parallel rank sends each other one (pure, seeded).

Even routing (skew 0) sends every EP rank the same share: the generator then writes plain all-to-alls. With
``skew > 0`` expert popularity follows a Zipf law: the expert ranked ``r`` (0 the most popular) is chosen with
weight ``1 / (r + 1) ** skew``, the ranking a seeded permutation per (iteration, layer, micro-batch, EP group),
and each rank's ``tokens * top_k`` choices are a seeded multinomial draw over the experts. Tokens go to the rank
that holds the expert (experts split evenly, in order, over the EP group). So a popular expert's rank receives
more than its share (and computes longer), some pairs carry nothing at high skew, and every member computes the
same matrix from the seed: the sizes of the two ends of each pair agree by construction.
"""

from __future__ import annotations

RoutingMatrix = tuple[tuple[int, ...], ...]


def routing_matrix(*, tokens: int, top_k: int, experts: int, ep: int, skew: float, seed: int,
                   key: tuple[int, ...]) -> RoutingMatrix:
    """``m[i][j]``: tokens (each routed to ``top_k`` experts, one count per choice) EP position ``i`` sends
    position ``j``; every row adds up to ``tokens * top_k``."""
    if ep < 1 or experts % ep:
        raise ValueError(f"{experts} experts cannot be split over {ep} ranks")
    choices = tokens * top_k
    if skew <= 0:
        base, extra = divmod(choices, ep)
        return tuple(tuple(base + (1 if (j - i) % ep < extra else 0) for j in range(ep)) for i in range(ep))
    import numpy as np  # only for a skewed routing: an even one (and genie's start-up) does without

    ranking = np.random.default_rng(np.random.SeedSequence([seed, *key])).permutation(experts)
    weight = 1.0 / (ranking + 1.0) ** skew
    p = weight / weight.sum()
    rows = []
    for i in range(ep):
        rng = np.random.default_rng(np.random.SeedSequence([seed, *key, i, 1]))
        per_expert = rng.multinomial(choices, p)
        rows.append(tuple(int(x) for x in per_expert.reshape(ep, experts // ep).sum(axis=1)))
    return tuple(rows)
