"""Live widgets on the web pages: controls that run the course's own Python in the reader's browser.

A widget that needs no ranks (:data:`disttutor.viz.web.LIVE`: chapter 1's memory calculator,
chapter 2's all-reduce cost model, chapter 7's schedule simulator, chapter 13's planner) is found by the call in its cell's source;
its controls are read from the notebook's saved widget state (labels, options, the values the build
saw). The page gets those controls as plain HTML form elements, which work before any script runs,
above the widget's saved output. ``assets/live.js`` loads Pyodide (vendored from npm, see
``vendor.PYODIDE``) when a reader first touches a control, unpacks ``assets/live/disttutor.zip`` --
the course's modules that :mod:`disttutor.viz.web` imports, byte for byte -- and draws what
``web.run`` returns as SVG in place of the saved output.

A widget is made live only if every control maps to a keyword of its Python function and that
function, called with the saved values, prints the saved table again (where the widget printed one):
otherwise the page keeps it as saved, with the "run the notebook" line.
"""
from __future__ import annotations

import html
import json
import modulefinder
import os
import zipfile

from disttutor.viz import web

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ZIP = "assets/live/disttutor.zip"  # relative to the site's root


def _walk(state: dict, model_id: str) -> list[str]:
    """The widget's models in display order (a box's children left to right, depth first)."""
    out, m = [model_id], state.get(model_id, {}).get("state", {})
    for child in m.get("children", []) if isinstance(m.get("children"), list) else []:
        out += _walk(state, child.replace("IPY_MODEL_", ""))
    return out


def _is_control(model: dict) -> bool:
    from disttutor.course.site.notebook import CONTROL

    return bool(CONTROL.search(model.get("model_name", "")))


def controls(state: dict, model_id: str) -> list[dict]:
    """The saved controls, each ``{"label", "kind", ...}``: option labels and index, or min/max/step/value."""
    out = []
    for m in _walk(state, model_id):
        model = state.get(m, {})
        if not _is_control(model):
            continue
        s, name = model["state"], model["model_name"]
        c = {"label": s.get("description", ""), "model": name}
        if "_options_labels" in s:
            c.update(kind="toggle" if name.startswith("ToggleButtons") else "select" if name.startswith("Dropdown")
                     else "slider", labels=list(s["_options_labels"]), index=s.get("index", 0))
        elif name.startswith("IntSlider"):
            c.update(kind="int", min=s.get("min", 0), max=s.get("max", 100), step=s.get("step", 1),
                     value=s.get("value", 0))
        else:
            c.update(kind="other")
        out.append(c)
    return out


def saved_text(state: dict, model_id: str) -> str:
    """What the widget printed when the chapter was built (its Output models' streams)."""
    return "".join(o.get("text", "") if isinstance(o.get("text"), str) else "".join(o.get("text", []))
                   for m in _walk(state, model_id) if state.get(m, {}).get("model_name") == "OutputModel"
                   for o in state[m]["state"].get("outputs", []) if o.get("output_type") == "stream")


def spec(source: str, state: dict, model_id: str) -> dict | None:
    """The page's description of a live widget (name, controls with keywords, fixed arguments), or None."""
    w = web.find(source)
    if w is None:
        return None
    by_label = {label: key for key, label in w.controls.items()}
    cs = controls(state, model_id)
    if sorted(c["label"] for c in cs) != sorted(by_label) or any(c["kind"] == "other" for c in cs):
        return None
    for c in cs:
        c["key"] = by_label[c["label"]]
    values = {c["key"]: web.value(c["labels"][c["index"]]) if "labels" in c else c["value"] for c in cs}
    saved = saved_text(state, model_id)
    fixed = w.fixed(saved, values)
    if fixed is None:
        return None
    got = web.compute(w.name, {k: str(v) for k, v in values.items()}, fixed)
    if "error" in got and "table" not in got:
        return None  # the saved choice is one the Python now rejects
    if "table" in got and saved.strip() and got["table"] != saved.strip("\n"):
        return None  # the Python no longer prints what the notebook saved: keep the saved widget
    return {"name": w.name, "fixed": fixed, "controls": cs}


def strip_controls(state: dict, model_id: str) -> None:
    """Leave only the widget's outputs for the page's renderer to draw: the page shows its own controls."""
    for m in _walk(state, model_id):
        s = state.get(m, {}).get("state", {})
        if isinstance(s.get("children"), list):
            s["children"] = [c for c in s["children"] if _keeps_output(state, c.replace("IPY_MODEL_", ""))]


def _keeps_output(state: dict, model_id: str) -> bool:
    return any(state.get(m, {}).get("model_name") == "OutputModel" for m in _walk(state, model_id))


def _control_html(c: dict) -> str:
    e, key = html.escape, html.escape(c["key"])
    label = f'<span class="dt-live-label">{e(c["label"])}</span>'
    if c["kind"] == "select":
        opts = "".join(f'<option value="{e(lb)}"{" selected" if i == c["index"] else ""}>{e(lb)}</option>'
                       for i, lb in enumerate(c["labels"]))
        return f'<label class="dt-live-c">{label}<select data-key="{key}">{opts}</select></label>'
    if c["kind"] == "toggle":
        bs = "".join(f'<button type="button" value="{e(lb)}" aria-pressed="{"true" if i == c["index"] else "false"}">'
                     f'{e(lb)}</button>' for i, lb in enumerate(c["labels"]))
        return f'<div class="dt-live-c" role="group" aria-label="{e(c["label"])}" data-key="{key}">{label}{bs}</div>'
    if c["kind"] == "slider":
        labels = e(json.dumps(c["labels"]))
        return (f'<label class="dt-live-c">{label}<input type="range" data-key="{key}" data-labels="{labels}" '
                f'min="0" max="{len(c["labels"]) - 1}" step="1" value="{c["index"]}">'
                f'<output>{e(c["labels"][c["index"]])}</output></label>')
    return (f'<label class="dt-live-c">{label}<input type="range" data-key="{key}" min="{c["min"]}" max="{c["max"]}" '
            f'step="{c["step"]}" value="{c["value"]}"><output>{c["value"]}</output></label>')


def panel(sp: dict, labels) -> str:
    """The live widget's HTML: its controls (working form elements), a status line, the drawing's place."""
    data = html.escape(json.dumps({"name": sp["name"], "fixed": sp["fixed"]}))
    texts = html.escape(json.dumps(dict(labels.live_texts), ensure_ascii=False))
    cs = "".join(_control_html(c) for c in sp["controls"])
    return (f'<div class="dt-live" data-live="{data}" data-texts="{texts}" data-state="idle">'
            f'<div class="dt-live-controls">{cs}</div>'
            f'<p class="dt-live-status" aria-live="polite">{labels.live_note}</p>'
            f'<div class="dt-live-out" hidden></div></div>')


def package(out: str) -> list[str]:
    """Write ``ZIP`` under ``out``: every course module :mod:`disttutor.viz.web` may import, as committed."""
    mf = modulefinder.ModuleFinder(path=[ROOT])
    mf.run_script(web.__file__)
    files = sorted({m.__file__ for k, m in mf.modules.items() if k.split(".")[0] == "disttutor" and m.__file__}
                   | {web.__file__})
    dest = os.path.join(out, ZIP)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as z:
        for f in files:
            rel = os.path.relpath(f, ROOT)
            z.write(f, rel.replace(os.sep, "/"))
    return [os.path.relpath(f, ROOT) for f in files]
