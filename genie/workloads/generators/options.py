"""The generator's options as `genie trace gen` and an experiment file's ``workload.generate`` spell them, with
their defaults: one definition for both. Errors name the option (``layers``, not the model's ``num_layers``);
each caller maps that to its own spelling (``--layers``, ``workload.generate.layers``)."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Any

from genie.core.errors import InputError
from genie.core.trace import Trace
from genie.workloads.generators import generate
from genie.workloads.generators.config import DataParallelMode, TrainingConfig
from genie.workloads.generators.layout import Parallelism, RankOrder
from genie.workloads.presets import Device, Dtype, Model, device_preset, model_preset


@dataclass(frozen=True)
class GeneratorOptions:
    """One training job to generate: presets by name, their overrides (None: the preset's) and the layout."""

    model: str  # a preset of genie.workloads.presets.MODELS
    device: str = "a100"  # a preset of DEVICES
    efficiency: float = 0.4  # achieved fraction of peak FLOP/s and HBM bandwidth
    dtype: Dtype = Dtype.BF16
    dp: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1
    micro_batches: int = 1  # per iteration
    batch: int = 1  # samples per micro-batch and data-parallel replica
    seq: int | None = None
    layers: int | None = None
    experts: int | None = None
    top_k: int | None = None
    moe_every: int | None = None
    dp_mode: DataParallelMode = DataParallelMode.DDP
    bucket_mb: float = 25.0  # DDP bucket cap in MiB
    sequence_parallel: bool = False
    order: RankOrder = RankOrder.TP_PP_DP
    iterations: int = 1
    ranks: int | None = None  # the same workload at this many ranks: dp = ranks / (tp x pp), the rest unchanged
    routing_skew: float = 0.0  # MoE: Zipf exponent of expert popularity; > 0 makes the all-to-alls uneven
    routing_seed: int = 0

    @classmethod
    def parse(cls, values: Mapping[str, Any]) -> "GeneratorOptions":
        """From option name -> value as typed (the enums as their text); missing options take their defaults.
        Each value is checked against its field's type (`_typed`): InputError naming the option for an unknown
        option, a value of the wrong kind or a bad enum text."""
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = [str(name) for name in values if name not in known]
        if unknown:
            raise InputError(f"unknown option (expected one of {', '.join(known)})", path=unknown[0])
        hints = typing.get_type_hints(cls)
        return cls(**{name: _typed(name, hints[name], value) for name, value in values.items()})


def _typed(name: str, hint: Any, value: object) -> Any:
    """`value` of option `name` as its field's type `hint` (``int``, ``float | None``, an enum ...): an integer is
    an int (not a bool), a number an int or a float (not a bool), a flag a bool, a name a str, an enum its member
    or its text; None only where the field allows it. InputError naming the option otherwise."""
    kinds = typing.get_args(hint) or (hint,)
    if value is None:
        if type(None) in kinds:
            return None
        raise InputError("expected a value, got none", path=name)
    (kind,) = [k for k in kinds if k is not type(None)]
    if isinstance(kind, type) and issubclass(kind, Enum):
        return value if isinstance(value, kind) else kind.parse(str(value))  # type: ignore[attr-defined]
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise InputError(f"expected true or false, got {value!r}", path=name)
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise InputError(f"expected an integer, got {value!r}", path=name)
    if kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise InputError(f"expected a number, got {value!r}", path=name)
    if kind is str:
        if isinstance(value, str):
            return value
        raise InputError(f"expected a name, got {value!r}", path=name)
    raise TypeError(f"option {name}: no check for values of type {hint!r}")


GENERATOR_OPTIONS = tuple(f.name for f in dataclasses.fields(GeneratorOptions))


def option_default(name: str) -> Any:
    """The default of option `name` as typed on a command line (an enum as its text)."""
    default = next(f.default for f in dataclasses.fields(GeneratorOptions) if f.name == name)
    return getattr(default, "value", default)


@dataclass(frozen=True)
class GeneratorSetup:
    """The options resolved: presets looked up and overridden, the layout and training checked."""

    model: Model
    device: Device
    parallelism: Parallelism
    config: TrainingConfig


# a generator field -> the option that sets it
_OPTION_OF_FIELD = {"num_layers": "layers", "seq_len": "seq", "micro_batch_size": "batch", "num_experts": "experts",
                    "bucket_size_bytes": "bucket_mb", "first_bucket_size_bytes": "bucket_mb"}


@contextmanager
def _naming_options() -> Iterator[None]:
    try:
        yield
    except InputError as exc:
        if exc.path in _OPTION_OF_FIELD:
            raise InputError(exc.detail, source=exc.source, path=_OPTION_OF_FIELD[exc.path]) from None
        raise


def _scaled_dp(options: GeneratorOptions) -> int:
    """``options.dp``, or - with ``ranks`` - the data-parallel replicas that make ``ranks`` ranks (each rank's
    model shard, batch and buckets unchanged: the same workload, more replicas)."""
    if options.ranks is None:
        return options.dp
    per_replica = options.tp * options.pp
    if isinstance(options.ranks, bool) or not isinstance(options.ranks, int) or options.ranks < 1 or \
            options.ranks % per_replica:
        raise InputError(f"expected a multiple of tp x pp = {per_replica}, got {options.ranks!r}", path="ranks")
    dp = options.ranks // per_replica
    if dp % options.ep:
        raise InputError(f"{options.ranks} ranks make dp = {dp}, which ep = {options.ep} does not divide",
                         path="ranks")
    return dp


def resolve(options: GeneratorOptions) -> GeneratorSetup:
    with _naming_options():
        model = model_preset(options.model).with_overrides(
            num_layers=options.layers, seq_len=options.seq, num_experts=options.experts, top_k=options.top_k,
            moe_every=options.moe_every)
        config = TrainingConfig(micro_batch_size=options.batch, micro_batches=options.micro_batches,
                                dtype=options.dtype, dp_mode=options.dp_mode,
                                bucket_size_bytes=round(options.bucket_mb * 2**20),
                                sequence_parallel=options.sequence_parallel, iterations=options.iterations,
                                routing_skew=options.routing_skew, routing_seed=options.routing_seed)
        parallelism = Parallelism(dp=_scaled_dp(options), tp=options.tp, pp=options.pp, ep=options.ep,
                                  order=options.order)
        device = device_preset(options.device).with_efficiency(options.efficiency)
    return GeneratorSetup(model, device, parallelism, config)


def generate_setup(setup: GeneratorSetup) -> Trace:
    with _naming_options():
        return generate(setup.model, setup.device, setup.parallelism, setup.config)


def generate_from_options(options: GeneratorOptions) -> Trace:
    """The trace `genie trace gen` makes from these options; InputError naming the option."""
    return generate_setup(resolve(options))
