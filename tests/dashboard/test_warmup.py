"""daphne's start does a live frame's one-off work: after `warm_up`, rendering the run page's
fragments compiles no template and builds no URL table."""

from __future__ import annotations

from django.template import engines
from django.template.base import Template
from django.urls import clear_url_caches, get_resolver

from dashboard import fragments
from dashboard.warmup import warm_up


def test_after_warm_up_no_fragment_is_compiled_and_the_url_tables_are_built(monkeypatch):
    engine = engines["django"].engine
    for loader in engine.template_loaders:
        loader.reset()  # the cached loader forgets what earlier tests compiled
    clear_url_caches()
    assert not get_resolver()._populated

    warm_up()

    assert get_resolver()._populated
    compiled = []
    original = Template.compile_nodelist
    monkeypatch.setattr(Template, "compile_nodelist", lambda self: compiled.append(self.name) or original(self))
    for name in fragments.TEMPLATES.values():
        engine.get_template(name)
    assert compiled == []


def test_warm_up_covers_what_the_fragments_include():
    """Every template a fragment includes lives beside the fragments (what warm_up compiles)."""
    import re
    from pathlib import Path

    from django.conf import settings

    folder = Path(settings.BASE_DIR) / "templates" / fragments.T
    included = {
        name for path in folder.glob("*.html") for name in re.findall(r'{%\s*include\s+"([^"]+)"', path.read_text())
    }
    assert included and all(name.startswith(fragments.T) and (folder / Path(name).name).exists() for name in included)
