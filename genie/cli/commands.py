"""genie's top-level commands, each imported only when it runs: `genie --help` and a refusal of one command do
not pay for every other command's modules (the lab's templates, the testbed, the workload generators...).

`COMMANDS` names each command's module and the help line `genie --help` lists for it, which is the command's
own help (tests/test_cli_main.py loads every command and checks that the two agree)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup


@dataclass(frozen=True)
class LazyCommand:
    """A command of `genie`: its module under genie.cli (with a `register(app)` that adds its commands, or an
    `app`, a typer.Typer of subcommands) and its help, as `genie --help` lists it."""

    module: str
    help: str


#: in the order `genie --help` lists them
COMMANDS: dict[str, LazyCommand] = {
    "bench": LazyCommand("bench_cmd", "Sweep collectives over sizes and print nccl-tests' table, a row as each size "
                                      "finishes; writes a run\ndirectory (docs/reports.md). -z -G -R -p -y -u -M are "
                                      "accepted and ignored (no meaning on CPU ranks)."),
    "replay": LazyCommand("replay_cmd", "Replay TRACE: compute waited out, communication sent for real; writes a "
                                        "run directory (docs/reports.md)."),
    "diagnose": LazyCommand("diagnose_cmd", "Measure every host pair, flag outliers against the configuration and "
                                            "the median; exit 1 when flagged."),
    "estimate": LazyCommand("estimate_cmd", "Estimate TRACE's iteration time per rank from measured collective "
                                            "latencies; writes estimate.csv."),
    "experiment": LazyCommand("estimate_cmd", "Bring up the testbed, measure the trace's collectives, calibrate, "
                                              "estimate, replay, compare, tear down."),
    "calibrate": LazyCommand("calibrate_cmd", "Fit genie's NCCL model to a cluster's nccl-tests; print measured vs "
                                              "model and NCCL's choice per size."),
    "testbed": LazyCommand("testbed_cmd", "Emulated testbeds: network namespaces, veth links, bridges, routes and tc "
                                          "shaping."),
    "trace": LazyCommand("trace_cmd", "Workload traces: Chakra ET, PARAM basic JSON, ASTRA-sim text, genie "
                                      "JSON/YAML."),
    "astra": LazyCommand("astra_cmd", "ASTRA-sim: built-in analytical estimator, real-binary runner, output "
                                      "parsing."),
    "lab": LazyCommand("lab_cmd", "Vagrant labs: one VM per topology host on private networks that follow its "
                                  "links."),
    "report": LazyCommand("report_cmd", "Reports of run directories: `genie report RUN_DIR`, `genie report compare "
                                        "RUN_A RUN_B`."),
}


def load_command(name: str) -> Any:
    """The real command `name` (a click command or group of typer's), its module imported now, with the example
    epilogs of genie.cli.examples."""
    from genie.cli.examples import add_examples

    module = importlib.import_module(f"genie.cli.{COMMANDS[name].module}")
    holder = typer.Typer(rich_markup_mode=None)  # as the root's (genie.cli.main): plain help, rich not imported
    if hasattr(module, "register"):
        module.register(holder)
    else:
        holder.add_typer(module.app, name=name)
    add_examples(holder)
    command = typer.main.get_group(holder).commands[name]
    _list_in_full(command)
    return command


def _list_in_full(command: Any) -> None:
    """A group lists each subcommand by its help's first paragraph, whole (click would cut it at the width)."""
    for sub in getattr(command, "commands", {}).values():
        if sub.short_help is None and sub.help:
            sub.short_help = sub.help.split("\n\n")[0]
        _list_in_full(sub)


class LazyCommands(TyperGroup):
    """The root group: lists every command of `COMMANDS` by its help alone, and imports a command's module when
    the command is resolved (to run it, show its help or complete its options)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, command in COMMANDS.items():
            self.commands.setdefault(name, TyperCommand(name, help=command.help, short_help=command.help))
        self._loaded: set[str] = set()

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name = args[0] if args else None
        if name in COMMANDS and name not in self._loaded:
            self.commands[name] = load_command(name)
            self._loaded.add(name)
        return super().resolve_command(ctx, args)
