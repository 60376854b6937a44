"""Progress display on stderr (rich)."""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


@contextlib.contextmanager
def bench_progress() -> Iterator[Callable]:
    console = Console(stderr=True)
    with Progress(TextColumn("[bold]bench"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task("starting ranks", total=None)

        def update(done: int, total: int, stats) -> None:
            progress.update(task, completed=done, total=total,
                            description=f"{stats.collective.value} {stats.size_bytes} B")

        yield update
