"""CLI start-up cost (issue #35 item 7; run by hand, not a test): wall and CPU time of `genie --help` and of
one-line refusals, median of N fresh processes each, run exactly as the `genie` console script runs
(`from genie.cli.main import main`). Also prints how many modules each case imported.

    python -m benchmarks.cli_startup [--repeat 10] [--python PY] [--tree DIR ...]

Without --tree it times the genie this interpreter imports. Each --tree DIR times the checkout in DIR (run with
PYTHONPATH=DIR from DIR); several trees are timed side by side, their runs interleaved, so that a busy machine
weighs on all of them alike.
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


def _once(python: str, argv: list[str], tree: str | None) -> tuple[float, float, int, int]:
    """Wall seconds, CPU seconds (user + system of the child), exit code, modules imported."""
    env = os.environ.copy()
    if tree is not None:
        env["PYTHONPATH"] = tree
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([python, "-c", _SCRIPT, *argv], capture_output=True, text=True, env=env, cwd=tree,
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
    parser.add_argument("--tree", action="append", default=[], help="A checkout to time (repeatable).")
    args = parser.parse_args()
    trees = args.tree or [None]
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print(f"{'tree':24} {'case':36} {'wall s':>8} {'cpu s':>8} {'rc':>3} {'modules':>8}   (median of {args.repeat})")
    for label, argv in CASES:
        runs: dict[str | None, list] = {tree: [] for tree in trees}
        for _ in range(args.repeat):
            for tree in trees:
                runs[tree].append(_once(args.python, argv, tree))
        for tree in trees:
            wall = statistics.median(r[0] for r in runs[tree])
            cpu = statistics.median(r[1] for r in runs[tree])
            first = runs[tree][0]
            print(f"{str(tree or '(this genie)')[-24:]:24} {label:36} {wall:8.3f} {cpu:8.3f} {first[2]:>3} "
                  f"{first[3]:>8}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
