"""The install step (scripts/setup.sh: `pip install -e .`, a C compiler installed where missing) builds every
compiled extension pyproject.toml declares. They are `optional` so that genie runs without a compiler, on the
pure-Python paths; that also means a .pyx that stops compiling would leave the install quietly on those paths
and skip the tests of the compiled ones. Here it fails instead."""

from __future__ import annotations

import importlib
import shutil
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _declared() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [ext["name"] for ext in config["tool"]["setuptools"]["ext-modules"]]


def test_pyproject_declares_the_compiled_modules() -> None:
    assert {"astra_adapter.fabric.fairshare_core", "astra_adapter.fabric.chains_core", "astra_adapter.aware_core",
            "genie.engine.step_loop", "genie.engine.exchange_loop"} <= set(_declared())


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler: the install step builds no extension")
@pytest.mark.parametrize("name", _declared())
def test_every_declared_extension_was_built(name: str) -> None:
    module = importlib.import_module(name)
    assert Path(module.__file__ or "").suffix == ".so", f"{name} is not the compiled module: {module.__file__}"
