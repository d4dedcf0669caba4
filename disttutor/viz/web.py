"""The web edition's live widgets: each widget that needs no ranks, as data its page draws.

Introduced for the web edition (``python3 course.py site``, chapters 1, 2, 7 and 13). A chapter page
runs this module, and the course's modules it imports, unchanged in the reader's browser (Pyodide,
which has no numpy and no matplotlib): moving a control calls :func:`run`, which calls the same
functions the notebook's widget calls and returns what to draw -- numbers, labels, colours, the
printed table -- as JSON; the page draws it as SVG. Nothing is computed here: the numbers come from
:mod:`disttutor.viz.memory`, :mod:`disttutor.viz.alphabeta`, :mod:`disttutor.viz.pipeline` and
:mod:`disttutor.viz.scale` (and the formulas behind them); this module only lays their results out.

:data:`LIVE` lists the live widgets: the call in a notebook cell that shows one, and its controls
by the label each shows (the widget modules' ``CONTROLS``; a notebook's saved widget state names
its controls by these labels). Chapter 2's cost model is here; its measuring widget is not: it runs ranks.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Callable

from disttutor.launcher.results import format_table
from disttutor.scale import hardware, planner, shapes
from disttutor.sharding import memory as mem
from disttutor.viz import alphabeta as vab
from disttutor.viz import memory as vmem
from disttutor.viz import pipeline as vpipe
from disttutor.viz import scale as vscale


def _memory(preset: str, batch: int, seq: int, precision: str, optimizer: str, n: int) -> dict:
    cfg = vmem.setup(preset, batch, seq, precision, optimizer)
    rows = vmem.breakdown_rows(cfg, n)
    return {"kind": "stacked", "title": vmem.title(cfg, n), "ylabel": vmem.YLABEL,
            "names": [r["strategy"] for r in rows],
            "parts": [[p, vmem.COLORS[p], [r[p] for r in rows]] for p in mem.PARTS],
            "labels": vmem.total_labels(rows), "line": [vmem.DEVICE_GIB, f"{vmem.DEVICE_GIB:g} GiB device"],
            "rows": rows, "table": format_table(rows)}


def _pipeline(schedule: str, p: int, m: int, v: int) -> dict:
    try:
        spec = vpipe.widget_spec(schedule, p, m, v)
    except ValueError as e:  # the widget prints the same line and draws nothing
        return {"error": f"not drawable: {e}"}
    info = vpipe.describe(spec)
    slots = info["drawn"].slots
    t0 = min(s.start for s in slots)
    return {"kind": "gantt", "title": vpipe.title(spec, info), "xlabel": vpipe.GANTT_UNIT, "p": spec.p,
            "m": spec.m, "makespan": info["makespan"], "idle": vpipe.IDLE,
            "slots": [[s.rank, s.start - t0, s.end - s.start, vpipe.slot_color(s, spec.p), str(s.mb),
                       s.kind in ("B", "I")] for s in slots],
            "legend": vpipe.legend_entries(spec.v, split=spec.schedule in vpipe.ZB_SCHEDULES),
            "bubble_drawn": info["bubble_drawn"], "bubble_formula": info["bubble_formula"],
            "formula": info["formula"], "peak_in_flight": [float(x) for x in info["peak_in_flight"]],
            "peak_labels": [vpipe.PEAK_FMT % x for x in info["peak_in_flight"]]}


def _costmodel(n: int, alpha_us, gb_s) -> dict:
    return {"kind": "loglog", "title": vab.title(n, alpha_us, gb_s), "xlabel": vab.XLABEL, "ylabel": vab.YLABEL,
            "x": list(vab.SIZES), "series": [list(c) for c in vab.curves(n, alpha_us, gb_s)],
            "labels": vab.end_labels(n, alpha_us, gb_s), "xticks": [[1 << k, f"1 {u}"] for k, u in
                                                                   ((10, "KiB"), (20, "MiB"), (30, "GiB"))],
            "yticks": [[10.0 ** k, vab.human_time(10.0 ** k)] for k in range(-6, 6)],
            "table": format_table(vab.model_rows(n, alpha_us, gb_s))}


def _planner(model: str, n_gpus: int, hw: str, seq: int, global_batch: int, efficiency: float) -> dict:
    ranked, rows, title = vscale.planner_rows(model, n_gpus, hw, seq, global_batch, efficiency)
    if not ranked:
        return {"kind": "hbars", "title": title, "error": vscale.NO_FIT, "rows": []}
    return {"kind": "hbars", "title": title, "xlabel": vscale.STEP_XLABEL,
            "names": [p.layout.name() for p in ranked], "parts": [list(s) for s in vscale.step_split(ranked)],
            "labels": [vscale.bar_note(p).strip() for p in ranked], "rows": rows, "table": format_table(rows)}


def _table(saved: str) -> list[dict]:
    """A printed :func:`format_table` read back: one dict of strings per row (columns split at 2+ spaces)."""
    lines = [ln for ln in saved.strip("\n").splitlines() if ln.strip()]
    if len(lines) < 3:
        return []
    head = lines[0].split()
    return [dict(zip(head, re.split(r"\s{2,}", ln.strip()))) for ln in lines[2:]]


def _planner_efficiency(saved: str, values: dict) -> dict | None:
    """``planner_widget(efficiency=CAL)``: the chapter's calibration, which no control shows, read back
    from the saved table. The first row's tokens/s/GPU grows with the efficiency: bisection finds the
    efficiency that gives the printed value; it is kept only if it prints the whole saved table."""
    rows = _table(saved)
    if not rows or "tok/s/GPU" not in rows[0]:
        return None
    first, target = rows[0], float(rows[0]["tok/s/GPU"])
    lay = next((p.layout for p in vscale.planner_rows(**values, efficiency=1.0, top=10**6)[0]
                if p.layout.name() == first["layout"]), None)
    if lay is None:
        return None
    args = (shapes.SHAPES[values["model"]], lay, hardware.PRESETS[values["hw"]], values["seq"], values["global_batch"])
    lo, hi = 1e-3, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if planner.predict(*args, efficiency=mid).tokens_per_s_per_gpu < target else (lo, mid)
    eff = (lo + hi) / 2
    # A printed value can sit on a rounding edge: try the bisected efficiency, its roundings, and the preset's
    # calibrated one (what the chapter passes), and keep the first that reprints the whole saved table.
    preset = hardware.PRESETS[values["hw"]].efficiency
    for cand in [eff] + [round(eff, d) for d in (3, 4, 5, 6)] + ([preset.value] if preset else []):
        if _planner(**values, efficiency=cand).get("table") == saved.strip("\n"):
            return {"efficiency": cand}
    return None


@dataclass(frozen=True)
class Live:
    name: str
    call: str                # a regular expression: the cell's call that shows the widget
    controls: dict           # keyword -> the control's label
    draw: Callable[..., dict]
    # Keyword arguments the cell gave that no control shows, read back from the widget's saved
    # printed output (None: they cannot be, and the widget stays as the notebook saved it).
    fixed: Callable[[str, dict], dict | None] = field(default=lambda saved, values: {})


LIVE = (
    Live("memory", r"(?<![\w.])calculator\(\s*\)", vmem.CONTROLS, _memory),
    Live("costmodel", r"(?<![\w.])cost_widget\(", vab.CONTROLS, _costmodel),
    Live("pipeline", r"(?<![\w.])bubble_widget\(", vpipe.CONTROLS, _pipeline),
    Live("planner", r"(?<![\w])planner_widget\(", vscale.CONTROLS, _planner, _planner_efficiency),
)
BY_NAME = {w.name: w for w in LIVE}


def find(source: str) -> Live | None:
    """The live widget a notebook cell's source shows, if any."""
    return next((w for w in LIVE if re.search(w.call, source)), None)


def value(label: str):
    """A control's option label as the widget's value (the saved state keeps labels: "8" for 8)."""
    return int(label) if re.fullmatch(r"-?\d+", label) else label


def compute(name: str, labels: dict, fixed: dict | None = None) -> dict:
    """What widget ``name`` shows for controls set to ``labels`` (keyword -> option label)."""
    w = BY_NAME[name]
    kw = {k: value(str(labels[k])) for k in w.controls}
    try:
        return w.draw(**kw, **(fixed or {}))
    except ValueError as e:  # a choice the course rejects: its message, as the notebook would print it
        return {"error": str(e)}


def run(name: str, args: str) -> str:
    """The page's entry point: JSON ``{"labels": {...}, "fixed": {...}}`` in, JSON of :func:`compute` out."""
    a = json.loads(args)
    return json.dumps(compute(name, a["labels"], a.get("fixed")))
