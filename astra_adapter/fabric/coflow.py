"""A ring step as one flow: the *coflow ring* model (pure, numpy; issue #36 item 6).

NCCL's ring is pipelined: each connection moves its step's data in chunks through ``NCCL_STEPS`` slots, a rank
forwarding a chunk as soon as it has it, so in steady state every connection of a ring carries data at the ring's
bottleneck rate - a connection whose links are free does not finish its part of a step early and idle, it waits
for the chunks coming through the slow one. In max-min terms a ring step is then ONE flow with one rate crossing
every link any of the step's connections crosses, loading each link by (the step's connections on it) x the rate:
one route whose loads are the sum of its member routes' loads (:meth:`FabricNetwork.coflow_route`). Its members
carry equal bytes, so they all end at one instant - one event per step where the lock-step model
(:attr:`RingModel.LOCKSTEP`, each connection its own max-min flow, the step ending with the slowest) has one per
distinct rate class, and the solve sees one route for a dense ring instead of one per rank.

Which steps: those of a ring-like op (:func:`astra_adapter.fabric.chains.ring_like`: every step the same
connections, each rank sending at most one flow and receiving at most one) whose flows all carry the same bytes;
any other step (and every step of any other op: all-to-alls, trees, point-to-point) is unchanged. A coflow step
keeps its lock-step latency (the most messages a rank posts, the longest path delay) and lists every rank of its
members as busy until it ends (``StepFlows.ranks``), so on a ring's last step its ranks leave together.

Not with ring chains or standing queues (a job mix's estimate, :func:`astra_adapter.fabric.mix.mix_play_params`):
the chains model each connection on its own chunk - a finer model of the same pipelining - and the queues read
each flow's own path and rate (``FabricParams`` refuses the pair; a mix plays lock step). An NCCL plan's step over
several channels' rings (:mod:`astra_adapter.fabric.nccl_flows`) sends several flows per rank: not ring-like, lock
step.

:data:`RING_MODEL` (coflow) is what the estimates play unless told (``estimate_fabric``, ``genie estimate --mode
fabric --ring-model``, the experiment's fabric row); ``FabricParams()`` - the engines, calibration's fits, job
mixes - stays lock step.
"""

from __future__ import annotations

from enum import Enum

import numpy as np

from genie.core.errors import parse_enum_value


class RingModel(Enum):
    """How a ring step's connections share the fabric: ``lockstep`` - each its own max-min flow, the step ending
    when its slowest ends; ``coflow`` - the step one flow at its bottleneck rate (NCCL's pipelined ring, above)."""

    LOCKSTEP = "lockstep"
    COFLOW = "coflow"

    @classmethod
    def parse(cls, text: str, *, path: str | None = None) -> "RingModel":
        return parse_enum_value(cls, text, "ring model", path=path)


RING_MODEL = RingModel.COFLOW  # the estimates' FabricParams.ring_model unless told (genie estimate --ring-model): measured
# 3-5.5x less CPU on the 512-1024-rank MoE benchmark, the accuracy experiments' estimates unchanged or closer to their
# replays (benchmarks/README.md "The coflow ring model"); FabricParams itself (the engines, calibration's fits, job
# mixes) stays lock step


def coflow_steps(steps: tuple, network, params) -> tuple:
    """``steps`` (an op's :class:`~astra_adapter.fabric.flows.StepFlows`) as they are under lock step
    (``params.ring_model``); under the coflow ring model with each step of a ring-like op whose
    flows carry equal bytes as one flow on the members' summed route (``network``'s
    :meth:`~astra_adapter.fabric.network.FabricNetwork.coflow_route`); the others, and any other op's, as they are.
    Identical steps stay one object (the engines memoise on it)."""
    from astra_adapter.fabric.chains import ring_like

    if params.ring_model is RingModel.LOCKSTEP or not ring_like(steps):
        return steps
    out, seen = [], {}
    for s in steps:
        hit = seen.get(id(s))
        if hit is None:
            hit = seen[id(s)] = _coflow_step(s, network) if len(s.routes) > 1 and \
                np.all(s.bytes == s.bytes[0]) else s
        out.append(hit)
    return tuple(out)


def _coflow_step(step, network):
    routes = np.array([network.coflow_route(step.routes)], dtype=np.int64)
    out = type(step)(routes, step.src[:1], step.dst[:1], step.bytes[:1].copy(), step.latency_ns)
    out.ranks = np.union1d(step.src, step.dst)  # every member rank busy until the one flow ends
    return out
