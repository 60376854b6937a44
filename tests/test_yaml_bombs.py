"""Issue #18: YAML alias bombs are refused by genie's one YAML loader, and errors quote values cut short."""

from __future__ import annotations

from pathlib import Path

import pytest

from genie.core.errors import InputError, shown
from genie.input_yaml import ALIAS_BUDGET_NODES, parse_yaml
from tests.hostile_support import assert_refused, run_capped, run_cli, tree

_LEVELS = "abcdefghi"


def bomb(key_prefix: str = "") -> str:
    """484 bytes that stand for 9**9 (387 million) strings."""
    lines = [f'{key_prefix}a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip(_LEVELS, _LEVELS[1:]):
        lines.append(f"{key_prefix}{name}: &{name} [{','.join([f'*{prev}'] * 9)}]")
    return "\n".join(lines) + "\n"


def test_the_loader_refuses_an_alias_bomb_and_names_the_line() -> None:
    with pytest.raises(InputError, match=rf"t.yaml: line \d+, column \d+: invalid YAML: aliases expand to more "
                                         rf"than {ALIAS_BUDGET_NODES} nodes"):
        parse_yaml(bomb(), "t.yaml")


def test_the_loader_still_reads_aliases_within_the_budget() -> None:
    doc = parse_yaml("base: &b {bandwidth: 1gbit}\nlinks: [*b, *b, *b]\n", "t.yaml")
    assert doc["links"] == [{"bandwidth": "1gbit"}] * 3


@pytest.mark.parametrize("argv, name, text", [
    (["testbed", "up", "{f}", "--dry-run"], "topology.yaml", bomb()),
    (["testbed", "up", "{f}", "--dry-run"], "value.yaml",  # the bomb in a value position (a link's bandwidth)
     bomb("x") + "name: t\nhosts: [h0, h1]\nlinks: [{endpoints: [h0, h1], bandwidth: *xi}]\n"),
    (["experiment", "{f}"], "experiment.yaml", bomb()),
    (["bench", "--inventory", "{f}", "--launcher", "mpi"], "inventory.yaml", bomb()),
    (["bench", "--loopback", "--faults", "{f}"], "faults.yaml", bomb()),
    (["trace", "show", "{f}"], "trace.yaml", "format: genie-trace\n" + bomb()),
])
def test_every_yaml_input_refuses_an_alias_bomb_quickly_in_one_line(tmp_path: Path, argv: list[str], name: str,
                                                                    text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    outcome = run_capped([a.format(f=path) for a in argv], cwd=tmp_path, timeout_s=30)
    assert_refused(outcome, name, "aliases expand to more than", max_lines=1)
    assert tree(tmp_path) == {name}


def test_a_long_value_is_quoted_cut_short(tmp_path: Path) -> None:
    topology = tmp_path / "t.yaml"
    topology.write_text("name: t\nhosts: [h0, h1]\nlinks: [{endpoints: [h0, h1], bandwidth: " + "9" * 1_000_000 + "x}]\n")
    outcome = run_cli(["testbed", "up", str(topology), "--dry-run"])
    assert_refused(outcome, "t.yaml: links[0].bandwidth", "characters)", max_lines=1)
    assert len(outcome.stderr) < 400


def test_shown_keeps_short_values_and_cuts_long_ones() -> None:
    assert shown("1gbit") == "'1gbit'"
    assert shown("x" * 1000).endswith("... (1002 characters)")
    assert len(shown("x" * 1000)) < 80
    assert shown(list(range(1000))) == "a list of 1000 items"
