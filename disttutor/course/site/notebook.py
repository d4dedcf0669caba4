"""One committed chapter notebook as one web page, outputs as they were committed (never re-run).

The page is nbconvert's JupyterLab HTML (the same cells, outputs and widget state a learner's
JupyterLab shows) in the site's own frame (``templates/chapter.html.j2``). Before converting, a
copy of the notebook is adapted for the web:

* links between chapters (``04_ddp.ipynb``) point to the chapter pages (of the page's own edition,
  where it has that chapter: ``link`` says where a chapter's page is);
* a widget whose controls call back into the kernel (a slider that redraws a figure) is drawn
  from its saved state with those controls disabled -- its figure is the one the build saw -- and
  a line under it (``kernel_note``, in the page's language) says "run the notebook to use this
  widget" -- unless it needs no ranks (``live.py``): then the page's own controls sit above the
  saved output and run the course's Python in the browser. Display-only widgets (progress bars)
  render as they ended.
"""
from __future__ import annotations

import copy
import os
import re
from html.parser import HTMLParser

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
# Models a learner acts on; their change events reach Python callbacks, which a static page lacks.
CONTROL = re.compile(r"(Slider|Dropdown|Button|ToggleButtons|Select|SelectMultiple|Checkbox|Text|"
                     r"Textarea|Combobox|RadioButtons|Play|ColorPicker|DatePicker|BoundedIntText|"
                     r"BoundedFloatText|IntText|FloatText|Password|TagsInput)Model$")
CHAPTER_LINK = re.compile(r"\]\((\d\d_[A-Za-z0-9_]+)\.ipynb(#[^)\s]*)?\)")


def widget_state(nb) -> dict:
    return nb.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})


def widget_views(nb) -> list[str]:
    """Model ids of the notebook's widget outputs, in order (what a page must render)."""
    return [o["data"][WIDGET_VIEW]["model_id"] for c in nb.cells for o in c.get("outputs", [])
            if WIDGET_VIEW in o.get("data", {})]


def _tree(state: dict, model_id: str) -> list[str]:
    """``model_id`` and every model it refers to (children, an Output's nested views...)."""
    seen, todo = [], [model_id]
    while todo:
        m = todo.pop()
        if m in seen or m not in state:
            continue
        seen.append(m)
        todo += re.findall(r"IPY_MODEL_([0-9a-f]+)", repr(state[m].get("state", {})))
    return seen


def needs_kernel(state: dict, model_id: str) -> bool:
    return any(CONTROL.search(state[m].get("model_name", "")) for m in _tree(state, model_id))


def _web_markdown(text: str, link) -> str:
    return CHAPTER_LINK.sub(lambda m: f"]({link(m.group(1))}{m.group(2) or ''})", text)


def for_the_web(nb, link=lambda stem: f"{stem}.html", kernel_note="Run the notebook to use this widget.",
                live=None):
    """A copy of ``nb`` adapted as the module docstring says (the committed file is untouched).

    ``link(stem)``: the href of chapter ``stem``'s page from this page; ``kernel_note``: the HTML
    of the line under a widget that needs the kernel; ``live(source, state, model_id)``: the HTML of
    a live widget's panel for the cell ``source``'s widget (and the state adapted to it), or None."""
    nb = copy.deepcopy(nb)
    state = widget_state(nb)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = _web_markdown(cell.source, link)
        outputs = []
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "text/markdown" in data:
                data["text/markdown"] = _web_markdown(data["text/markdown"], link)
            outputs.append(out)
            if WIDGET_VIEW in data and needs_kernel(state, data[WIDGET_VIEW]["model_id"]):
                panel = live(cell.source, state, data[WIDGET_VIEW]["model_id"]) if live else None
                if panel is not None:  # live: the page's own controls above the saved output (site/live.py)
                    outputs.insert(len(outputs) - 1, {"output_type": "display_data", "metadata": {},
                                                      "data": {"text/html": panel}})
                    continue
                for m in _tree(state, data[WIDGET_VIEW]["model_id"]):
                    if CONTROL.search(state[m].get("model_name", "")):
                        state[m]["state"]["disabled"] = True
                outputs.append({"output_type": "display_data", "metadata": {},
                                "data": {"text/html": f'<p class="dt-needs-kernel">{kernel_note}</p>'}})
        if "outputs" in cell:
            cell.outputs = outputs
    return nb


def exporter(lang: str = "en"):
    from nbconvert import HTMLExporter

    # language_code is the page's <html lang> (the lab template writes it).
    ex = HTMLExporter(template_name="lab", extra_template_paths=[TEMPLATES], language_code=lang)
    ex.template_file = "chapter.html.j2"
    ex.exclude_anchor_links = False
    return ex


class Outline(HTMLParser):
    """The page's headings (for the table of contents) and its text by section (for search)."""

    SKIP = {"script", "style"}
    VOID = {"img", "br", "hr", "input", "meta", "link", "source", "wbr", "col", "area"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, str]] = []
        self.headings: list[dict] = []   # {"level", "id", "title", "in_markdown"}
        self.sections: list[dict] = [{"id": "", "title": "", "text": []}]
        self._heading: dict | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in self.VOID:
            return
        self.stack.append((tag, a.get("class") or ""))
        if tag in ("h1", "h2", "h3") and a.get("id"):
            in_md = any("jp-MarkdownCell" in cls for _, cls in self.stack)
            self._heading = {"level": int(tag[1]), "id": a["id"], "title": [], "in_markdown": in_md}

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        while self.stack:
            if self.stack.pop()[0] == tag:
                break
        if self._heading and tag == f"h{self._heading['level']}":
            h = self._heading
            h["title"] = " ".join("".join(h["title"]).replace("¶", "").split())
            self.headings.append(h)
            self.sections.append({"id": h["id"], "title": h["title"], "text": []})
            self._heading = None

    def handle_data(self, data):
        if any(t in self.SKIP for t, _ in self.stack):
            return
        if self._heading is not None:
            self._heading["title"].append(data)
        else:
            self.sections[-1]["text"].append(data)


def outline(html: str) -> Outline:
    o = Outline()
    o.feed(html)
    for s in o.sections:
        s["text"] = " ".join(" ".join(s["text"]).split())
    return o
