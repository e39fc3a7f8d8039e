"""Agent output as sanitised HTML: Markdown rendered by Python-Markdown, then cleaned by nh3.

Agent output is untrusted text (DESIGN §6). Python-Markdown passes raw HTML through, so its
result is never trusted as such: nh3 (the Rust `ammonia` sanitiser) keeps only the tags and
attributes below, drops `<script>`/`<style>` with their content, strips event handlers and
`javascript:` URLs, and adds `rel="noopener noreferrer nofollow"` to links. Images are not
allowed at all: an agent's answer must not make the browser fetch anything.

`render_markdown` is the only place where output becomes markup; templates use it through the
`markdown` filter of `glassbox_run` and never mark raw output safe.
"""

from __future__ import annotations

import markdown as markdown_lib
import nh3
from django.utils.safestring import SafeString, mark_safe

EXTENSIONS = ["fenced_code", "tables", "sane_lists"]

ALLOWED_TAGS = {
    "a",
    "abbr",
    "b",
    "blockquote",
    "br",
    "code",
    "dd",
    "del",
    "details",
    "dl",
    "dt",
    "em",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "hr",
    "i",
    "kbd",
    "li",
    "ol",
    "p",
    "pre",
    "s",
    "samp",
    "strong",
    "sub",
    "summary",
    "sup",
    "table",
    "tbody",
    "td",
    "tfoot",
    "th",
    "thead",
    "tr",
    "ul",
}
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title"},
    "abbr": {"title"},
    "code": {"class"},  # fenced_code marks the language: class="language-python"
    "ol": {"start"},
    "td": {"align"},
    "th": {"align"},
}
URL_SCHEMES = {"http", "https", "mailto"}
# Longest output rendered as Markdown; anything longer is rendered up to here and then cut
# with a note (the whole text stays in the downloads).
MAX_RENDER_CHARS = 200_000


def sanitize_html(html: str) -> str:
    return nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes=URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
    )


def render_markdown(text: str | None) -> SafeString:
    """Sanitised HTML for Markdown `text` (empty string for no text)."""
    if not text:
        return mark_safe("")
    cut = len(text) > MAX_RENDER_CHARS
    source = text[:MAX_RENDER_CHARS] if cut else text
    html = markdown_lib.markdown(source, extensions=EXTENSIONS, output_format="html")
    clean = sanitize_html(html)
    if cut:
        clean += f"<p><em>(output cut at {MAX_RENDER_CHARS:,} characters here; the download has all of it)</em></p>"
    # Safe: `clean` is nh3's output, which contains only the allowed tags and attributes.
    return mark_safe(clean)
