// Live widgets (site/live.py): the page's own controls run the course's Python in the browser.
// Nothing loads until a reader touches a control: then Pyodide (assets/vendor/pyodide/, from npm)
// starts once for the page, the course's modules (assets/live/disttutor.zip, as committed) are
// unpacked, and every move calls disttutor.viz.web.run(name, JSON) -- the functions the notebook's
// widget calls -- and draws what it returns as SVG. No number is computed here: this file only draws.
// For tests and readers alike, a panel's data-state says where it is (idle, loading, ready, error),
// data-ms how long its last answer took (the first one includes starting Python), data-runs how
// many answers it has drawn.
(function () {
  "use strict";
  var root = document.body.getAttribute("data-root") || "";
  var SVG = "http://www.w3.org/2000/svg";
  var runtime = null;  // a promise of disttutor.viz.web in the page's Pyodide, shared by its panels

  function start() {
    if (runtime) return runtime;
    runtime = new Promise(function (resolve, reject) {
      var s = document.createElement("script");
      s.src = root + "assets/vendor/pyodide/pyodide.js";
      s.onload = resolve;
      s.onerror = function () { reject(new Error("could not load " + s.src)); };
      document.head.appendChild(s);
    }).then(function () {
      return Promise.all([window.loadPyodide({ indexURL: root + "assets/vendor/pyodide/" }),
                          fetch(root + "assets/live/disttutor.zip").then(function (r) {
                            if (!r.ok) throw new Error("assets/live/disttutor.zip: HTTP " + r.status);
                            return r.arrayBuffer();
                          })]);
    }).then(function (both) {
      var py = both[0];
      py.unpackArchive(both[1], "zip", { extractDir: "/home/pyodide/course" });
      py.runPython("import sys\nsys.path.insert(0, '/home/pyodide/course')\nfrom disttutor.viz import web");
      return py.globals.get("web");  // the module, kept for the page's life
    });
    return runtime;
  }

  function el(tag, attrs, text) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function ticks(max, n) {  // round steps (1, 2, 5 x 10^k) from 0 to at least max
    var raw = max / n, mag = Math.pow(10, Math.floor(Math.log10(raw))), step = mag;
    [1, 2, 5, 10].forEach(function (f) { if (f * mag <= raw * 1.0001) step = f * mag; });
    if (step < raw) step = step * 2 > raw ? step * 2 : step * 5;
    var out = [];
    for (var v = 0; v <= max * 1.0001; v += step) out.push(Math.round(v * 1e6) / 1e6);
    while (out[out.length - 1] < max) out.push(Math.round((out[out.length - 1] + step) * 1e6) / 1e6);
    return out;
  }

  function legend(svg, x, y, items) {  // items: [label, colour]; one row each
    items.forEach(function (it, i) {
      svg.appendChild(el("rect", { x: x, y: y + i * 15, width: 11, height: 11, fill: it[1], stroke: "#bbb" }));
      svg.appendChild(el("text", { x: x + 15, y: y + i * 15 + 9.5, "class": "dt-live-small" }, it[0]));
    });
  }

  function hlegend(svg, x, y, items) {  // one row: [label, colour] after each other
    items.forEach(function (it) {
      svg.appendChild(el("rect", { x: x, y: y, width: 11, height: 11, fill: it[1], stroke: "#bbb" }));
      svg.appendChild(el("text", { x: x + 15, y: y + 9.5, "class": "dt-live-small" }, it[0]));
      x += 30 + 6 * it[0].length;
    });
  }

  function title(svg, w, text) {
    text.split("\n").forEach(function (line, i) {
      svg.appendChild(el("text", { x: w / 2, y: 16 + i * 15, "text-anchor": "middle", "class": "dt-live-title" }, line));
    });
  }

  // Chapter 1: GiB per device, one stacked bar per strategy, the device's memory as a dashed line.
  function stacked(d) {
    var W = 780, H = 360, L = 60, R = 130, T = 34, B = 70, w = W - L - R, h = H - T - B;
    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, width: W, role: "img" });
    var tot = d.names.map(function (_, i) { return d.parts.reduce(function (s, p) { return s + p[2][i]; }, 0); });
    var ts = ticks(Math.max(d.line[0], Math.max.apply(null, tot)) * 1.05, 6), top = ts[ts.length - 1];
    var y = function (v) { return T + h - h * v / top; }, bw = w / d.names.length;
    title(svg, W, d.title);
    ts.forEach(function (t) {
      svg.appendChild(el("line", { x1: L, x2: L + w, y1: y(t), y2: y(t), stroke: "#eee" }));
      svg.appendChild(el("text", { x: L - 5, y: y(t) + 4, "text-anchor": "end", "class": "dt-live-small" }, String(t)));
    });
    d.names.forEach(function (name, i) {
      var base = 0, x = L + i * bw + bw * 0.15;
      d.parts.forEach(function (p) {
        var v = p[2][i];
        svg.appendChild(el("rect", { x: x, y: y(base + v), width: bw * 0.7, height: Math.max(0, y(base) - y(base + v)),
                                     fill: p[1] }));
        base += v;
      });
      svg.appendChild(el("text", { x: x + bw * 0.35, y: y(base) - 4, "text-anchor": "middle", "class": "dt-live-value" },
                         d.labels[i]));
      svg.appendChild(el("text", { x: x + bw * 0.35, y: T + h + 14, "text-anchor": "end", "class": "dt-live-small",
                                   transform: "rotate(-20 " + (x + bw * 0.35) + " " + (T + h + 14) + ")" }, name));
    });
    svg.appendChild(el("line", { x1: L, x2: L + w, y1: y(d.line[0]), y2: y(d.line[0]), stroke: "#000",
                                 "stroke-dasharray": "5 3" }));
    svg.appendChild(el("text", { x: L + w, y: y(d.line[0]) - 4, "text-anchor": "end", "class": "dt-live-small" }, d.line[1]));
    svg.appendChild(el("text", { x: 14, y: T + h / 2, "text-anchor": "middle", "class": "dt-live-small",
                                 transform: "rotate(-90 14 " + (T + h / 2) + ")" }, d.ylabel));
    legend(svg, L + w + 12, T + 4, d.parts.map(function (p) { return [p[0], p[1]]; }));
    return svg;
  }

  // Chapter 13: seconds per step, one horizontal bar per layout, split into compute, bubble, exposed comm.
  function hbars(d) {
    var rowH = 26, W = 860, L = 190, R = 200, T = 34, h = rowH * d.names.length, H = T + h + 62, w = W - L - R;
    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, width: W, role: "img" });
    var tot = d.names.map(function (_, i) { return d.parts.reduce(function (s, p) { return s + p[2][i]; }, 0); });
    var ts = ticks(Math.max.apply(null, tot) * 1.02, 6), top = ts[ts.length - 1];
    var x = function (v) { return L + w * v / top; };
    title(svg, W, d.title);
    ts.forEach(function (t) {
      svg.appendChild(el("line", { x1: x(t), x2: x(t), y1: T, y2: T + h, stroke: "#eee" }));
      svg.appendChild(el("text", { x: x(t), y: T + h + 14, "text-anchor": "middle", "class": "dt-live-small" }, String(t)));
    });
    d.names.forEach(function (name, i) {
      var left = 0, yy = T + i * rowH + 3;
      svg.appendChild(el("text", { x: L - 6, y: yy + 14, "text-anchor": "end", "class": "dt-live-small" }, name));
      d.parts.forEach(function (p) {
        var v = p[2][i];
        svg.appendChild(el("rect", { x: x(left), y: yy, width: Math.max(0, x(left + v) - x(left)), height: rowH - 6,
                                     fill: p[1] }));
        left += v;
      });
      svg.appendChild(el("text", { x: x(left) + 5, y: yy + 14, "class": "dt-live-value" }, d.labels[i]));
    });
    svg.appendChild(el("text", { x: L + w / 2, y: T + h + 32, "text-anchor": "middle", "class": "dt-live-small" }, d.xlabel));
    hlegend(svg, L, T + h + 44, d.parts.map(function (p) { return [p[0], p[1]]; }));
    return svg;
  }

  // Chapter 7: the simulated schedule, one row per rank (idle time hatched grey), and the peak
  // activations each rank holds.
  function gantt(d) {
    var rowH = 26, W = 900, L = 60, R = 330, T = 44, h = rowH * d.p, H = T + h + 44, w = W - L - R;
    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, width: W, role: "img" });
    var x = function (v) { return L + w * v / d.makespan; };
    title(svg, W - R + 40, d.title);
    for (var r = 0; r < d.p; r++) {
      svg.appendChild(el("rect", { x: L, y: T + r * rowH + 2, width: w, height: rowH - 4, fill: d.idle }));
      svg.appendChild(el("text", { x: L - 5, y: T + r * rowH + 17, "text-anchor": "end", "class": "dt-live-small" }, "rank " + r));
    }
    d.slots.forEach(function (s) {  // [rank, start, length, colour, micro-batch, dark]
      var x0 = x(s[1]), ww = x(s[1] + s[2]) - x0, yy = T + s[0] * rowH + 2;
      svg.appendChild(el("rect", { x: x0, y: yy, width: ww, height: rowH - 4, fill: s[3], stroke: "#fff", "stroke-width": 0.6 }));
      if (ww > 9) svg.appendChild(el("text", { x: x0 + ww / 2, y: yy + 15, "text-anchor": "middle", "class": "dt-live-small",
                                               fill: s[5] ? "#fff" : "#000" }, s[4]));
    });
    ticks(d.makespan, 8).forEach(function (t) {
      svg.appendChild(el("text", { x: x(t), y: T + h + 14, "text-anchor": "middle", "class": "dt-live-small" }, String(t)));
    });
    svg.appendChild(el("text", { x: L + w / 2, y: T + h + 32, "text-anchor": "middle", "class": "dt-live-small" }, d.xlabel));
    var px = L + w + 20, pw = 110, peak = Math.max(d.m, Math.max.apply(null, d.peak_in_flight)) * 1.25;
    svg.appendChild(el("text", { x: px + pw / 2, y: T - 8, "text-anchor": "middle", "class": "dt-live-small" }, "peak activations held"));
    d.peak_in_flight.forEach(function (v, r) {
      svg.appendChild(el("rect", { x: px, y: T + r * rowH + 4, width: pw * v / peak, height: rowH - 8, fill: "#636363" }));
      svg.appendChild(el("text", { x: px + pw * v / peak + 3, y: T + r * rowH + 17, "class": "dt-live-value" },
                         d.peak_labels[r]));
    });
    legend(svg, px + pw + 40, T, d.legend);
    return svg;
  }

  // Chapter 2: the alpha-beta model's predicted time against message size, log-log, one line per
  // all-reduce, its time for the largest message at the line's end (ticks placed and named by Python).
  function loglog(d) {
    var W = 820, H = 380, L = 70, R = 150, T = 34, B = 50, w = W - L - R, h = H - T - B;
    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, width: W, role: "img" });
    var lg = function (v) { return Math.log(v) / Math.LN10; };
    var all = [].concat.apply([], d.series.map(function (s) { return s[2]; }));
    var x0 = lg(d.x[0]), x1 = lg(d.x[d.x.length - 1]);
    var y0 = Math.floor(lg(Math.min.apply(null, all))), y1 = Math.ceil(lg(Math.max.apply(null, all)));
    if (y1 <= y0) y1 = y0 + 1;
    var x = function (v) { return L + w * (lg(v) - x0) / (x1 - x0); };
    var y = function (v) { return T + h - h * (lg(v) - y0) / (y1 - y0); };
    title(svg, W, d.title);
    d.yticks.forEach(function (t) {
      if (lg(t[0]) < y0 - 1e-9 || lg(t[0]) > y1 + 1e-9) return;
      svg.appendChild(el("line", { x1: L, x2: L + w, y1: y(t[0]), y2: y(t[0]), stroke: "#eee" }));
      svg.appendChild(el("text", { x: L - 5, y: y(t[0]) + 4, "text-anchor": "end", "class": "dt-live-small" }, t[1]));
    });
    d.xticks.forEach(function (t) {
      svg.appendChild(el("line", { x1: x(t[0]), x2: x(t[0]), y1: T, y2: T + h, stroke: "#eee" }));
      svg.appendChild(el("text", { x: x(t[0]), y: T + h + 14, "text-anchor": "middle", "class": "dt-live-small" }, t[1]));
    });
    svg.appendChild(el("rect", { x: L, y: T, width: w, height: h, fill: "none", stroke: "#888" }));
    d.series.forEach(function (s, i) {  // [name, colour, seconds at each x]
      var pts = d.x.map(function (v, j) { return x(v).toFixed(1) + "," + y(s[2][j]).toFixed(1); }).join(" ");
      svg.appendChild(el("polyline", { points: pts, fill: "none", stroke: s[1], "stroke-width": 2 }));
      svg.appendChild(el("text", { x: L + w + 6, y: y(s[2][s[2].length - 1]) + 4, fill: s[1], "class": "dt-live-value" },
                         d.labels[i]));
    });
    svg.appendChild(el("text", { x: L + w / 2, y: T + h + 32, "text-anchor": "middle", "class": "dt-live-small" }, d.xlabel));
    svg.appendChild(el("text", { x: 14, y: T + h / 2, "text-anchor": "middle", "class": "dt-live-small",
                                 transform: "rotate(-90 14 " + (T + h / 2) + ")" }, d.ylabel));
    return svg;
  }

  var DRAW = { stacked: stacked, hbars: hbars, gantt: gantt, loglog: loglog };

  function setup(panel) {
    var spec = JSON.parse(panel.getAttribute("data-live"));
    var texts = JSON.parse(panel.getAttribute("data-texts"));
    var status = panel.querySelector(".dt-live-status"), out = panel.querySelector(".dt-live-out");
    var busy = false, again = false;

    function labels() {  // keyword -> the chosen option's label (as the saved widget state writes it)
      var v = {};
      panel.querySelectorAll("[data-key]").forEach(function (c) {
        var k = c.getAttribute("data-key");
        if (c.tagName === "SELECT") v[k] = c.value;
        else if (c.tagName === "INPUT") {
          var ls = c.getAttribute("data-labels");
          v[k] = ls ? JSON.parse(ls)[+c.value] : c.value;
          c.parentNode.querySelector("output").textContent = v[k];
        } else v[k] = c.querySelector('[aria-pressed="true"]').value;
      });
      return v;
    }

    function show(d, ms) {
      out.textContent = "";
      if (d.error) {
        var p = document.createElement("p");
        p.className = "dt-live-error";
        p.textContent = d.error;
        out.appendChild(p);
      }
      if (d.kind && !(d.error && !d.names)) out.appendChild(DRAW[d.kind](d));
      if (d.table) {
        var pre = document.createElement("pre");
        pre.className = "dt-live-table";
        pre.textContent = d.table;
        out.appendChild(pre);
      }
      out.hidden = false;
      // The saved output (the build's figure) gives way to the drawing, in this cell only.
      var cell = panel.closest(".jp-Cell") || panel.parentNode;
      cell.querySelectorAll(".jp-OutputArea-output").forEach(function (o) {
        if (o.querySelector(".jupyter-widgets") || o.classList.contains("jupyter-widgets")) o.hidden = true;
      });
      status.textContent = texts.ready.replace("{ms}", String(Math.round(ms)));
      panel.setAttribute("data-ms", String(Math.round(ms)));
      panel.setAttribute("data-runs", String(+(panel.getAttribute("data-runs") || 0) + 1));
      panel.setAttribute("data-state", "ready");
    }

    function fail(e) {
      status.textContent = texts.error.replace("{e}", String(e && e.message || e).split("\n").slice(-2).join(" "));
      panel.setAttribute("data-state", "error");
    }

    function redraw() {
      if (location.protocol === "file:") { status.textContent = texts.file; return; }
      if (busy) { again = true; return; }  // the last move wins: one more run when this one ends
      busy = true;
      var t0 = performance.now();
      if (panel.getAttribute("data-state") === "idle") {
        panel.setAttribute("data-state", "loading");
        status.textContent = texts.loading;
      }
      start().then(function (web) {
        show(JSON.parse(web.run(spec.name, JSON.stringify({ labels: labels(), fixed: spec.fixed }))),
             performance.now() - t0);
      }).catch(fail).then(function () {
        busy = false;
        if (again) { again = false; redraw(); }
      });
    }

    panel.querySelectorAll("[data-key]").forEach(function (c) {
      if (c.tagName === "SELECT") c.addEventListener("change", redraw);
      else if (c.tagName === "INPUT") c.addEventListener("input", function () { labels(); redraw(); });
      else c.querySelectorAll("button").forEach(function (b) {
        b.addEventListener("click", function () {
          c.querySelectorAll("button").forEach(function (o) { o.setAttribute("aria-pressed", String(o === b)); });
          redraw();
        });
      });
    });
  }

  document.querySelectorAll(".dt-live").forEach(setup);
})();
