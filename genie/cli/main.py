"""The `genie` entry point: registers each area's sub-app and turns GenieError into one line and exit code 2."""

from __future__ import annotations

import importlib
import sys

import typer

from genie import __version__
from genie.core.errors import GenieError

app = typer.Typer(
    name="genie",
    help="Network-emulation testbed for ML communication.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# (module under genie.cli, command name) — each module exposes `app`, a typer.Typer.
_SUBAPPS = (
    ("testbed_cmd", "testbed"),
    ("trace_cmd", "trace"),
    ("astra_cmd", "astra"),
    ("lab_cmd", "lab"),
    ("report_cmd", "report"),
)
# modules whose `register(app)` adds top-level commands (bench, replay, ...)
_COMMAND_MODULES = ("bench_cmd", "replay_cmd", "diagnose_cmd", "estimate_cmd")


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"genie {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True,
                                 help="Print genie's version and exit."),
) -> None:
    """genie: how does this network change the training time of this workload?"""


def _register() -> None:
    for module_name, command in _SUBAPPS:
        try:
            module = importlib.import_module(f"genie.cli.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"genie.cli.{module_name}":
                continue
            raise
        app.add_typer(module.app, name=command)
    for module_name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(f"genie.cli.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"genie.cli.{module_name}":
                continue
            raise
        module.register(app)
    from genie.cli.examples import add_examples

    add_examples(app)


def main(argv: list[str] | None = None) -> int:
    from genie.testbed.lifecycle import signals_raise

    _register()
    try:
        with signals_raise():  # SIGTERM/SIGHUP unwind like Ctrl-C: every command tears down what it built
            rc = app(args=argv, standalone_mode=False)
    except GenieError as exc:
        typer.echo(f"genie: error: {exc}", err=True)
        return 2
    except KeyboardInterrupt:
        typer.echo("genie: interrupted", err=True)
        return 130
    except SystemExit as exc:
        return int(exc.code or 0)
    except Exception as exc:
        # usage errors: typer ships its own copy of click (typer._click), so match by shape, not by class
        show, code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()
            return 2 if code != 0 else 0
        if type(exc).__name__ == "Abort":
            typer.echo("genie: interrupted", err=True)
            return 130
        if type(exc).__name__ == "Exit":
            return int(getattr(exc, "exit_code", 0) or 0)
        raise
    if rc == 130:  # typer converts Ctrl-C into exit code 130 and returns it
        typer.echo("genie: interrupted", err=True)
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    sys.exit(main())
