"""orchestrator/models/ is a package by job, read as one module: `from orchestrator.models import X`."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from django.apps import apps

import orchestrator.models as package


def defined_in_the_package() -> dict[str, object]:
    """Every class the package's modules define, by name."""
    found: dict[str, object] = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        found |= {
            name: obj for name, obj in inspect.getmembers(module, inspect.isclass) if obj.__module__ == module.__name__
        }
    return found


def test_every_class_of_every_module_is_imported_from_the_package():
    defined = defined_in_the_package()
    assert sorted(package.__all__) == sorted(defined)
    assert [name for name, obj in defined.items() if getattr(package, name) is not obj] == []


def test_the_app_keeps_its_label_and_its_models_their_tables():
    models = list(apps.get_app_config("orchestrator").get_models())
    assert sorted(m.__name__ for m in models) == sorted(
        n for n in package.__all__ if hasattr(getattr(package, n), "_meta")
    )
    assert [m._meta.db_table for m in models if m._meta.db_table != f"orchestrator_{m.__name__.lower()}"] == []
