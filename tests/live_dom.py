"""A small DOM for tests: a page's HTML as a tree, a live frame applied to it as the browser does,
and a canonical text of any part to compare with a fresh render.

`apply_frame` follows htmx's out-of-band swaps (`hx-swap-oob`: "true" replaces the element with
that id, "innerHTML" its content, "afterbegin" prepends to it; the attribute is removed) and the
glassbox-live extension's filter before them (static/dashboard/run/oob.js): a part whose target is
not on the page is dropped unless it carries `data-upsert` (then it joins that container), and log
rows already shown are dropped. `canonical` ignores whitespace between elements and the order of
attributes, as a browser's DOM does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str | None]
    children: list[Element | str] = field(default_factory=list)

    @property
    def id(self) -> str | None:
        return self.attrs.get("id")

    def elements(self):
        """This element and every element below it, in document order."""
        yield self
        for child in self.children:
            if isinstance(child, Element):
                yield from child.elements()

    def find(self, element_id: str) -> Element | None:
        return next((e for e in self.elements() if e.id == element_id), None)

    def parent_of(self, target: Element) -> Element | None:
        return next((e for e in self.elements() if any(child is target for child in e.children)), None)


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        element = Element(tag, dict(attrs))
        self.stack[-1].children.append(element)
        if tag not in VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag, attrs):
        self.stack[-1].children.append(Element(tag, dict(attrs)))

    def handle_endtag(self, tag):
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data):
        self.stack[-1].children.append(data)


def parse(html: str) -> Element:
    builder = _Builder()
    builder.feed(html)
    builder.close()
    return builder.root


def apply_frame(page: Element, frame: str) -> None:
    """Swap the frame's out-of-band parts into `page`, in their order, as the browser would."""
    for part in [c for c in parse(frame).children if isinstance(c, Element)]:
        swap = part.attrs.pop("hx-swap-oob", None)
        if swap is None:
            continue
        target = page.find(part.id or "")
        if target is None:
            container = page.find(part.attrs.get("data-upsert", "").removeprefix("#"))
            if container is not None:
                container.children.append(part)
            continue
        if swap == "true":
            parent = page.parent_of(target)
            assert parent is not None
            parent.children[parent.children.index(target)] = part
        elif swap == "innerHTML":
            target.children = part.children
        elif swap == "afterbegin":
            shown = {e.id for e in target.elements() if e.id}
            fresh = [c for c in part.children if not (isinstance(c, Element) and c.id in shown)]
            target.children = fresh + target.children
        else:
            raise AssertionError(f"no such swap in the live protocol: {swap}")


def canonical(node: Element | str, indent: str = "") -> str:
    """The element as indented text, one element or text a line: whitespace between elements
    dropped, attributes sorted."""
    if isinstance(node, str):
        text = " ".join(node.split())
        return f"{indent}{text}\n" if text else ""
    attrs = " ".join(f'{k}="{v}"' if v is not None else k for k, v in sorted(node.attrs.items()))
    inner = "".join(canonical(child, indent + "  ") for child in node.children)
    return f"{indent}<{node.tag}{' ' + attrs if attrs else ''}>\n{inner}"
