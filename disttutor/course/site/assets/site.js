// Search over the course, in the browser: window.DT_SEARCH (assets/search-index.js) holds every
// section's text; each query word must occur (case-insensitive); titles weigh more than text.
// Both editions are in the index (d.l, the page's language): a page searches its own edition,
// and the other one only when its own has nothing (the code cells are the same in both).
(function () {
  "use strict";
  var root = document.body.getAttribute("data-root") || "";
  var lang = document.documentElement.lang || "en";
  var input = document.getElementById("dt-q");
  var box = document.getElementById("dt-results");
  var all = (window.DT_SEARCH || []).map(function (d) {
    return { t: d.t, u: d.u, x: d.x, l: d.l || "en", lt: d.t.toLowerCase(), lx: d.x.toLowerCase() };
  });
  var own = all.filter(function (d) { return d.l === lang; });
  if (!input || !box) return;

  function snippet(d, w) {
    var i = d.lx.indexOf(w);
    if (i < 0) return d.x.slice(0, 140);
    var s = Math.max(0, i - 60);
    return (s ? "…" : "") + d.x.slice(s, i + 100) + "…";
  }

  function search(q) {
    var found = find(q, own);
    return found.length ? found : find(q, all);
  }

  function find(q, docs) {
    var words = q.toLowerCase().split(/\s+/).filter(Boolean);
    if (!words.length) return [];
    var hits = [];
    docs.forEach(function (d) {
      var score = 0;
      for (var k = 0; k < words.length; k++) {
        var w = words[k], inT = d.lt.indexOf(w) >= 0, inX = d.lx.indexOf(w) >= 0;
        if (!inT && !inX) return;
        score += (inT ? 10 : 0) + (inX ? 1 : 0);
      }
      hits.push({ d: d, s: score });
    });
    hits.sort(function (a, b) { return b.s - a.s; });
    return hits.slice(0, 20).map(function (h) { return h.d; });
  }

  function show() {
    var q = input.value.trim();
    box.textContent = "";
    if (!q) { box.hidden = true; return; }
    var found = search(q);
    if (!found.length) {
      var none = document.createElement("div");
      none.className = "dt-none";
      none.textContent = (input.getAttribute("data-none") || "nothing found for ") + "“" + q + "”";
      box.appendChild(none);
    }
    var first = q.toLowerCase().split(/\s+/)[0];
    found.forEach(function (d) {
      var a = document.createElement("a"), b = document.createElement("b"), s = document.createElement("small");
      a.href = root + d.u;
      b.textContent = d.t;
      s.textContent = snippet(d, first);
      a.appendChild(b);
      a.appendChild(s);
      box.appendChild(a);
    });
    box.hidden = false;
  }

  input.addEventListener("input", show);
  input.addEventListener("keydown", function (e) {
    if (e.key === "Escape") { input.value = ""; show(); }
    if (e.key === "Enter") { var a = box.querySelector("a"); if (a) window.location.href = a.href; }
  });
  document.addEventListener("click", function (e) {
    if (!box.contains(e.target) && e.target !== input) box.hidden = true;
  });
})();
