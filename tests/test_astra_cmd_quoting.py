"""cmd.sh quotes the user's names (review s34): a --name is a file name, never shell text."""

import shlex

from astra_adapter.export import command_line


def test_a_workload_name_is_one_quoted_word() -> None:
    text = command_line("workload/w;touch${IFS}pwned", "groups $(id).json")
    lines = [line.strip().removesuffix("\\").strip() for line in text.splitlines()]
    words = [shlex.split(line) for line in lines if "-configuration=" in line and "ASTRA_SIM" not in line]
    assert ["--workload-configuration=workload/w;touch${IFS}pwned"] in words
    assert ["--comm-group-configuration=groups $(id).json"] in words
