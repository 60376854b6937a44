"""The `genie` entry point: the root group of genie's commands (each imported when it runs,
genie.cli.commands) and GenieError turned into one line and exit code 2."""

from __future__ import annotations

import sys

import typer

from genie import __version__
from genie.cli.commands import LazyCommands
from genie.core.errors import GenieError

app = typer.Typer(
    name="genie",
    cls=LazyCommands,
    help="Network-emulation testbed for ML communication.",
    no_args_is_help=True,
    rich_markup_mode=None,  # plain help: rendering it with rich costs more than the rest of `genie --help`
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


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


def main(argv: list[str] | None = None) -> int:
    from genie.testbed.lifecycle import signals_raise

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
