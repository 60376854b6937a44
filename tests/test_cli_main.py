"""The `genie` entry point: every command is there (a module that fails to import fails loudly instead of
dropping its command), main() can run many times in one process, and a command's modules are imported only
when it runs (genie.cli.commands)."""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys

import pytest

from cli_support import run_genie

COMMANDS = ("bench", "replay", "diagnose", "estimate", "experiment", "calibrate", "testbed", "trace", "astra", "lab",
            "report")

#: what `genie --help` and a refusal of one command must not import (every command's, or any heavy, module)
HEAVY = ("numpy", "pandas", "matplotlib", "jinja2", "pyroute2", "scipy", "torch", "yaml", "rich", "google.protobuf",
         "genie.testbed.service", "genie.testbed.steps", "genie.lab", "genie.workloads", "genie.engine",
         "genie.services", "genie.report", "genie.topology", "astra_adapter")


def _commands(help_text: str) -> list[str]:
    """The names in the Commands section of `genie --help`."""
    return re.findall(r"^  ([a-z]+) {2,}", help_text.split("Commands:", 1)[1], re.M)


def test_every_command_is_registered_once_however_often_main_runs() -> None:
    first = run_genie("--help")
    assert first.returncode == 0, first.stderr
    assert _commands(first.stdout) == list(COMMANDS)
    again = run_genie("--help")
    assert again == first


def test_the_listed_help_is_each_commands_own() -> None:
    """`genie --help` lists a command without importing it: what it lists is what the command itself says (and
    every command's module imports)."""
    from genie.cli.commands import COMMANDS as LAZY, load_command

    assert tuple(LAZY) == COMMANDS
    for name, lazy in LAZY.items():
        command = load_command(name)
        assert command.name == name
        assert inspect.cleandoc(lazy.help) == command.help, name


def test_a_command_runs_its_own_help_and_refusals() -> None:
    help_text = run_genie("testbed", "--help")
    assert help_text.returncode == 0 and "verify" in help_text.stdout and "Examples:" not in help_text.stdout
    up = run_genie("testbed", "up", "--help")
    assert up.returncode == 0 and "genie testbed up topologies/star-8.yaml" in up.stdout  # its example epilog
    bad = run_genie("bench", "--no-such-flag")
    assert bad.returncode == 2 and "No such option: --no-such-flag" in bad.stderr
    typo = run_genie("bnch")
    assert typo.returncode == 2 and "Did you mean 'bench'?" in typo.stderr


_PROBE = ("import io, json, contextlib, sys\n"
          "from genie.cli.main import main\n"
          "out, err = io.StringIO(), io.StringIO()\n"
          "with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):\n"
          "    code = main(sys.argv[1:])\n"
          "print(json.dumps({'code': code, 'out': out.getvalue(), 'err': err.getvalue(),\n"
          "                  'modules': sorted(sys.modules)}))\n")


@pytest.mark.parametrize("argv, code", [(["--help"], 0), (["bench", "--no-such-flag"], 2),
                                        (["report", "--no-such-flag"], 2)])
def test_start_up_imports_only_the_command_that_runs(argv: list[str], code: int) -> None:
    """In a fresh process, `genie --help` imports no command's modules and a refusal of one command imports
    only that command's: no numpy, jinja2, rich, testbed, lab, workloads, services... (the CLI's start-up once
    paid ~1 s of CPU for every command's tree)."""
    proc = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, timeout=120,
                          check=True)
    result = json.loads(proc.stdout)
    assert result["code"] == code, result["err"]
    assert "Commands:" in result["out"] if code == 0 else result["err"]
    loaded = [m for m in result["modules"] if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert loaded == []
    other_commands = {f"genie.cli.{c}_cmd" for c in COMMANDS} - {f"genie.cli.{argv[0]}_cmd"}
    assert sorted(other_commands & set(result["modules"])) == []


#: what a refused trace file must not load: the engine, numpy, the readers of formats it never reached
TRACE_REFUSAL_HEAVY = ("numpy", "pandas", "matplotlib", "scipy", "torch", "google.protobuf", "pydantic",
                       "genie.engine", "genie.measure.metrics", "genie.testbed.service", "genie.testbed.netlink",
                       "genie.lab", "genie.workloads.chakra_et", "genie.workloads.pytorch_et")


@pytest.mark.parametrize("argv", [["replay", "{missing}"], ["trace", "validate", "{missing}"]])
def test_a_missing_trace_is_refused_before_the_engine_or_any_reader_loads(argv: list[str], tmp_path) -> None:
    """`genie replay missing.json` once imported 628 modules (the engine, numpy, every trace reader, typer's
    pydantic validation) before saying the file is missing (issue #35 item 7)."""
    args = [a.format(missing=tmp_path / "missing.json") for a in argv]
    proc = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=120,
                          check=True)
    result = json.loads(proc.stdout)
    assert result["code"] == 2 and "missing.json: no such file" in result["err"]
    loaded = [m for m in result["modules"] if any(m == h or m.startswith(h + ".") for h in TRACE_REFUSAL_HEAVY)]
    assert loaded == []


@pytest.mark.parametrize("argv, option", [(("bench",), "--time-dilation"), (("replay",), "--time-dilation"),
                                          (("testbed", "up"), "--time-dilation"), (("testbed", "up"), "--links")])
def test_an_options_help_names_a_document_that_explains_it(argv: tuple[str, ...], option: str) -> None:
    """The document an option's --help points to (`(docs/X.md)`) describes that option."""
    from pathlib import Path

    text = run_genie(*argv, "--help").stdout
    block = text.split(f"  {option}", 1)[1]
    block = re.split(r"\n  -", block, maxsplit=1)[0]  # up to the next option
    (doc,) = re.findall(r"docs/[a-z_-]+\.md", " ".join(block.split()).replace("- ", "-"))
    assert option in (Path(__file__).resolve().parent.parent / doc).read_text(), (option, doc)
