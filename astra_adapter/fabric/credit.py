"""HTB's after-idle credit on the fabric model's links, played as a fluid (pure, numpy).

A testbed's rate-shaped link (``--links bucket``, the default without delays or dilation) is an HTB class with
two token buckets (:mod:`genie.core.htb`, the rule `genie.testbed.shaping` writes): the ceil bucket (depth
``cburst``, filled at ``ceil = 1.02 x rate``) and the rate bucket (depth ``burst``, filled at ``rate``); every
byte sent takes a token from both, and a bucket that is empty holds the link to its fill rate. So after an idle
spell the link sends at the device's speed until the ceil bucket is spent (its ``cburst`` leaves at once), then
at the ceil until the rate bucket is, then at the rate; the calibration's back-to-back sweeps see only the last.

Here every resource of a link shaped below the device's speed (:data:`DEVICE_RATE_BPS`, what an unshaped veth
carries in the model) has both buckets, full at time 0, and a *mode* that sets its capacity in the max-min
solve: ``BURST`` (both buckets hold tokens: the device's speed), ``CEIL`` (the ceil bucket is empty: the ceil),
``RATE`` (the rate bucket is empty: the rate). Between events the flows' rates are constant, so each bucket
moves linearly at (its fill rate - the link's load), capped at its depth; an event is a bucket running dry (the
flow engines take the earliest as a horizon), after which the mode and the capacity change and the rates are
solved again. A bucket held empty by a link loaded to its fill rate stays empty. The efficiency a calibration
fits scales the three speeds alike (the ceil and the device's speed are the calibrated rate times 1.02 and
times device / rate), the bucket depths are the testbed's bytes on the wire (what the flows move).

One message of ``S`` bytes after an idle spell, alone on a link whose buckets last: the burst leaves at the
device's speed ``D`` while the ceil bucket drains at ``D - ceil``, then the rest at the ceil, so it ends at
``(S - cburst) / ceil`` whatever ``D`` is (``tests/test_fabric_credit.py``).

The load on each link is summed the same way in every engine (:func:`link_load`: per distinct route in
ascending order, its flows' count times their rate), so the credit keeps the engines' results bit for bit where
their rates are (the flat engine's per-component solve: within its relative 1e-9).
"""

from __future__ import annotations

import numpy as np

from genie.core.htb import htb_buckets

from astra_adapter.fabric.queues import contended_load
from astra_adapter.fabric.network import UNSHAPED_RATE_BPS, FabricNetwork, LinkClass

DEVICE_RATE_BPS = UNSHAPED_RATE_BPS  # a link shaped at or above this has no credit (HTB cannot send faster)
BURST, CEIL, RATE = 0, 1, 2  # a credit link's mode
_DRY = 1e-9  # a bucket holding less than this fraction of its depth is empty
_FULL_LOAD = 1.0 - 1e-9  # a link loaded to this fraction of a bucket's fill rate keeps it empty


class LinkCredit:
    """The buckets of every credit link of one engine's fabric; :meth:`apply` writes the capacity each link's mode
    gives into the engine's capacity array (in place: the standing queues read the same array)."""

    def __init__(self, network: FabricNetwork, capacity: np.ndarray) -> None:
        index, ceil, device, cburst, burst = [], [], [], [], []
        for i, r in enumerate(network.resources):
            if not r.shaped or r.link_class is LinkClass.LOOPBACK or r.rate_bps >= DEVICE_RATE_BPS:
                continue
            b = htb_buckets(r.rate_bps)
            index.append(i)
            ceil.append(capacity[i] * (b.ceil_bps / r.rate_bps))
            device.append(capacity[i] * (DEVICE_RATE_BPS / r.rate_bps))
            cburst.append(float(b.cburst_bytes))
            burst.append(float(b.burst_bytes))
        self.index = np.array(index, dtype=np.int64)
        self.rate = capacity[self.index].copy()  # bytes per ns, calibrated
        self.ceil = np.array(ceil, dtype=float)
        self.device = np.array(device, dtype=float)
        self.cburst = np.array(cburst, dtype=float)
        self.burst = np.array(burst, dtype=float)
        n = len(index)
        # per bucket (row 0 the ceil bucket, row 1 the rate bucket) and link: its tokens, depth, fill rate, the
        # tokens below which it is empty, the load that holds it empty, and the mode it is empty in
        self._tokens = np.stack((self.cburst, self.burst)) if n else np.zeros((2, 0))  # full: idle before
        self._depth = self._tokens.copy()
        self._fill = np.stack((self.ceil, self.rate)) if n else np.zeros((2, 0))
        self._dry = _DRY * self._depth
        self._full = _FULL_LOAD * self._fill
        self._empty_in = np.array([[CEIL], [RATE]], dtype=np.int8)
        self.mode = np.full(n, BURST, dtype=np.int8)
        self.key = self.mode.tobytes()  # the modes, for the engines' memo keys (rates depend on them)
        self._speeds = np.stack((self.device, self.ceil, self.rate)) if n else np.zeros((3, 0))
        self._columns = np.arange(n)
        self.capacity = capacity
        self._x: tuple[np.ndarray | None, np.ndarray] = (None, np.zeros(n))  # (load, the links' load in it)
        self.apply()

    @property
    def c(self) -> np.ndarray:
        """The ceil bucket's tokens (bytes), per credit link."""
        return self._tokens[0]

    @property
    def b(self) -> np.ndarray:
        """The rate bucket's tokens (bytes), per credit link."""
        return self._tokens[1]

    def __bool__(self) -> bool:
        return bool(len(self.index))

    def sustained(self, capacity: np.ndarray) -> np.ndarray:
        """``capacity`` with every credit link at its rate, whatever its mode now: what a link carries once its
        buckets are spent (a ring connection's refill after its step's gap, astra_adapter.fabric.chains.ring_sides,
        outlasts the 131 KB a 1 Gbit/s host link's ceil bucket lets out at the device's speed)."""
        out = np.array(capacity, dtype=float)
        out[self.index] = self.rate
        return out

    def apply(self) -> None:
        """The capacity of every credit link in its mode, into the engine's array; which buckets can run dry."""
        self.capacity[self.index] = self._speeds[self.mode, self._columns]
        # the ceil bucket drains only in BURST (else it is empty), the rate bucket in BURST and CEIL
        self._draining = np.stack((self.mode == BURST, self.mode != RATE))

    def _link_load(self, load: np.ndarray) -> np.ndarray:
        """The credit links' part of ``load`` (kept for the next call with the same array: the advance after a
        horizon)."""
        if self._x[0] is not load:
            self._x = (load, load[self.index])
        return self._x[1]

    def horizon_ns(self, load: np.ndarray | None) -> float:
        """Time until a bucket runs dry under ``load`` (bytes per ns per resource; None: nothing moves)."""
        if load is None:
            return float("inf")
        over = self._link_load(load) - self._fill  # per bucket: how fast it drains (where > 0)
        draining = self._draining & (over > 0)
        if not draining.any():
            return float("inf")
        return float(np.min(self._tokens[draining] / over[draining]))

    def advance(self, load: np.ndarray | None, dt_ns: float) -> bool:
        """The buckets ``dt_ns`` on under ``load`` (None: nothing moves); True when some link's mode changed (its
        capacity is then written)."""
        if dt_ns <= 0:
            return False
        x = self._link_load(load) if load is not None else np.zeros(len(self.index))
        tokens = np.minimum(self._depth, self._tokens + (self._fill - x) * dt_ns)
        tokens[(tokens <= self._dry) | ((self.mode == self._empty_in) & (x >= self._full))] = 0.0
        self._tokens = tokens
        empty = tokens <= 0.0
        mode = np.where(empty[1], RATE, np.where(empty[0], CEIL, BURST)).astype(np.int8)
        if np.array_equal(mode, self.mode):
            return False
        self.mode = mode
        self.key = mode.tobytes()
        self.apply()
        return True


def link_load(res: np.ndarray, w: np.ndarray, lengths: np.ndarray, counts: np.ndarray, rates: np.ndarray,
              num_resources: int, flow_contention: float = 0.0) -> np.ndarray:
    """Bytes per ns on every resource from the moving flows, per distinct route in ascending order (so the same
    floats in any flow order): its ``counts`` flows at its per-flow rate (``rates``) over its loads, the routes'
    CSR rows gathered route by route (``res``, ``w``; ``lengths``: each route's number of entries -
    :meth:`astra_adapter.fabric.flows.FlowEngine._gather`)."""
    moved = np.bincount(res, weights=w * np.repeat(counts * rates, lengths), minlength=num_resources)
    if flow_contention <= 0:
        return moved
    # on the wire's scale, as the solve fills a link crossed by n flows (to rate / (1 + c(n - 1))) and as
    # StandingQueues.load_on reads it: a link the solve fills reads as full, so its empty buckets stay empty
    flows_on = np.bincount(res, weights=w * np.repeat(counts.astype(float), lengths), minlength=num_resources)
    return contended_load(moved, flows_on, flow_contention)
