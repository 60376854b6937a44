"""The README's "Try it without root" block runs as written, line by line, from a copy of the checkout's
inputs (issue #17: every example runnable); every command's --help ends with an example."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def offline_examples() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("## Try it without root", 1)[1].split("\n## ", 1)[0]
    lines = [line[4:] for line in block.splitlines() if line.startswith("    genie ")]
    return [re.sub(r"\s+#(?!\s*Avg).*$", "", line) for line in lines]  # drop the trailing comments


def test_the_block_is_there_and_uses_files_of_the_repository():
    lines = offline_examples()
    assert len(lines) >= 10 and all(line.startswith("genie ") for line in lines)
    for line in lines:
        for word in line.split():
            if word.startswith(("traces/", "topologies/", "experiments/")):
                assert (ROOT / word.split("=")[-1]).exists(), word


def test_offline_examples_run_as_written(tmp_path):
    for name in ("traces", "topologies", "experiments"):
        (tmp_path / name).symlink_to(ROOT / name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "genie").write_text(f"#!/bin/sh\nexec {sys.executable} -m genie.cli.main \"$@\"\n")
    (bin_dir / "genie").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    for line in offline_examples():
        proc = subprocess.run(["bash", "-o", "pipefail", "-c", line], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, (line, proc.stdout[-2000:], proc.stderr[-2000:])
        if "grep '# Avg bus bandwidth'" in line:
            assert proc.stdout.startswith("# Avg bus bandwidth    : ")


def _commands():
    from genie.cli.commands import COMMANDS, load_command
    from genie.cli.examples import EXAMPLES

    out = []
    for name in COMMANDS:
        command = load_command(name)
        subcommands = getattr(command, "commands", {})
        out += [f"{name} {sub}" for sub in subcommands] if subcommands else [name]
    return out, EXAMPLES


def test_every_command_has_an_example_in_its_help():
    commands, examples = _commands()
    missing = [c for c in commands if c not in examples]
    assert not missing, f"commands without an example: {missing}"


@pytest.mark.parametrize("command", ["bench", "trace convert", "report compare"])
def test_help_shows_the_example(command):
    proc = subprocess.run([sys.executable, "-m", "genie.cli.main", *command.split(), "-h"], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "COLUMNS": "300"})
    assert proc.returncode == 0 and "Examples:" in proc.stdout and f"genie {command}" in proc.stdout
