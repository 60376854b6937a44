"""Reading genie's hand-written YAML inputs (topologies, inventories, experiments) strictly and with errors
that name the file, line and column: duplicate keys are rejected instead of silently keeping the last one."""

from __future__ import annotations

from typing import IO, Any

import yaml

from genie.core.errors import InputError, shown


ALIAS_BUDGET_NODES = 10_000


class AliasBudgetExceeded(yaml.YAMLError):
    """Aliases would expand the document by more than ALIAS_BUDGET_NODES nodes (a "billion laughs" bomb)."""

    def __init__(self, mark: yaml.Mark | None) -> None:
        super().__init__(f"aliases expand to more than {ALIAS_BUDGET_NODES} nodes")
        self.mark = mark


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys instead of silently keeping the last one, and refuses documents
    whose aliases (``*name``) would expand them by more than ALIAS_BUDGET_NODES nodes: a few hundred bytes of
    nested aliases otherwise stand for billions of values that every later walk (validation, an error message
    showing the value) expands."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._weights: dict[int, int] = {}  # id(node) -> nodes it stands for, aliases expanded
        self._aliased_nodes = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        is_alias = self.check_event(yaml.AliasEvent)
        mark = self.peek_event().start_mark
        node = super().compose_node(parent, index)
        if is_alias:
            self._aliased_nodes += self._weights.get(id(node), 1)
            if self._aliased_nodes > ALIAS_BUDGET_NODES:
                raise AliasBudgetExceeded(mark)
        elif id(node) not in self._weights:
            children: list[yaml.Node] = []
            if isinstance(node, yaml.SequenceNode):
                children = list(node.value)
            elif isinstance(node, yaml.MappingNode):
                children = [n for pair in node.value for n in pair]
            self._weights[id(node)] = 1 + sum(self._weights.get(id(c), 1) for c in children)
        return node

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: set[object] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                except TypeError:
                    continue  # unhashable: the base class reports it
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark, f"found duplicate key {shown(key)}",
                        key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def as_text(data: str | bytes | IO[str] | IO[bytes], source: str, *, reader: str = "load") -> str:
    """str, UTF-8 bytes (a BOM is allowed) or a text/binary stream → text; `reader` names the caller in errors."""
    if hasattr(data, "read"):
        data = data.read()  # type: ignore[union-attr]
    if isinstance(data, (bytes, bytearray)):
        try:
            return bytes(data).decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise InputError(f"expected UTF-8 text, got an undecodable byte at offset {error.start}",
                             source=source) from None
    if not isinstance(data, str):
        raise TypeError(f"{reader} expects str, bytes or a stream, got {type(data).__name__}")
    return data


def parse_yaml(text: str, source: str) -> object:
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except AliasBudgetExceeded as error:
        where = f"line {error.mark.line + 1}, column {error.mark.column + 1}" if error.mark else None
        raise InputError(f"invalid YAML: {error} (an alias bomb? genie expands no more)",
                         source=source, path=where) from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        problem = " ".join(str(error.problem or error).split())
        context = f" ({' '.join(str(error.context).split())})" if error.context else ""
        raise InputError(f"invalid YAML: {problem}{context}", source=source, path=where) from None
    except yaml.YAMLError as error:
        raise InputError(f"invalid YAML: {' '.join(str(error).split())}", source=source) from None
    except RecursionError:  # PyYAML composes nested collections recursively
        raise InputError("invalid YAML: nested too deeply (more levels than genie decodes)", source=source) from None


def describe(value: object) -> str:
    """How an unexpected YAML value is shown in an error: its kind and its text."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({value}; YAML reads unquoted yes/no/on/off as booleans, quote it)"
    if isinstance(value, (int, float)):
        return f"a number ({shown(value)})"
    if isinstance(value, str):
        return f"a string ({shown(value)})"
    if isinstance(value, list):
        return "a list" if value else "an empty list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__
