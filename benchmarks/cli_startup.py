"""CLI start-up cost (issue #35 item 7; run by hand, not a test): wall and CPU time of `genie --help` and of
one-line refusals, median of N fresh processes each, run exactly as the `genie` console script runs
(`from genie.cli.main import main`). Also prints how many modules each case imported.

    python -m benchmarks.cli_startup [--repeat 10] [--python PY]

Run it from the checkout to time (PYTHONPATH=$PWD) to compare two trees side by side on the same machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

#: (label, argv after `genie`); each refusal must exit 2 with one line on stderr
CASES = (
    ("genie --help", ["--help"]),
    ("genie replay missing.json", ["replay", "missing.json"]),
    ("genie bench --bogus", ["bench", "--bogus"]),
    ("genie trace validate missing.json", ["trace", "validate", "missing.json"]),
)

#: the console script's body, plus a count of imported modules on stderr at exit
_SCRIPT = ("import atexit, sys\n"
           "atexit.register(lambda: sys.stderr.write(f'\\nmodules={len(sys.modules)}\\n'))\n"
           "from genie.cli.main import main\n"
           "sys.argv[0] = 'genie'\n"
           "sys.exit(main())\n")


def _once(python: str, argv: list[str]) -> tuple[float, float, int, int]:
    """Wall seconds, CPU seconds (user + system of the child), exit code, modules imported."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([python, "-c", _SCRIPT, *argv], capture_output=True, text=True, env=os.environ.copy(),
                          check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    modules = next((int(line.split("=")[1]) for line in proc.stderr.splitlines() if line.startswith("modules=")), -1)
    return wall, cpu, proc.returncode, modules


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10, help="Fresh processes per case (median reported).")
    parser.add_argument("--python", default=sys.executable, help="Interpreter to run genie with.")
    args = parser.parse_args()
    print(f"{'case':36} {'wall s':>8} {'cpu s':>8} {'rc':>3} {'modules':>8}   (median of {args.repeat})")
    for label, argv in CASES:
        runs = [_once(args.python, argv) for _ in range(args.repeat)]
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        print(f"{label:36} {wall:8.3f} {cpu:8.3f} {runs[0][2]:>3} {runs[0][3]:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
