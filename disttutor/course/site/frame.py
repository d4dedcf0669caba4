"""The frame around every page of one edition: the top bar (with the language switch), the sidebar,
prev/next links and the table of contents; and every link between pages, made relative here.

A page is named by its path inside its edition (``index.html``, ``glossary.html``,
``chapters/04_ddp.html``); the same name in the other edition is its counterpart, and the switch
links it only where the other edition has that page (a chapter not yet translated has none).
"""
from __future__ import annotations

import html
from dataclasses import dataclass
from functools import cached_property

from disttutor.course.site.edition import Edition


def esc(s) -> str:
    return html.escape(str(s), quote=True)


def pages_of(chapters) -> frozenset[str]:
    return frozenset({"index.html", "glossary.html"} | {f"chapters/{c.stem}.html" for c in chapters})


@dataclass(frozen=True)
class Frame:
    ed: Edition
    chapters: tuple              # the edition's chapter cards, in order
    other: Edition | None = None  # the other edition, where it has pages at all
    other_pages: frozenset[str] = frozenset()

    @cached_property
    def titles(self) -> dict[int, str]:
        return {c.number: self.ed.title_of(c) for c in self.chapters}

    @property
    def pages(self) -> frozenset[str]:
        return pages_of(self.chapters)

    @staticmethod
    def home(rel: str) -> str:
        """From page ``rel`` to its edition's root."""
        return "../" * rel.count("/")

    def root(self, rel: str) -> str:
        """From page ``rel`` to the site's root (assets, the search index)."""
        return "../" * (self.ed.prefix + rel).count("/")

    def chapter_href(self, rel: str, stem: str) -> str:
        """A link from page ``rel`` to chapter ``stem``: this edition's page, else the other edition's."""
        page = f"chapters/{stem}.html"
        if page not in self.pages and self.other is not None and page in self.other_pages:
            return self.root(rel) + self.other.prefix + page
        return self.home(rel) + page

    def switch(self, rel: str) -> str:
        if self.other is None or rel not in self.other_pages:
            return ""
        o = self.other
        return (f'<a class="dt-lang" href="{self.root(rel)}{o.prefix}{rel}" hreflang="{o.lang}" lang="{o.lang}">'
                f'{esc(o.name)}</a>')

    def topbar(self, rel: str) -> str:
        h, L = self.home(rel), self.ed.labels
        return (f'<header class="dt-top"><a class="dt-brand" href="{h}index.html">disttutor</a>'
                f'<a href="{h}index.html#chapters">{L.chapters}</a><a href="{h}glossary.html">{L.glossary}</a>'
                f'<span class="dt-search"><input type="search" id="dt-q" placeholder="{esc(L.search)}" '
                f'aria-label="{esc(L.search)}" data-none="{esc(L.nothing)}" autocomplete="off">'
                f'<span id="dt-results" hidden></span></span>{self.switch(rel)}</header>')

    def sidebar(self, rel: str, current: int | None = None) -> str:
        here, h = ' class="dt-here"', self.home(rel)
        items = "".join(
            f'<li{here if c.number == current else ""}><a href="{h}chapters/{c.stem}.html">'
            f'<span class="dt-num">{c.number}</span> {esc(self.titles[c.number])}</a></li>' for c in self.chapters)
        return f'<p class="dt-side-h">{self.ed.labels.side_chapters}</p><ol class="dt-chapters">{items}</ol>'

    def prevnext(self, i: int) -> str:
        cs, L = self.chapters, self.ed.labels
        prev = cs[i - 1] if i > 0 else None
        nxt = cs[i + 1] if i + 1 < len(cs) else None
        left = (f'<a class="dt-prev" href="{prev.stem}.html">← {prev.number}. {esc(self.titles[prev.number])}</a>'
                if prev else f'<a class="dt-prev" href="../index.html">{L.home}</a>')
        right = (f'<a class="dt-next" href="{nxt.stem}.html">{nxt.number}. {esc(self.titles[nxt.number])} →</a>'
                 if nxt else f'<a class="dt-next" href="../glossary.html">{L.glossary_next}</a>')
        return f'<nav class="dt-prevnext">{left}{right}</nav>'

    def toc(self, headings: list[dict]) -> str:
        rows = [h for h in headings if h["in_markdown"] and h["level"] in (1, 2, 3)]
        items = "".join(f'<li class="dt-l{h["level"]}"><a href="#{esc(h["id"])}">{esc(h["title"])}</a></li>'
                        for h in rows)
        return f'<p class="dt-side-h">{self.ed.labels.on_this_page}</p><ul class="dt-toc">{items}</ul>' if items else ""
