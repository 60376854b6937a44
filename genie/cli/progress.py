"""Progress display on stderr (rich, imported when a bar starts: a command refused before its work begins never
pays for it)."""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator


@contextlib.contextmanager
def bench_progress(enabled: bool = True) -> Iterator[Callable]:
    """A bar on stderr; off (`enabled` False) when stdout is the terminal: the streamed rows are the progress,
    and a live bar on the same terminal would tangle with them."""
    if not enabled:
        yield lambda done, total, stats: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(TextColumn("[bold]bench"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                  TimeElapsedColumn(), console=console, transient=True, redirect_stdout=False,
                  redirect_stderr=False) as progress:
        task = progress.add_task("starting ranks", total=None)

        def update(done: int, total: int, stats) -> None:
            progress.update(task, completed=done, total=total,
                            description=f"{stats.collective.value} {stats.size_bytes} B")

        yield update


@contextlib.contextmanager
def count_progress(label: str, unit: str) -> Iterator[Callable[[int, int], None]]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        yield update
