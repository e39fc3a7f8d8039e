"""The layout's two promises, checked so they cannot drift.

1. Imports go downward only: each package of the stack may import from itself and from the
   packages below it, never from above (docs/architecture.md draws the stack).
2. docs/architecture.md names every module of glassbox/, orchestrator/ and dashboard/.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("glassbox", "dashboard", "orchestrator")

# Top to bottom. A module belongs to the longest prefix listed; it may import its own layer and below.
LAYERS: list[tuple[str, ...]] = [
    ("glassbox",),
    ("dashboard",),
    ("orchestrator.tasks", "orchestrator.admin", "orchestrator.management", "orchestrator.apps"),
    ("orchestrator.engine",),
    ("orchestrator.governance",),
    ("orchestrator.readmodels",),
    ("orchestrator.plans",),
    ("orchestrator.providers", "orchestrator.tools"),
    (
        "orchestrator.models",
        "orchestrator.events",
        "orchestrator.ratelimit",
        "orchestrator.sql",
        "orchestrator.db_threads",
        "orchestrator.orm_broker",
        "orchestrator.parent_death",
        "orchestrator.process_group",
        "orchestrator.wording",
        "orchestrator.migrations",
    ),
]
# glassbox.env is read by settings before Django starts: a leaf that everything may use.
SHARED_LEAVES = ("glassbox.env", "glassbox.settings")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer index)
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), index)
    return None if best is None else best[1]


def imported_modules(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, absolute module) for every import in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            # `from orchestrator import plans` imports the subpackage orchestrator.plans
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
    return found


def test_every_module_has_a_layer():
    assert [m for m in project_modules() if layer_of(m) is None and m not in PACKAGES] == []


def test_imports_go_downward_only():
    modules = project_modules()
    upward = []
    for module, path in modules.items():
        own = layer_of(module)
        if own is None:
            continue
        for line, target in imported_modules(path, module):
            if target.startswith(SHARED_LEAVES) or target not in modules:
                continue
            theirs = layer_of(target)
            if theirs is not None and theirs < own:
                upward.append(f"{path.relative_to(ROOT)}:{line} imports {target} (a layer above)")
    assert upward == []


def test_architecture_doc_names_every_module():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    missing = [
        path.relative_to(ROOT).as_posix()
        for path in project_modules().values()
        if "migrations" not in path.parts
        and not (path.name == "__init__.py" and not path.read_text().strip())
        and not named_in_doc(doc, path)
    ]
    assert missing == [], "docs/architecture.md does not mention: " + ", ".join(missing)


def named_in_doc(doc: str, path: Path) -> bool:
    """Named by its whole path, or in the table of a folder that holds it (`orchestrator/` lists
    `management/console.py`; a row may name several files: `approve.py`, `reject.py`)."""
    relative = path.relative_to(ROOT)
    if relative.as_posix() in doc:
        return True
    sections = [section.partition("\n") for section in doc.split("\n#")[1:]]
    for folder in relative.parents:
        if folder == Path("."):
            break
        heading = f"`{folder.as_posix()}/`"
        inside = relative.relative_to(folder).as_posix()
        for title, _, body in sections:
            if heading in title and (f"`{inside}`" in body or f"`{path.name}`" in body):
                return True
    return False


@pytest.mark.parametrize(
    "module, expected",
    [
        ("orchestrator.engine.scheduler", 3),
        ("orchestrator.models", 8),
        ("dashboard.views.run", 1),
        ("orchestrator.management.commands.launch", 2),
    ],
)
def test_layer_lookup_takes_the_longest_prefix(module, expected):
    assert layer_of(module) == expected
