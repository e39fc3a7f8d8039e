"""Plan documents as text: YAML or JSON (one schema), size and encoding checks, files.

Syntax errors name the line and column; a document over MAX_PLAN_BYTES is refused before it
is parsed, and a file before it is read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from orchestrator.plans.errors import PlanError, PlanValidationError
from orchestrator.plans.spec import PlanSpec

MAX_PLAN_BYTES = 5 * 1024 * 1024


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


def parse_document(text: str | bytes, *, filename: str = "") -> Any:
    """The data in a plan document: JSON for `.json` files or text starting with `{`, else YAML.

    Accepts text or raw bytes (which must be UTF-8). Raises PlanValidationError for a document
    over MAX_PLAN_BYTES, bytes that are not UTF-8, and syntax errors (naming line and column).
    """
    size = len(text) if isinstance(text, bytes) else _utf8_size(text)
    if size > MAX_PLAN_BYTES:
        raise PlanValidationError([_too_large_error(size)])
    if isinstance(text, bytes):
        text = _decode_utf8(text)
    text = text.removeprefix("\ufeff")
    if filename.lower().endswith(".json") or text.lstrip().startswith("{"):
        return _parse_json(text)
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


def _parse_yaml(text: str) -> Any:
    try:
        return yaml.load(text, Loader=_PlanYamlLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        raise PlanValidationError([PlanError("YAML syntax", _describe_yaml_error(exc))]) from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise PlanValidationError(
            [PlanError("YAML syntax", f"line {line}: character #x{exc.character:04x} is not allowed in YAML")]
        ) from None
    except yaml.YAMLError as exc:
        raise PlanValidationError([PlanError("YAML syntax", str(exc))]) from None


def _describe_yaml_error(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    problem = exc.problem or exc.context or "invalid YAML"
    if mark is None:
        return problem
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"



def load_file(path: str | os.PathLike) -> tuple[PlanSpec, str]:
    """The validated plan in a file, and the file's text. Size is checked before reading."""
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
    text = _decode_utf8(data).removeprefix("\ufeff")
    from orchestrator.plans.validation import validate

    return validate(parse_document(text, filename=path.name)), text

