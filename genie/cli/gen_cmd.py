"""`genie trace gen`: generate a training workload trace from model and device presets."""

from __future__ import annotations

from typing import Optional

import typer

from genie.core.errors import InputError
from genie.core.units import format_size
from genie.workloads.analysis import check, summarize
from genie.cli.flags import flag_names
from genie.workloads.generators.options import GeneratorOptions, generate_setup, option_default, resolve
from genie.workloads.loader import output_format, save_trace
from genie.workloads.presets import DEVICES, MODELS

app = typer.Typer(help="Generate workload traces.", no_args_is_help=True)

_D = option_default  # the defaults are GeneratorOptions' (an experiment file's workload.generate too)


def _option(path: str | None) -> str | None:
    """The flag of a generator option (errors name the option: ``top_k`` -> ``--top-k``)."""
    if path is None or path.startswith("--"):
        return path
    return "--" + path.replace("_", "-")


@app.command("gen")
def gen(
    model: str = typer.Option(..., "--model", help=f"Model preset: {', '.join(MODELS)}."),
    out: str = typer.Option(..., "--out", help="Output: an ET prefix (OUT.<rank>.et) or a JSON/YAML file."),
    to: str = typer.Option("et", "--to", help="et | json | yaml."),
    device: str = typer.Option(_D("device"), "--device", help=f"Device preset: {', '.join(DEVICES)}."),
    efficiency: float = typer.Option(_D("efficiency"), "--efficiency",
                                     help="Achieved fraction of peak FLOP/s and HBM bandwidth."),
    dtype: str = typer.Option(_D("dtype"), "--dtype",
                              help="bf16 | fp16 | fp32 | tf32 | fp8 (weights, activations, gradients)."),
    dp: int = typer.Option(_D("dp"), "--dp", help="Data-parallel replicas."),
    tp: int = typer.Option(_D("tp"), "--tp", help="Tensor-parallel ranks (Megatron)."),
    pp: int = typer.Option(_D("pp"), "--pp", help="Pipeline stages (1F1B)."),
    ep: int = typer.Option(_D("ep"), "--ep", help="Expert-parallel ranks (MoE; divides --dp)."),
    micro_batches: int = typer.Option(_D("micro_batches"), "--micro-batches", help="Micro-batches per iteration."),
    batch: int = typer.Option(_D("batch"), "--batch", help="Samples per micro-batch and data-parallel replica."),
    seq: Optional[int] = typer.Option(_D("seq"), "--seq", help="Sequence length (default: the model's)."),
    layers: Optional[int] = typer.Option(_D("layers"), "--layers", help="Transformer layers (default: the model's)."),
    experts: Optional[int] = typer.Option(_D("experts"), "--experts",
                                          help="Experts per MoE layer (makes a dense model MoE)."),
    top_k: Optional[int] = typer.Option(_D("top_k"), "--top-k", help="Experts per token."),
    moe_every: Optional[int] = typer.Option(_D("moe_every"), "--moe-every", help="Every n-th layer is an MoE layer."),
    dp_mode: str = typer.Option(_D("dp_mode"), "--dp-mode", help="ddp | fsdp (ZeRO-3)."),
    bucket_mb: float = typer.Option(_D("bucket_mb"), "--bucket-mb", help="DDP bucket cap in MiB."),
    sequence_parallel: bool = typer.Option(_D("sequence_parallel"), "--sequence-parallel",
                                           help="Megatron sequence parallelism."),
    order: str = typer.Option(_D("order"), "--order", help="Rank order, fastest first: tp-pp-dp | tp-dp-pp."),
    iterations: int = typer.Option(_D("iterations"), "--iterations", help="Training iterations."),
    ranks: Optional[int] = typer.Option(_D("ranks"), "--ranks",
                                        help="The same workload at this many ranks: --dp becomes ranks / (tp x pp), "
                                             "every other option unchanged (what-if at scale)."),
    routing_skew: float = typer.Option(_D("routing_skew"), "--routing-skew",
                                       help="MoE: Zipf exponent of expert popularity; > 0 makes the all-to-alls "
                                            "uneven (0: even routing)."),
    routing_seed: int = typer.Option(_D("routing_seed"), "--routing-seed", help="MoE: seed of the skewed routing."),
) -> None:
    """Generate a DP/FSDP/TP/PP/EP training trace (see docs/generators.md)."""
    with flag_names({"to": "--to"}):
        fmt = output_format(to, out)
    try:
        options = GeneratorOptions.parse(dict(
            model=model, device=device, efficiency=efficiency, dtype=dtype, dp=dp, tp=tp, pp=pp, ep=ep,
            micro_batches=micro_batches, batch=batch, seq=seq, layers=layers, experts=experts, top_k=top_k,
            moe_every=moe_every, dp_mode=dp_mode, bucket_mb=bucket_mb, sequence_parallel=sequence_parallel,
            order=order, iterations=iterations, ranks=ranks, routing_skew=routing_skew, routing_seed=routing_seed))
        setup = resolve(options)
        trace = generate_setup(setup)
    except InputError as exc:
        raise InputError(exc.detail, source=exc.source, path=_option(exc.path)) from None
    check(trace, source="generated trace")
    paths = save_trace(trace, out, to=fmt)
    s = summarize(trace)
    typer.echo(f"wrote {len(paths)} file(s): {paths[0]}{' ...' if len(paths) > 1 else ''}")
    typer.echo(f"{setup.model.name} on {trace.num_ranks} x {device}: {setup.parallelism.label()}, "
               f"{setup.config.dp_mode.value}, {s.num_nodes} nodes, {len(trace.groups)} groups")
    for name, size in sorted(s.bytes_by_collective.items()):
        typer.echo(f"  {name:<16} {s.count_by_collective.get(name, 0):>7} ops  {size:>16} B  ({format_size(size)})")
    typer.echo(f"compute: busiest rank {s.compute_max_rank_ns / 1e3:.3f} us; critical path with zero-cost comm "
               f"{(s.critical_path_ns or 0) / 1e3:.3f} us")
