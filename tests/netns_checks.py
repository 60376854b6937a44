"""Shared by the root tests: what the root network namespace looks like (it must never change)."""

from __future__ import annotations

import json
import os
import subprocess


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
