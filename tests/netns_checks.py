"""Shared by the root tests: what the root network namespace looks like (it must never change)."""

from __future__ import annotations

import json
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
