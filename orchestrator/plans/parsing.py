"""Plan documents as text: YAML or JSON (one schema), size and encoding checks, files.

Syntax errors name the line and column; a document over MAX_PLAN_BYTES is refused before it
is parsed, and a file before it is read. `read_document` also keeps where each part of the
document is (a LineMap), so that validation problems can name their line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from orchestrator.plans.errors import PlanError, PlanValidationError

MAX_PLAN_BYTES = 5 * 1024 * 1024
# Deep enough for the schema's longest path: ("subtasks", 3, "depends_on", 0).
MAX_LINE_MAP_DEPTH = 5


class _PlanYamlLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a field given twice in one mapping.

    Plain YAML keeps the last value silently: a second `subtasks:` would drop the first list.
    """

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: let SafeLoader report it
                break
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f'field "{key}" appears twice in one mapping (first at line {first.line + 1})',
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


class LineMap:
    """The line where each part of a document starts, by key path: ("subtasks", 3, "timeout_s") → 14.

    Built on first use from the YAML node tree (JSON is read as YAML for this), so a valid
    document pays nothing for it.
    """

    def __init__(self, compose: Callable[[], yaml.Node | None]):
        self._compose = compose

    @cached_property
    def _lines(self) -> dict[tuple[Any, ...], int]:
        try:
            root = self._compose()
        except yaml.YAMLError:
            return {}
        lines: dict[tuple[Any, ...], int] = {}
        pending: list[tuple[yaml.Node | None, tuple[Any, ...]]] = [(root, ())]
        while pending:
            node, path = pending.pop()
            if len(path) >= MAX_LINE_MAP_DEPTH:
                continue
            if isinstance(node, yaml.MappingNode):
                children = [(key.value, key, value) for key, value in node.value if isinstance(key, yaml.ScalarNode)]
            elif isinstance(node, yaml.SequenceNode):
                children = [(index, item, item) for index, item in enumerate(node.value)]
            else:
                continue
            for name, start, child in children:
                lines.setdefault((*path, name), start.start_mark.line + 1)
                pending.append((child, (*path, name)))
        return lines

    def line(self, path: tuple[Any, ...]) -> int | None:
        """The line of `path`, or of its nearest part the document has (a missing field: its mapping)."""
        lines = self._lines
        for end in range(len(path), 0, -1):
            if (line := lines.get(tuple(path[:end]))) is not None:
                return line
        return None


NO_LINES = LineMap(lambda: None)


@dataclass(frozen=True)
class ParsedDocument:
    data: Any
    lines: LineMap


def parse_document(text: str | bytes, *, filename: str = "") -> Any:
    """The data in a plan document: JSON for `.json` files or text starting with `{`, else YAML.

    Accepts text or raw bytes (which must be UTF-8). Raises PlanValidationError for a document
    over MAX_PLAN_BYTES, bytes that are not UTF-8, and syntax errors (naming line and column).
    """
    return read_document(text, filename=filename).data


def read_document(text: str | bytes, *, filename: str = "") -> ParsedDocument:
    """The document's data (as parse_document) and the line of each of its parts."""
    size = len(text) if isinstance(text, bytes) else _utf8_size(text)
    if size > MAX_PLAN_BYTES:
        raise PlanValidationError([_too_large_error(size)])
    if isinstance(text, bytes):
        text = _decode_utf8(text)
    text = text.removeprefix("\ufeff")
    if filename.lower().endswith(".json") or text.lstrip().startswith("{"):
        return ParsedDocument(_parse_json(text), LineMap(lambda: yaml.compose(text, Loader=yaml.SafeLoader)))
    return _parse_yaml(text)


def _utf8_size(text: str) -> int:
    if len(text) > MAX_PLAN_BYTES:  # every character takes at least one byte
        return len(text)
    return len(text.encode("utf-8", errors="surrogatepass"))


def _too_large_error(size: int) -> PlanError:
    return PlanError(
        "size",
        f"the plan is {size:,} bytes; at most {MAX_PLAN_BYTES:,} bytes ({MAX_PLAN_BYTES // (1024 * 1024)} MB) "
        "are allowed",
    )


def _decode_utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise PlanValidationError(
            [
                PlanError(
                    "encoding",
                    f"line {line}: byte 0x{data[exc.start]:02x} at offset {exc.start} is not UTF-8; "
                    "save the file as UTF-8 text",
                )
            ]
        ) from None


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_json_object_without_duplicates)
    except json.JSONDecodeError as exc:
        raise PlanValidationError(
            [PlanError("JSON syntax", f"line {exc.lineno}, column {exc.colno}: {exc.msg}")]
        ) from None
    except _DuplicateJsonField as exc:
        raise PlanValidationError([PlanError("JSON syntax", str(exc))]) from None


class _DuplicateJsonField(ValueError):
    pass


def _json_object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateJsonField(f'field "{key}" appears twice in one object')
        result[key] = value
    return result


def _parse_yaml(text: str) -> ParsedDocument:
    loader = None
    try:
        loader = _PlanYamlLoader(text)  # its reader checks the first characters already
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        raise PlanValidationError([PlanError("YAML syntax", _describe_yaml_error(exc))]) from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise PlanValidationError(
            [PlanError("YAML syntax", f"line {line}: character #x{exc.character:04x} is not allowed in YAML")]
        ) from None
    except yaml.YAMLError as exc:
        raise PlanValidationError([PlanError("YAML syntax", str(exc))]) from None
    finally:
        if loader is not None:
            loader.dispose()
    return ParsedDocument(data, LineMap(lambda: root))


def _describe_yaml_error(exc: yaml.MarkedYAMLError) -> str:
    """Where and what, in PyYAML's words; led by where the construct it was reading began when that
    is elsewhere: an unclosed quote is found only at the end of the file (a line past the last),
    and the line to fix is the quote's ("line 5, column 12: while scanning a quoted scalar, found
    unexpected end of stream at line 9, column 1")."""
    mark = exc.problem_mark or exc.context_mark
    problem = exc.problem or exc.context or "invalid YAML"
    if mark is None:
        return problem
    context = exc.context_mark
    if (
        exc.problem
        and exc.context
        and context is not None
        and (context.line, context.column) != (mark.line, mark.column)
    ):
        return f"{_where(context)}: {exc.context}, {problem} at {_where(mark)}"
    return f"{_where(mark)}: {problem}"


def _where(mark: yaml.Mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def read_file(path: str | os.PathLike) -> str:
    """The text of a plan file (UTF-8, without a byte-order mark). Size is checked before reading."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_PLAN_BYTES:
            raise PlanValidationError([_too_large_error(size)])
        data = path.read_bytes()
    except FileNotFoundError:
        raise PlanValidationError([PlanError("file", f"no such file: {path}")]) from None
    except IsADirectoryError:
        raise PlanValidationError([PlanError("file", f"{path} is a directory, not a plan file")]) from None
    except PermissionError:
        raise PlanValidationError([PlanError("file", f"permission denied: {path}")]) from None
    except OSError as exc:
        raise PlanValidationError([PlanError("file", f"cannot read {path}: {exc.strerror or exc}")]) from None
    return _decode_utf8(data).removeprefix("\ufeff")
