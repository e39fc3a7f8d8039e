"""Agent output rendered as sanitised Markdown."""

from __future__ import annotations

from django.utils.safestring import SafeString

from dashboard.markdown import MAX_RENDER_CHARS, render_markdown


def test_markdown_becomes_html():
    html = render_markdown("# Title\n\n- one\n- **two**\n\n```python\nprint(1)\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |")
    assert isinstance(html, SafeString)
    assert "<h1>Title</h1>" in html
    assert "<li><strong>two</strong></li>" in html
    assert '<code class="language-python">' in html
    assert "<table>" in html and "<td>1</td>" in html


def test_scripts_images_handlers_and_javascript_urls_are_removed():
    html = render_markdown(
        'Hi <script>alert("x")</script> <img src=x onerror="alert(1)"> <b onclick="alert(2)">bold</b> '
        '<a href="javascript:alert(3)">js</a> [md](javascript:alert(4)) <style>body{}</style> <iframe src="/"></iframe>'
    )
    for bad in ("<script", 'alert("x")', "<img", "onerror", "onclick", "javascript:", "<style", "<iframe"):
        assert bad not in html, bad
    assert "<b>bold</b>" in html


def test_links_are_kept_with_a_safe_rel():
    html = render_markdown("[docs](https://example.com/a)")
    assert 'href="https://example.com/a"' in html
    assert 'rel="noopener noreferrer nofollow"' in html


def test_empty_output_renders_nothing():
    assert render_markdown("") == ""
    assert render_markdown(None) == ""


def test_very_long_output_is_cut_with_a_note():
    html = render_markdown("word " * (MAX_RENDER_CHARS // 5 + 100))
    assert "output cut at" in html
