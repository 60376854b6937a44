"""Executables named like ASTRA-sim's analytical binaries, for scripts that call them by path.

``AstraSim_Analytical_Congestion_Unaware`` and ``AstraSim_Analytical_Congestion_Aware`` (``[project.scripts]``;
also ``python -m genie.cli.astra_dropin congestion_unaware|congestion_aware ARGS``) take ASTRA-sim's command
line as its option parser (cxxopts) does: ``--name=value`` or ``--name value``, a bare
``--rendezvous-protocol`` meaning true; options it does not know are ignored (with a warning on stderr here,
silently there). Output is ASTRA-sim's lines on stdout; exit codes are ASTRA-sim's:

- 0: the run finished;
- 255 (``exit(-1)``): a required option missing or a value that does not parse, a network configuration it
  rejects, a topology the congestion-aware backend does not support (more than one dimension);
- 1 (``exit(1)`` / ``EXIT_FAILURE``): anything else it rejects (system configuration, workload).

(Measured with the real binaries built from astra-sim 518bd51 + analytical 599a047.)

The ``--logging-folder`` is not written (genie keeps no spdlog files).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from genie.core.errors import GenieError, InputError

EXIT_OK, EXIT_FAILURE, EXIT_MINUS_ONE = 0, 1, 255

_STRING = ("workload-configuration", "comm-group-configuration", "system-configuration",
           "remote-memory-configuration", "network-configuration", "logging-configuration", "logging-folder")
_NUMBER = {"num-queues-per-dim": int, "compute-scale": float, "comm-scale": float, "injection-scale": float}
_BOOL = "rendezvous-protocol"
_REQUIRED = ("workload-configuration", "system-configuration", "remote-memory-configuration",
             "network-configuration")
_TRUE, _FALSE = ("true", "1", "yes", ""), ("false", "0", "no")


class _Exit(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def parse_argv(argv: Sequence[str]) -> tuple[dict, list[str]]:
    """ASTRA-sim's options from ``argv`` (values as typed) and the unknown options that were skipped."""
    values: dict = {}
    unknown: list[str] = []
    items = list(argv)
    i = 0
    while i < len(items):
        arg = items[i]
        i += 1
        if not arg.startswith("--"):
            continue  # positional: cxxopts keeps it, ASTRA-sim never reads it
        name, eq, value = arg[2:].partition("=")
        if name == _BOOL:
            text = value.lower() if eq else ""
            if text not in _TRUE + _FALSE:
                raise _Exit(EXIT_MINUS_ONE, f"[Error] (AstraSim/analytical/common) Error parsing options: "
                                            f"Argument '{value}' failed to parse")
            values[name] = text in _TRUE
            continue
        if name not in _STRING and name not in _NUMBER:
            unknown.append(arg)
            continue
        if not eq:
            if i >= len(items):
                raise _Exit(EXIT_MINUS_ONE, f"[Error] (AstraSim/analytical/common) Error parsing options: "
                                            f"Option '{name}' is missing an argument")
            value = items[i]
            i += 1
        if name in _NUMBER:
            try:
                values[name] = _NUMBER[name](value)
            except ValueError:
                raise _Exit(EXIT_MINUS_ONE, f"[Error] (AstraSim/analytical/common) Error parsing options: "
                                            f"Argument '{value}' failed to parse") from None
        else:
            values[name] = value
    return values, unknown


def _request(values: dict, backend: str):
    from genie.services.astra import SimulateRequest

    for name in _REQUIRED:
        if name not in values:
            raise _Exit(EXIT_MINUS_ONE, f"[Error] (AstraSim/analytical/common) Error parsing options: "
                                        f"Option '{name}' has no value")
    comm_group = values.get("comm-group-configuration", "empty")
    return SimulateRequest(values["workload-configuration"], Path(values["system-configuration"]),
                           Path(values["network-configuration"]), Path(values["remote-memory-configuration"]),
                           None if "empty" in comm_group else Path(comm_group), backend,
                           values.get("num-queues-per-dim", 1), values.get("injection-scale", 1.0),
                           values.get("comm-scale", 1.0), values.get("compute-scale", 1.0),
                           values.get(_BOOL, False))


def _check_network(path: Path, backend: str) -> None:
    """The network file as ASTRA-sim's parser and topology builder see it (they exit(-1))."""
    from astra_adapter.config import NetworkBackend, load_network

    try:
        network = load_network(path)
    except InputError as exc:
        raise _Exit(EXIT_MINUS_ONE, f"[Error] (network/analytical) {exc}") from None
    if backend == NetworkBackend.CONGESTION_AWARE.value and len(network.dims) != 1:
        raise _Exit(EXIT_MINUS_ONE, "[Error] (network/analytical/congestion_aware) only support 1-dim topology")


def run(argv: Sequence[str], backend: str) -> int:
    """One ASTRA-sim invocation; returns its exit code."""
    try:
        values, unknown = parse_argv(argv)
        for arg in unknown:
            print(f"[warning] (genie) ignoring unknown option {arg} (ASTRA-sim ignores it too)", file=sys.stderr)
        request = _request(values, backend)
        _check_network(request.network, backend)
        from genie.services.astra import run_simulate

        done = run_simulate(request)
    except _Exit as exc:
        print(exc, file=sys.stderr)
        return exc.code
    except GenieError as exc:
        print(f"[Error] (genie) {exc}", file=sys.stderr)
        return EXIT_FAILURE
    sys.stdout.write(done.estimate.stdout())
    sys.stdout.flush()
    return EXIT_OK


def congestion_unaware() -> None:
    """``AstraSim_Analytical_Congestion_Unaware``."""
    sys.exit(run(sys.argv[1:], "congestion_unaware"))


def congestion_aware() -> None:
    """``AstraSim_Analytical_Congestion_Aware``."""
    sys.exit(run(sys.argv[1:], "congestion_aware"))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m genie.cli.astra_dropin BACKEND ARGS...``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("congestion_unaware", "congestion_aware"):
        print("usage: python -m genie.cli.astra_dropin congestion_unaware|congestion_aware ASTRA-SIM-OPTIONS",
              file=sys.stderr)
        return EXIT_FAILURE
    return run(args[1:], args[0])


if __name__ == "__main__":
    sys.exit(main())
