"""`genie trace gen`: generate a training workload trace from model and device presets."""

from __future__ import annotations

from typing import Optional

import typer

from genie.core.errors import InputError
from genie.core.units import format_size
from genie.workloads.analysis import check, summarize
from genie.workloads.generators import DataParallelMode, Parallelism, RankOrder, TrainingConfig, generate
from genie.cli.flags import flag_names
from genie.workloads.loader import output_format, save_trace
from genie.workloads.presets import DEVICES, MODELS, Dtype, device_preset, model_preset

app = typer.Typer(help="Generate workload traces.", no_args_is_help=True)

# generator field -> the option that sets it (errors name the option)
_OPTION = {"micro_batch_size": "--batch", "seq_len": "--seq", "seq": "--seq", "num_layers": "--layers",
           "num_experts": "--experts", "top_k": "--top-k", "moe_every": "--moe-every", "dp_mode": "--dp-mode",
           "bucket_size_bytes": "--bucket-mb", "first_bucket_size_bytes": "--bucket-mb", "order": "--order",
           "micro_batches": "--micro-batches"}


def _option(path: str | None) -> str | None:
    if path is None or path.startswith("--"):
        return path
    return _OPTION.get(path, "--" + path.replace("_", "-"))


@app.command("gen")
def gen(
    model: str = typer.Option(..., "--model", help=f"Model preset: {', '.join(MODELS)}."),
    out: str = typer.Option(..., "--out", help="Output: an ET prefix (OUT.<rank>.et) or a JSON/YAML file."),
    to: str = typer.Option("et", "--to", help="et | json | yaml."),
    device: str = typer.Option("a100", "--device", help=f"Device preset: {', '.join(DEVICES)}."),
    efficiency: float = typer.Option(0.4, "--efficiency", help="Achieved fraction of peak FLOP/s and HBM bandwidth."),
    dtype: str = typer.Option("bf16", "--dtype", help="bf16 | fp16 | fp32 | tf32 | fp8 (weights, activations, "
                                                      "gradients)."),
    dp: int = typer.Option(1, "--dp", help="Data-parallel replicas."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel ranks (Megatron)."),
    pp: int = typer.Option(1, "--pp", help="Pipeline stages (1F1B)."),
    ep: int = typer.Option(1, "--ep", help="Expert-parallel ranks (MoE; divides --dp)."),
    micro_batches: int = typer.Option(1, "--micro-batches", help="Micro-batches per iteration."),
    batch: int = typer.Option(1, "--batch", help="Samples per micro-batch and data-parallel replica."),
    seq: Optional[int] = typer.Option(None, "--seq", help="Sequence length (default: the model's)."),
    layers: Optional[int] = typer.Option(None, "--layers", help="Transformer layers (default: the model's)."),
    experts: Optional[int] = typer.Option(None, "--experts", help="Experts per MoE layer (makes a dense model MoE)."),
    top_k: Optional[int] = typer.Option(None, "--top-k", help="Experts per token."),
    moe_every: Optional[int] = typer.Option(None, "--moe-every", help="Every n-th layer is an MoE layer."),
    dp_mode: str = typer.Option("ddp", "--dp-mode", help="ddp | fsdp (ZeRO-3)."),
    bucket_mb: float = typer.Option(25.0, "--bucket-mb", help="DDP bucket cap in MiB."),
    sequence_parallel: bool = typer.Option(False, "--sequence-parallel", help="Megatron sequence parallelism."),
    order: str = typer.Option("tp-pp-dp", "--order", help="Rank order, fastest first: tp-pp-dp | tp-dp-pp."),
    iterations: int = typer.Option(1, "--iterations", help="Training iterations."),
) -> None:
    """Generate a DP/FSDP/TP/PP/EP training trace (see docs/generators.md)."""
    with flag_names({"to": "--to"}):
        fmt = output_format(to, out)
    try:
        chosen = model_preset(model).with_overrides(num_layers=layers, seq_len=seq, num_experts=experts, top_k=top_k,
                                                    moe_every=moe_every)
        config = TrainingConfig(micro_batch_size=batch, micro_batches=micro_batches, dtype=Dtype.parse(dtype),
                                dp_mode=DataParallelMode.parse(dp_mode), bucket_size_bytes=round(bucket_mb * 2**20),
                                sequence_parallel=sequence_parallel, iterations=iterations)
        parallelism = Parallelism(dp=dp, tp=tp, pp=pp, ep=ep, order=RankOrder.parse(order))
        trace = generate(chosen, device_preset(device).with_efficiency(efficiency), parallelism, config)
    except InputError as exc:
        raise InputError(exc.detail, source=exc.source, path=_option(exc.path)) from None
    check(trace, source="generated trace")
    paths = save_trace(trace, out, to=fmt)
    s = summarize(trace)
    typer.echo(f"wrote {len(paths)} file(s): {paths[0]}{' ...' if len(paths) > 1 else ''}")
    typer.echo(f"{chosen.name} on {trace.num_ranks} x {device}: {parallelism.label()}, {config.dp_mode.value}, "
               f"{s.num_nodes} nodes, {len(trace.groups)} groups")
    for name, size in sorted(s.bytes_by_collective.items()):
        typer.echo(f"  {name:<16} {s.count_by_collective.get(name, 0):>7} ops  {size:>16} B  ({format_size(size)})")
    typer.echo(f"compute: busiest rank {s.compute_max_rank_ns / 1e3:.3f} us; critical path with zero-cost comm "
               f"{(s.critical_path_ns or 0) / 1e3:.3f} us")
