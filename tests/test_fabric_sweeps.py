"""The flat engine's earliest-end sweep without a division per flow (astra_adapter/fabric/fairshare_live.pxi,
``LiveRates._earliest_listed``): each flow's bytes left times its route's inverse rate filters the flows whose
quotient can be the least, and only those are divided - so the minimum must be the divided sweep's float, bit for
bit, also where quotients tie within an ulp (the products then order the flows differently), where an inverse is
unsafe (a rate outside the filter's range, or infinite: those flows always divided), near overflow (every flow
divided) and with more candidates than the first buffer holds."""

from __future__ import annotations

import numpy as np
import pytest

fairshare_core = pytest.importorskip("astra_adapter.fabric.fairshare_core")
LiveRates = fairshare_core.LiveRates


def _one_link_per_route(rates: np.ndarray, unbounded: int = 0):
    """A LiveRates whose route r alone crosses link r (capacity ``rates[r]``, so its rate after a solve), plus
    ``unbounded`` routes crossing nothing (rate inf); each route one flow, moving."""
    n = len(rates) + unbounded
    ptr = np.concatenate([np.arange(len(rates) + 1), np.full(unbounded, len(rates))]).astype(np.int64)
    res = np.arange(len(rates), dtype=np.int64)
    w = np.ones(len(rates))
    live = LiveRates(np.asarray(rates, dtype=float), 0.0)
    routes = np.arange(n, dtype=np.int64)
    active = np.ones(n, dtype=np.uint8)
    live.count_flows(routes, active, 0, n, 1, n)
    live.solve(ptr, res, w)
    return live, routes, active


def _check(live, routes, active, left, slot_len=7):
    """earliest_end_listed over slots of ``slot_len`` flows (every flow listed) against earliest_end_of (a
    division per flow) and numpy's min of the quotients, bit for bit."""
    n = len(routes)
    starts = np.arange(0, n, slot_len, dtype=np.int64)
    counts = np.diff(np.append(starts, n)).astype(np.int64)
    listed = np.arange(n, dtype=np.int64)
    got = live.earliest_end_listed(left, routes, starts, counts, listed)
    divided = live.earliest_end_of(left, active, routes, starts, counts)
    rates = live.flow_rates(routes, active)
    with np.errstate(divide="ignore", invalid="ignore"):
        quotients = left / rates
    quotients = quotients[~np.isnan(quotients)]
    want = float(np.min(quotients)) if len(quotients) else float("inf")
    assert got == divided == want or (np.isnan(got) and np.isnan(divided))
    return got


@pytest.mark.parametrize("seed", range(6))
def test_quotients_tied_within_ulps_give_the_divided_minimum(seed):
    """Bytes left set so that every quotient lies within a few ulps of one value: the products order these flows
    differently from their quotients in many cases, and the least quotient is still the one returned."""
    rng = np.random.default_rng(seed)
    rates = rng.uniform(0.05, 150.0, 400)
    live, routes, active = _one_link_per_route(rates)
    target = rng.uniform(1e3, 1e9)
    misordered = 0
    for _ in range(50):
        left = target * rates
        left = left * (1 + rng.integers(-4, 5, len(left)) * 2.0 ** -52)
        _check(live, routes, active, left)
        quotients, products = left / rates, left * (1.0 / rates)
        misordered += int(np.argmin(quotients) != np.argmin(products))
    assert misordered > 0  # (the products alone would have answered wrong here)


def test_unsafe_inverses_and_unbounded_routes_are_divided():
    """Rates outside the filter's range (NaN inverses) and routes crossing nothing (rate inf, quotient 0) take
    part exactly as in the divided sweep."""
    rates = np.array([1e-290, 2.0, 3.0, 1e285, 5.0])
    live, routes, active = _one_link_per_route(rates)
    left = np.array([1e-285, 10.0, 12.0, 1e290, 30.0])  # the tiny rate's quotient 1e5, the huge one's 1e5 too
    assert _check(live, routes, active, left) == 4.0
    left[0] = 1e-290 * 3.0  # its quotient (3.0) now the least: found although its product is NaN
    assert _check(live, routes, active, left) == pytest.approx(3.0)
    live, routes, active = _one_link_per_route(np.array([2.0, 4.0]), unbounded=1)
    assert _check(live, routes, active, np.array([10.0, 10.0, 7.0]), slot_len=2) == 0.0


def test_near_overflow_every_flow_is_divided():
    rates = np.array([1e-5, 2e-5, 1.0])
    live, routes, active = _one_link_per_route(rates)
    assert _check(live, routes, active, np.array([1e296, 1e296, 1e300])) == 1e300
    assert _check(live, routes, active, np.array([np.inf, np.inf, np.inf])) == np.inf


def test_more_candidates_than_the_first_buffer_and_nan_bytes():
    """Quotients descending in the flows' order (each flow a new least product: every one a candidate, the buffer
    grown several times), then NaN bytes left (ignored by both sweeps)."""
    n = 5000
    rates = np.linspace(1.0, 2.0, n)
    live, routes, active = _one_link_per_route(rates)
    left = np.linspace(1e6, 1.0, n) * rates
    assert _check(live, routes, active, left, slot_len=n) == left[-1] / rates[-1]
    left[-1] = np.nan
    _check(live, routes, active, left, slot_len=13)
    assert np.isinf(_check(live, routes, active, np.full(n, np.nan)))
