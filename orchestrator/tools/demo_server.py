"""The demo MCP tool server: a per-run workspace and a calculator (issue 12, point 6).

Run it as ``python -m orchestrator.tools.demo_server`` (stdio). ``seed_demo`` registers it as the
tool server ``workspace`` and grants it to the demo agents, so a demo run makes real MCP round
trips with no API key. Workers start it in the run's directory (``GLASSBOX_ARTIFACTS_DIR/run-<id>``):

* ``write_file``, ``read_file``, ``list_files`` work inside its working directory only. A path
  is relative; one that leads outside (``..``, an absolute path, a symbolic link pointing out)
  is refused, as is a file over :data:`MAX_FILE_BYTES`. What the agents write there is the run's
  artifacts.
* ``calculate`` evaluates arithmetic by walking its syntax tree: numbers, + - * / // % **,
  parentheses and a few functions (sqrt, log, exp, sin, cos, tan, abs, round, min, max) and the
  constants pi and e. No name lookup, no attribute, no ``eval``; exponents and results are
  bounded so that no expression can exhaust the machine.

This module imports nothing of Django or of the rest of Glassbox: it runs in a child process
that is given only its declared environment.
"""

from __future__ import annotations

import ast
import math
import operator
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

MAX_FILE_BYTES = 1_000_000
MAX_LIST_ENTRIES = 500
MAX_EXPRESSION_CHARS = 500
MAX_EXPONENT = 1000
MAX_RESULT_DIGITS = 1000

server = MCPServer(
    "glassbox-demo",
    instructions="A workspace for this run (files in its working directory) and a calculator.",
)


# --- The workspace ---------------------------------------------------------------------------------


def workspace_root() -> Path:
    return Path.cwd().resolve()


def inside(path: str, root: Path | None = None) -> Path:
    """``path`` resolved inside the workspace, or ToolError naming the problem."""
    root = root or workspace_root()
    if not isinstance(path, str) or not path.strip():
        raise ToolError("give a file path relative to the workspace, e.g. notes/summary.md")
    if "\x00" in path:
        raise ToolError("a path cannot contain a NUL character")
    if os.path.isabs(path) or path.startswith("~"):
        raise ToolError(f"{path!r} is absolute; paths are relative to the workspace")
    resolved = (root / path).resolve()
    if resolved != root and not resolved.is_relative_to(root):
        raise ToolError(f"{path!r} leads outside the workspace")
    return resolved


def relative(path: Path, root: Path | None = None) -> str:
    return path.relative_to(root or workspace_root()).as_posix() or "."


@server.tool()
def write_file(
    path: Annotated[str, Field(description="relative path", examples=["notes/findings.md", "report/draft.md"])],
    content: Annotated[
        str,
        Field(
            description="the whole text of the file",
            examples=["# Findings\n\n- the data is consistent\n", "Draft: three options, one recommended.\n"],
        ),
    ],
) -> str:
    """Write a text file in the run's workspace (created or replaced). Returns what was written."""
    target = inside(path)
    data = content.encode("utf-8")
    if len(data) > MAX_FILE_BYTES:
        raise ToolError(f"the content is {len(data):,} bytes; a file may hold at most {MAX_FILE_BYTES:,}")
    if target.is_dir():
        raise ToolError(f"{path!r} is a folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    inside(relative(target.parent))  # the folders made are still inside
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(target, flags, 0o600)
    except OSError as exc:
        raise ToolError(f"cannot write {path!r}: {exc.strerror}") from None
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return f"wrote {relative(target)} ({len(data):,} bytes)"


@server.tool()
def read_file(
    path: Annotated[str, Field(description="relative path", examples=["notes/findings.md", "report/draft.md"])],
) -> str:
    """Read a text file of the run's workspace."""
    target = inside(path)
    if not target.is_file():
        raise ToolError(f"no file {path!r} in the workspace")
    size = target.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ToolError(f"{path!r} is {size:,} bytes; at most {MAX_FILE_BYTES:,} can be read")
    return target.read_bytes().decode("utf-8", errors="replace")


@server.tool()
def list_files(
    path: Annotated[str, Field(description="a folder, relative; the whole workspace by default")] = ".",
) -> list[str]:
    """List the files under a folder of the run's workspace (the whole workspace by default),
    each as "relative/path (N bytes)"."""
    root = workspace_root()
    folder = root if path in ("", ".") else inside(path, root)
    if not folder.is_dir():
        raise ToolError(f"no folder {path!r} in the workspace")
    entries = []
    for current, dirs, files in os.walk(folder, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            file = Path(current) / name
            if file.is_symlink():
                continue
            entries.append(f"{relative(file, root)} ({file.stat().st_size:,} bytes)")
            if len(entries) >= MAX_LIST_ENTRIES:
                return [*entries, f"… (only the first {MAX_LIST_ENTRIES} files are listed)"]
    return entries


# --- The calculator --------------------------------------------------------------------------------

Number = int | float

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, Callable[..., Number]] = {
    "sqrt": math.sqrt,
    "log": math.log,
    "exp": math.exp,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}


def evaluate(expression: str) -> Number:
    """The value of an arithmetic expression (see the module docstring), or ToolError."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ToolError(f"{expression!r} is not an arithmetic expression") from None
    try:
        return _value(tree.body)
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except (OverflowError, ValueError, TypeError) as exc:
        raise ToolError(f"cannot compute {expression!r}: {exc}") from None


def _value(node: ast.AST) -> Number:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ToolError(f"exponents are limited to ±{MAX_EXPONENT}")
        return _bounded(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
        if node.keywords:
            raise ToolError(f"{node.func.id}() takes no keyword arguments")
        return _bounded(_FUNCTIONS[node.func.id](*(_value(arg) for arg in node.args)))
    raise ToolError(
        f"{ast.unparse(node)!r} is not allowed: only numbers, + - * / // % **, parentheses, "
        f"{', '.join(_FUNCTIONS)} and {', '.join(_CONSTANTS)}"
    )


def _bounded(value: Any) -> Number:
    if isinstance(value, complex):
        raise ToolError("the result is a complex number")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**MAX_RESULT_DIGITS:
        raise ToolError(f"the result has more than {MAX_RESULT_DIGITS} digits")
    return value


@server.tool()
def calculate(
    expression: Annotated[
        str, Field(description="arithmetic", examples=["(17.5 - 2) * 3", "sqrt(2) * 100", "1200 * 1.07 ** 3"])
    ],
) -> str:
    """Evaluate an arithmetic expression such as "(17.5 - 2) * 3 / sqrt(2)" and return its value."""
    value = evaluate(expression)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


def main() -> None:
    server.run()


if __name__ == "__main__":
    main()
