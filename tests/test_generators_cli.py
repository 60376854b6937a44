"""`genie trace gen` (exit codes, files, one-line errors naming the option), format round trips of generated
traces, and the generated samples in traces/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from astra_adapter.experiment_spec import generate_workload, load_experiment
from cli_support import Result, run_genie
from genie.core.errors import InputError
from genie.workloads.analysis import check, summarize
from genie.workloads.chakra_et import read_et_set, write_et_set
from genie.workloads.generators import Parallelism, TrainingConfig, generate
from genie.workloads.loader import load_trace
from genie.workloads.native import read_native, write_native_json, write_native_yaml
from genie.workloads.presets import A100, model_preset

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "traces"
SMALL = ["--model", "gpt3-125m", "--layers", "2", "--seq", "128"]


def _message(done: Result) -> str:
    """The error text of a `genie trace gen` run without its "genie: error: " prefix."""
    return done.stderr.strip().removeprefix("genie: error: ")


def test_gen_writes_an_et_set(tmp_path: Path) -> None:
    done = run_genie("trace", "gen", *SMALL, "--dp", "2", "--tp", "2", "--pp", "2", "--micro-batches", "4", "--batch",
                     "2", "--out", str(tmp_path / "w"), "--to", "et")
    assert done.returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"w.{r}.et" for r in range(8)] + ["w.comm_group.json"]
    groups = json.loads((tmp_path / "w.comm_group.json").read_text())
    assert groups["tp0"] == [0, 1] and groups["pp0"] == [0, 2] and groups["dp0"] == [0, 4]
    out = done.stdout
    assert "wrote 9 file(s)" in out and "all_reduce" in out and "send_recv" in out
    trace = load_trace(tmp_path / "w")
    check(trace)
    assert trace.num_ranks == 8


def test_gen_writes_json_and_yaml(tmp_path: Path) -> None:
    assert run_genie("trace", "gen", *SMALL, "--dp", "2", "--dp-mode", "fsdp", "--out", str(tmp_path / "f.json"),
                     "--to", "json").returncode == 0
    assert json.loads((tmp_path / "f.json").read_text())["format"] == "genie-trace"
    assert run_genie("trace", "gen", "--model", "dlrm", "--dp", "4", "--batch", "64", "--out",
                     str(tmp_path / "d.yaml"), "--to", "yaml").returncode == 0
    assert load_trace(tmp_path / "d.yaml").num_ranks == 4


@pytest.mark.parametrize("args, option", [
    (["--tp", "5"], "--tp"), (["--dp", "0"], "--dp"), (["--ep", "2", "--dp", "2"], "--ep"),
    (["--pp", "3"], "--pp"), (["--batch", "0"], "--batch"), (["--device", "tpu"], "--device"),
    (["--dtype", "int4"], "--dtype"), (["--dp-mode", "zero1"], "--dp-mode"), (["--order", "dp-tp-pp"], "--order"),
    (["--efficiency", "1.5"], "--efficiency"), (["--to", "csv"], "--to"), (["--top-k", "3", "--experts", "2"], "--top-k"),
    (["--experts", "4", "--ep", "2", "--dp", "2", "--routing-skew", "11"], "--routing-skew"),
    (["--routing-seed", "-1"], "--routing-seed"),
])
def test_bad_options_exit_2_naming_the_option(tmp_path: Path, args: list[str], option: str) -> None:
    done = run_genie("trace", "gen", *SMALL, *args, "--out", str(tmp_path / "x"))
    code, message = done.returncode, _message(done)
    assert code == 2 and message.startswith(f"{option}:") and "\n" not in message
    assert not list(tmp_path.iterdir())  # nothing half-written
    done = run_genie("trace", "gen", "--model", "gpt5", "--out", str(tmp_path / "x"))
    code, message = done.returncode, _message(done)
    assert code == 2 and message.startswith("--model:")
    done = run_genie("trace", "gen", "--model", "resnet50", "--layers", "3", "--out", str(tmp_path / "x"))
    code, message = done.returncode, _message(done)
    assert code == 2 and message.startswith("--layers:")


def test_genie_trace_gen_entry_point(tmp_path: Path) -> None:
    good = run_genie("trace", "gen", *SMALL, "--dp", "2", "--out", str(tmp_path / "w"))
    assert good.returncode == 0, good.stderr
    bad = run_genie("trace", "gen", *SMALL, "--tp", "5", "--out", str(tmp_path / "x"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--tp" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.parametrize("cli, generate", [
    (["--model", "gpt3-125m", "--layers", "2", "--seq", "128", "--dp", "4"],
     "{model: gpt3-125m, layers: 2, seq: 128, dp: 4}"),
    (["--model", "dlrm", "--dp", "4"], "{model: dlrm, dp: 4}"),
    (["--model", "gpt3-125m", "--layers", "2", "--seq", "128", "--tp", "2", "--pp", "2", "--micro-batches", "2",
      "--dtype", "fp16", "--order", "tp-dp-pp", "--bucket-mb", "1", "--sequence-parallel", "--efficiency", "0.5"],
     "{model: gpt3-125m, layers: 2, seq: 128, tp: 2, pp: 2, micro_batches: 2, dtype: fp16, order: tp-dp-pp, "
     "bucket_mb: 1, sequence_parallel: true, efficiency: 0.5}"),
    (["--model", "gpt3-125m", "--layers", "2", "--seq", "128", "--experts", "4", "--top-k", "2", "--ep", "2", "--dp",
      "2", "--routing-skew", "1.5", "--routing-seed", "3"],
     "{model: gpt3-125m, layers: 2, seq: 128, experts: 4, top_k: 2, ep: 2, dp: 2, routing_skew: 1.5, routing_seed: 3}"),
])
def test_cli_and_experiment_file_generate_the_same_trace(tmp_path: Path, cli: list[str], generate: str) -> None:
    """`genie trace gen` and an experiment file's workload.generate share the options and their defaults."""
    done = run_genie("trace", "gen", *cli, "--out", tmp_path / "cli.json", "--to", "json")
    assert done.returncode == 0, done.stderr
    experiment = tmp_path / "experiment.yaml"
    experiment.write_text(f"workload: {{generate: {generate}}}\ntopology: star-4.yaml\n")
    spec = load_experiment(experiment)
    from_file = generate_workload(spec.workload.generate, source=str(experiment))
    assert write_native_json(from_file) == (tmp_path / "cli.json").read_bytes()
    assert read_native((tmp_path / "cli.json").read_bytes()) == read_native(write_native_json(from_file))


def test_generator_option_errors_name_the_option_in_both_spellings(tmp_path: Path) -> None:
    done = run_genie("trace", "gen", *SMALL, "--bucket-mb", "0", "--out", tmp_path / "x")
    assert done.returncode == 2 and _message(done).startswith("--bucket-mb:")
    with pytest.raises(InputError, match=r"e\.yaml: workload\.generate\.bucket_mb: "):
        generate_workload((("model", "gpt3-125m"), ("bucket_mb", 0)), source="e.yaml")
    with pytest.raises(InputError, match=r"e\.yaml: workload\.generate\.dtype: unknown dtype 'int4'"):
        generate_workload((("model", "gpt3-125m"), ("dtype", "int4")), source="e.yaml")
    assert not list(tmp_path.iterdir())


# ---- round trips -----------------------------------------------------------------------------------------------
def _generated():
    model = model_preset("gpt3-125m").with_overrides(num_layers=2, seq_len=128, num_experts=4, top_k=2, moe_every=2)
    return generate(model, A100, Parallelism(dp=2, tp=2, pp=2, ep=2),
                    TrainingConfig(micro_batch_size=2, micro_batches=3, sequence_parallel=True))


def test_et_round_trip_of_a_generated_trace(tmp_path: Path) -> None:
    trace = _generated()
    paths = write_et_set(trace, tmp_path / "gen")
    assert len(paths) == trace.num_ranks + 1
    back = read_et_set(tmp_path / "gen")
    assert back.groups == trace.groups
    assert [r.nodes for r in back.ranks] == [r.nodes for r in trace.ranks]  # durations to the nanosecond
    assert summarize(back) == summarize(trace)
    # writing what was read reproduces the bytes
    write_et_set(back, tmp_path / "again")
    for r in range(trace.num_ranks):
        assert (tmp_path / f"again.{r}.et").read_bytes() == (tmp_path / f"gen.{r}.et").read_bytes()


def test_native_round_trip_of_a_generated_trace() -> None:
    trace = _generated()
    for data in (write_native_json(trace), write_native_yaml(trace)):
        back = read_native(data)
        assert back.groups == trace.groups and [r.nodes for r in back.ranks] == [r.nodes for r in trace.ranks]


# ---- samples ---------------------------------------------------------------------------------------------------
SAMPLES = ["gen_ddp_resnet50", "gen_tp2_dp4_gpt3", "gen_pp4_dp2_gpt3", "gen_moe_ep8_gpt3", "gen_fsdp8_gpt3",
           "gen_3d_dp2_tp2_pp2_gpt3", "gen_dlrm8", "astra_dlrm_hybrid", "param_tp2_dp2_et"]


@pytest.mark.parametrize("name", SAMPLES)
def test_samples_load_and_validate(name: str) -> None:
    path = TRACES / name
    if not path.is_dir():
        pytest.skip(f"sample {name} not generated")
    trace = load_trace(path)
    check(trace, source=str(path))
    assert trace.num_ranks in (4, 8)
    assert name in (TRACES / "README.md").read_text()


GOLDEN = {
    "gen_ddp_resnet50": ["--model", "resnet50", "--dp", "8", "--batch", "32"],
    "gen_tp2_dp4_gpt3": ["--model", "gpt3-125m", "--layers", "4", "--seq", "1024", "--tp", "2", "--dp", "4",
                         "--batch", "4", "--micro-batches", "2"],
    "gen_pp4_dp2_gpt3": ["--model", "gpt3-125m", "--layers", "4", "--seq", "1024", "--pp", "4", "--dp", "2",
                         "--batch", "2", "--micro-batches", "8"],
    "gen_moe_ep8_gpt3": ["--model", "gpt3-125m", "--layers", "4", "--seq", "1024", "--experts", "8", "--top-k", "2",
                         "--moe-every", "2", "--dp", "8", "--ep", "8", "--batch", "4"],
    "gen_fsdp8_gpt3": ["--model", "gpt3-125m", "--layers", "4", "--seq", "1024", "--dp", "8", "--dp-mode", "fsdp",
                       "--batch", "4"],
    "gen_3d_dp2_tp2_pp2_gpt3": ["--model", "gpt3-125m", "--layers", "4", "--seq", "1024", "--dp", "2", "--tp", "2",
                                "--pp", "2", "--batch", "2", "--micro-batches", "4", "--sequence-parallel"],
    "gen_dlrm8": ["--model", "dlrm", "--dp", "8", "--batch", "512"],
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_generated_samples_are_current(tmp_path: Path, name: str) -> None:
    """The samples are what the generator makes today (regenerate them with traces/README.md when this fails)."""
    sample = TRACES / name
    if not sample.is_dir():
        pytest.skip(f"sample {name} not generated")
    assert run_genie("trace", "gen", *GOLDEN[name], "--out", str(tmp_path / name)).returncode == 0
    made = sorted(p.name for p in tmp_path.iterdir())
    assert made == sorted(p.name for p in sample.iterdir())
    for file in made:
        assert (tmp_path / file).read_bytes() == (sample / file).read_bytes(), file
