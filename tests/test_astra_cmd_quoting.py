"""cmd.sh quotes the user's names (review s34): a --name is a file name, never shell text."""

import shlex

from astra_adapter.export import command_line


def _shell_words(line: str) -> list[str]:
    """`line` split as sh splits it: `;`, `|`, `&`, `(`, `)` outside quotes end a word (shlex.split keeps them
    in it)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def test_a_workload_name_is_one_quoted_word() -> None:
    text = command_line("workload/w;touch${IFS}pwned", "groups $(id).json")
    lines = [line.strip().removesuffix("\\").strip() for line in text.splitlines()]
    words = [_shell_words(line) for line in lines if "-configuration=" in line and "ASTRA_SIM" not in line]
    assert ["--workload-configuration=workload/w;touch${IFS}pwned"] in words
    assert ["--comm-group-configuration=groups $(id).json"] in words
    # `$` expands inside double quotes and bare words: every `$` of a name stands inside single quotes
    assert shlex.quote("--workload-configuration=workload/w;touch${IFS}pwned") in text
    assert shlex.quote("--comm-group-configuration=groups $(id).json") in text
