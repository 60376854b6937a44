"""The `genie` entry point: every command is there (a module that fails to import fails loudly instead of
dropping its command), and main() can run many times in one process."""

from __future__ import annotations

import re

from cli_support import run_genie

COMMANDS = ("bench", "replay", "diagnose", "estimate", "experiment", "calibrate", "testbed", "trace", "astra", "lab",
            "report")


def _commands(help_text: str) -> list[str]:
    """The names in the Commands panel of `genie --help`."""
    return re.findall(r"^│ ([a-z]+) {2,}", help_text.split("Commands", 1)[1], re.M)


def test_every_command_is_registered_once_however_often_main_runs() -> None:
    first = run_genie("--help")
    assert first.returncode == 0, first.stderr
    assert sorted(_commands(first.stdout)) == sorted(COMMANDS)
    again = run_genie("--help")
    assert again == first
    from genie.cli.main import app

    assert len(app.registered_groups) == 5 and len(app.registered_commands) == 6
