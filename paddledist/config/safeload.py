"""Bounded reading of every YAML, JSON and text file a user can hand the tool (docs/security.md, "Limits").

A config is small: anything past these limits is refused with one line before anything else happens, so a
crafted file cannot stall a node (an alias "bomb" expands to billions of nodes in the flattening that
follows the parse, thousands of nested `[` overflow PyYAML's recursive composer) or be silently
misread (a second `Train:` block replaces the first in plain `yaml.safe_load`).
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any

import yaml

from paddledist.errors import UserError

MAX_FILE_BYTES = 1 << 20
"""Config, inference.yml, label and result files: 1 MiB (PaddleX's largest config is ~3 KiB)."""
MAX_LIST_BYTES = 256 << 20
"""Dataset lists (train.txt, val.txt): 256 MiB, several million lines."""
MAX_NODES = 20_000
"""YAML nodes after aliases are expanded (a full config has ~100)."""
MAX_DEPTH = 32
"""Nesting of YAML or JSON collections (a config needs 3)."""


def read_bytes(path: str, what: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """A regular file's bytes, at most `limit`: FIFOs and devices are refused (reading one blocks forever)."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise UserError(f"{what}: cannot read {path}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{what}: {path} is not a regular file (a FIFO, device or folder); give a file")
    if st.st_size > limit:
        raise UserError(f"{what}: {path} is {st.st_size} bytes, more than the {limit} allowed (docs/security.md)")
    try:
        # O_NONBLOCK: a FIFO swapped in after the stat opens without waiting for a writer, and reads as empty
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise UserError(f"{what}: cannot read {path}: {e.strerror}") from None
    if len(data) > limit:
        raise UserError(f"{what}: {path} is more than the {limit} bytes allowed (docs/security.md)")
    return data


def read_text(path: str, what: str, limit: int = MAX_FILE_BYTES) -> str:
    """A file decoded strictly as UTF-8; a bad byte is named by line."""
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise UserError(f"{what}: {path}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x}); "
                        "save the file as UTF-8") from None


_SEXAGESIMAL = re.compile(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?")
"""YAML 1.1's base-60 numbers (`2:4` is 124, `1:30` is 90): read as the text written, as YAML 1.2 does."""


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, deep nesting and alias expansion past `MAX_NODES`, and reads
    `2:4` as text (Train.nnodes: 2:4 is a range, not YAML 1.1's sexagesimal 124)."""

    def resolve(self, kind, value, implicit):  # noqa: ANN001, ANN201 - PyYAML's signature
        if kind is yaml.ScalarNode and implicit[0] and _SEXAGESIMAL.fullmatch(value):
            return "tag:yaml.org,2002:str"
        return super().resolve(kind, value, implicit)

    def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
        self._depth = getattr(self, "_depth", 0) + 1
        if self._depth > MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise _Refused(f"nested more than {MAX_DEPTH} levels deep", mark.line + 1)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self):  # noqa: ANN201
        node = super().compose_document()
        if _expanded_size(node, {}) > MAX_NODES:
            raise _Refused(f"anchors and aliases expand to more than {MAX_NODES} nodes; write the values out "
                           "or use fewer aliases")
        return node

    def construct_mapping(self, node, deep=False):  # noqa: ANN001, ANN201
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key; SafeLoader reports it below
                continue
            if first != key_node.start_mark.line + 1:
                raise _Refused(f"duplicate key {key!r} (first on line {first}); keep one",
                               key_node.start_mark.line + 1)
        return super().construct_mapping(node, deep)


class _Refused(Exception):
    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.line = line


def _expanded_size(node: yaml.Node, memo: dict) -> int:
    """Nodes counted as often as aliases repeat them; memoised, so the count itself stays cheap."""
    if id(node) in memo:
        return memo[id(node)]
    memo[id(node)] = MAX_NODES + 1  # a recursive alias expands forever
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, memo) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    memo[id(node)] = min(size, MAX_NODES + 1)
    return memo[id(node)]


def parse_yaml(text: str, where: str) -> Any:
    """One YAML document, bounded; every problem is a `UserError` naming `where` (and the line)."""
    loader = None
    try:
        loader = _BoundedLoader(text)  # its reader already refuses control characters
        return loader.get_single_data()
    except _Refused as e:
        raise UserError(f"{where}{f':{e.line}' if e.line else ''}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f"{where}:{mark.line + 1}:{mark.column + 1}" if mark else where
        problem = getattr(e, "problem", None) or str(e)
        raise UserError(f"malformed YAML at {at}: {problem}") from None
    except RecursionError:  # not expected past the depth limit; kept so a deep input is never a traceback
        raise UserError(f"{where}: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()


def read_yaml(path: str, what: str) -> Any:
    return parse_yaml(read_text(path, what), path)


def parse_json(text: str, where: str) -> Any:
    """JSON with duplicate keys refused and nesting bounded."""
    def pairs(items: list) -> dict:
        found: dict = {}
        for key, value in items:
            if key in found:
                raise UserError(f"{where}: duplicate key {key!r}")
            found[key] = value
        return found

    depth = _json_depth(text)
    if depth > MAX_DEPTH:
        raise UserError(f"{where}: nested more than {MAX_DEPTH} levels deep")
    try:
        return json.loads(text, object_pairs_hook=pairs)
    except (ValueError, RecursionError) as e:
        raise UserError(f"{where}: not valid JSON: {e}") from None


def _json_depth(text: str) -> int:
    """Deepest bracket nesting outside strings (a cheap scan before the recursive parser sees it)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def read_json(path: str, what: str) -> Any:
    return parse_json(read_text(path, what), path)
