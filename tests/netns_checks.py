"""Shared by the root tests: what the root network namespace looks like (it must never change)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from typing import Any, Callable, Iterator


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False).stdout


def root_namespace_snapshot() -> dict[str, object]:
    def load(argv: list[str]) -> object:
        data = json.loads(_run(argv) or "[]")
        for entry in data:  # lifetimes of dynamic addresses / routes tick down
            for info in entry.get("addr_info", []):
                info.pop("valid_life_time", None), info.pop("preferred_life_time", None)
            entry.pop("expires", None)
        return data

    return {"link": load(["ip", "-j", "link", "show"]), "addr": load(["ip", "-j", "addr", "show"]),
            "route4": load(["ip", "-j", "-4", "route", "show", "table", "all"]),
            "route6": load(["ip", "-j", "-6", "route", "show"]), "qdisc": load(["tc", "-j", "qdisc", "show"])}


def namespace_names() -> list[str]:
    """Every named network namespace (ip netns), sorted."""
    from genie.testbed.layout import NETNS_DIR

    return sorted(os.listdir(NETNS_DIR)) if os.path.isdir(NETNS_DIR) else []


def namespaces_of_run(run: str) -> list[str]:
    return [n for n in namespace_names() if n.startswith(f"genie-{run}")]


def tear_down_run(state_dir, run: str) -> None:
    """After a test: bring down the run's testbeds recorded in `state_dir`, then delete any namespace of the run
    a failed test left half-built."""
    from genie.testbed import service

    for record in state_dir.glob("*.json") if state_dir.is_dir() else []:
        if record.stem.startswith(run):
            service.down(record.stem)
    for netns in namespaces_of_run(run):
        subprocess.run(["ip", "netns", "delete", netns], check=False)


@contextlib.contextmanager
def state_dir(path) -> Iterator[None]:
    """Testbed state recorded under `path` (GENIE_STATE_DIR) inside the block, as it was afterwards."""
    from genie.testbed.state import STATE_DIR_ENV

    old = os.environ.get(STATE_DIR_ENV)
    os.environ[STATE_DIR_ENV] = str(path)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(STATE_DIR_ENV, None)
        else:
            os.environ[STATE_DIR_ENV] = old


@contextlib.contextmanager
def clean_star_testbed(state_path, name: str, *, hosts: int = 4, rate_bps: int = 1_000_000_000,
                       left: Callable[[], list[str]]) -> Iterator[Any]:
    """A `hosts`-host star at `rate_bps` for a module's tests; afterwards `left()` (the run's namespaces still
    there) must be empty and the root namespace exactly as before."""
    from genie.core.topology import LinkShape
    from genie.testbed import service
    from genie.topology import star

    before = root_namespace_snapshot()
    with state_dir(state_path):
        with service.temporary_testbed(star(hosts, shape=LinkShape(rate_bps=rate_bps)), name=name) as info:
            yield info
    assert left() == []
    assert root_namespace_snapshot() == before


def run_fixtures(run: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The two autouse fixtures of a root test module whose testbeds are named ``<run>...``: the root namespace
    is the same after the module and none of the run's namespaces is left; and each test records its testbeds
    in its own state directory (GENIE_STATE_DIR), whose testbeds are brought down after it. Use as
    ``root_namespace_untouched, state_dir = run_fixtures(RUN)``."""
    import pytest

    @pytest.fixture(scope="module", autouse=True)
    def root_namespace_untouched() -> Iterator[None]:
        before = root_namespace_snapshot()
        yield
        assert root_namespace_snapshot() == before
        assert namespaces_of_run(run) == []

    @pytest.fixture(autouse=True)
    def state_dir(tmp_path, monkeypatch) -> Iterator[Any]:  # type: ignore[no-untyped-def]
        from genie.testbed.state import STATE_DIR_ENV

        directory = tmp_path / "state"
        monkeypatch.setenv(STATE_DIR_ENV, str(directory))
        yield directory
        tear_down_run(directory, run)

    return root_namespace_untouched, state_dir
