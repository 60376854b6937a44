"""What the peers harness runs, as pure data: sizes, the iterations policy per size, the cases every system runs
and the `genie bench` invocations (bands of sizes sharing warmup/iterations and a constant step factor)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from genie.core.collective import Collective
from genie.core.units import parse_size_bytes

DEFAULT_SIZES = "1K-256M"
DEFAULT_FACTOR = 4
# up to this size: warmup / timed iterations (larger sizes take the last entry)
DEFAULT_POLICY = "1M:5/20,16M:2/10,64M:1/5,256M:1/2"
QUICK_SIZES = "1K-64M"
QUICK_FACTOR = 16
QUICK_POLICY = "1M:2/10,16M:1/5,64M:1/3"
SCALE_SIZES = "1K-16M"
SCALE_POLICY = "1M:1/5,16M:1/3"


@dataclass(frozen=True)
class Iterations:
    warmup: int
    iterations: int


@dataclass(frozen=True)
class Case:
    collective: Collective
    size_bytes: int
    warmup: int
    iterations: int

    def to_json(self) -> dict:
        return {"collective": self.collective.value, "size_bytes": self.size_bytes, "warmup": self.warmup,
                "iterations": self.iterations}


@dataclass(frozen=True)
class Band:
    """One `genie bench` invocation: -b min_bytes -e max_bytes -f factor -w warmup -n iterations."""

    min_bytes: int
    max_bytes: int
    factor: int
    warmup: int
    iterations: int


def parse_sizes(text: str, factor: int) -> list[int]:
    """``1K-256M`` (a geometric range by `factor`, as nccl-tests' -b/-e/-f) or ``1K,64K,64M`` (a list)."""
    text = text.strip()
    if "-" in text and "," not in text:
        low_text, high_text = text.split("-", 1)
        low, high = parse_size_bytes(low_text), parse_size_bytes(high_text)
        if factor < 2:
            raise ValueError(f"size factor must be >= 2, got {factor}")
        if not 0 < low <= high:
            raise ValueError(f"expected 0 < MIN <= MAX in {text!r}")
        sizes = [low]
        while sizes[-1] * factor <= high:
            sizes.append(sizes[-1] * factor)
        return sizes
    sizes = sorted({parse_size_bytes(part) for part in text.split(",") if part.strip()})
    if not sizes or sizes[0] <= 0:
        raise ValueError(f"expected sizes such as 1K-256M or 1K,64M, got {text!r}")
    return sizes


def parse_policy(text: str) -> list[tuple[int, Iterations]]:
    """``1M:5/20,16M:2/10`` -> [(1 MiB, 5 warmup / 20 timed), (16 MiB, 2 / 10)], sorted by size."""
    out: list[tuple[int, Iterations]] = []
    for part in text.split(","):
        if not part.strip():
            continue
        try:
            size_text, counts = part.split(":")
            warmup_text, iters_text = counts.split("/")
            size, warmup, iters = parse_size_bytes(size_text), int(warmup_text), int(iters_text)
        except ValueError:
            raise ValueError(f"expected SIZE:WARMUP/ITERS entries such as 1M:5/20, got {part.strip()!r}") from None
        if warmup < 0 or iters < 1:
            raise ValueError(f"expected WARMUP >= 0 and ITERS >= 1 in {part.strip()!r}")
        out.append((size, Iterations(warmup, iters)))
    if not out:
        raise ValueError("empty iterations policy")
    return sorted(out, key=lambda e: e[0])


def iterations_for(size_bytes: int, policy: Sequence[tuple[int, Iterations]]) -> Iterations:
    for limit, its in policy:
        if size_bytes <= limit:
            return its
    return policy[-1][1]


def check_sizes(sizes: Sequence[int], ranks: int) -> None:
    """Every size must split into float32 elements over the ranks (all_gather's input, all_to_all's blocks)."""
    for size in sizes:
        if size % (4 * ranks):
            raise ValueError(f"size {size} is not a multiple of 4 bytes x {ranks} ranks")


def cases(collectives: Sequence[Collective], sizes: Sequence[int],
          policy: Sequence[tuple[int, Iterations]]) -> list[Case]:
    """Collective by collective, sizes ascending (the order genie bench runs them)."""
    out = []
    for collective in collectives:
        for size in sorted(sizes):
            its = iterations_for(size, policy)
            out.append(Case(collective, size, its.warmup, its.iterations))
    return out


def bands(sizes: Sequence[int], policy: Sequence[tuple[int, Iterations]]) -> list[Band]:
    """Split ascending `sizes` into the fewest runs of consecutive sizes with one iterations setting and one
    integer step factor, each a `genie bench -b -e -f` sweep."""
    out: list[Band] = []
    ordered = sorted(sizes)
    i = 0
    while i < len(ordered):
        its = iterations_for(ordered[i], policy)
        j = i + 1
        factor = 0
        while j < len(ordered) and iterations_for(ordered[j], policy) == its:
            ratio, rest = divmod(ordered[j], ordered[j - 1])
            if rest or ratio < 2 or (factor and ratio != factor):
                break
            factor = ratio
            j += 1
        out.append(Band(ordered[i], ordered[j - 1], factor or 2, its.warmup, its.iterations))
        i = j
    return out
