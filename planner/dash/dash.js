/* gckpt dashboard: reads the JSON block #gckpt-data, draws the sweep, the selected entry and
 * the predicted-vs-measured tables. Every string from the data goes into the page through
 * textContent or an attribute set with setAttribute (never as markup). Errors and
 * Content-Security-Policy violations are written into #diagnostics and data-* attributes of
 * <body>, so a headless browser's dumped DOM shows them (tests/dash). */
(function () {
  "use strict";
  var t0 = performance.now();
  var body = document.body;
  var diag = document.getElementById("diagnostics");
  var nErrors = 0, nViolations = 0;
  function note(kind, text) {
    if (kind === "error") body.setAttribute("data-errors", String(++nErrors));
    else body.setAttribute("data-csp-violations", String(++nViolations));
    diag.hidden = false;
    diag.appendChild(document.createTextNode(kind + ": " + text + "\n"));
  }
  window.addEventListener("error", function (ev) {
    note("error", String(ev.message || ev.type) + (ev.filename ? " (" + ev.filename + ":" + ev.lineno + ")" : ""));
  }, true);
  window.addEventListener("unhandledrejection", function (ev) { note("error", "unhandled rejection: " + String(ev.reason)); });
  document.addEventListener("securitypolicyviolation", function (ev) {
    note("csp", ev.violatedDirective + " blocked " + (ev.blockedURI || "inline"));
  });
  var origError = console.error;
  console.error = function () {
    note("error", Array.prototype.map.call(arguments, String).join(" "));
    return origError.apply(console, arguments);
  };

  var SVGNS = "http://www.w3.org/2000/svg";
  var GiB = 1073741824;

  /* ---- small helpers -------------------------------------------------------------------- */
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) if (Object.prototype.hasOwnProperty.call(attrs, k)) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function sv(tag, attrs, text) {
    var e = document.createElementNS(SVGNS, tag);
    if (attrs) for (var k in attrs) if (Object.prototype.hasOwnProperty.call(attrs, k)) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); }
  function isNum(v) { return typeof v === "number" && isFinite(v); }
  function obj(v) { return v && typeof v === "object" && !Array.isArray(v) ? v : {}; }
  function arr(v) { return Array.isArray(v) ? v : []; }
  function str(v, dflt) { return typeof v === "string" ? v : (dflt === undefined ? "" : dflt); }
  /* bytes in the largest binary unit that keeps them at or above 1 */
  function unitFor(b) {
    b = Math.abs(b);
    return b >= GiB ? { div: GiB, name: "GiB" } : b >= 1048576 ? { div: 1048576, name: "MiB" } : b >= 1024 ? { div: 1024, name: "KiB" } : { div: 1, name: "bytes" };
  }
  function gib(b) { if (!isNum(b)) return "n/a"; var u = unitFor(b); return (b / u.div).toFixed(u.div > 1 ? 2 : 0) + " " + u.name; }
  function bytes(b) { return isNum(b) ? Math.round(b).toString() + " bytes" : "n/a"; }
  function bytesGib(b) { return !isNum(b) ? "n/a" : unitFor(b).div === 1 ? bytes(b) : gib(b) + " (" + bytes(b) + ")"; }
  function secs(s) {
    if (!isNum(s)) return "n/a";
    /* below a microsecond toPrecision would write an exponent ("6.222e-7 ms") */
    if (s !== 0 && Math.abs(s) < 1e-6) return (s * 1e6).toPrecision(4) + " \u00b5s";
    if (Math.abs(s) < 1) return (s * 1000).toPrecision(4) + " ms";
    return s.toPrecision(4) + " s";
  }
  function tps(v) { return isNum(v) ? v.toFixed(1) + " tokens/s" : "n/a"; }
  function pct(v) { return isNum(v) ? (v >= 0 ? "+" : "") + (100 * v).toFixed(2) + " %" : "n/a"; }
  function everyN(e) { return isNum(e.every_n_layers) && e.every_n_layers > 0 ? String(e.every_n_layers) : "off"; }
  function offl(e) { return isNum(e.every_n_layers) && e.every_n_layers > 0 ? (e.offload === true ? "on" : "off") : "-"; }
  function setting(e) {
    return "every_n_layers " + everyN(e) + ", offload " + offl(e) + ", micro-batch " + String(e.micro_batch) +
      " x grad-accum " + String(e.grad_accum);
  }

  /* ---- the data ------------------------------------------------------------------------- */
  var data;
  try {
    data = JSON.parse(document.getElementById("gckpt-data").textContent);
  } catch (err) {
    note("error", "the embedded data is not JSON: " + err.message);
    return;
  }
  var plan = obj(data.plan), inputs = obj(plan.inputs), model = obj(inputs.model), device = obj(inputs.device);
  var layout = plan.inputs && inputs.layout ? obj(inputs.layout) : null;
  var entries = arr(plan.entries).filter(function (e) { return e && typeof e === "object"; });
  var reports = arr(data.reports).filter(function (r) { return r && typeof r === "object"; });
  var rec = isNum(plan.recommended) ? plan.recommended : -1;
  var smallest = isNum(plan.smallest) ? plan.smallest : -1;
  var budget = inputs.budget_bytes, usable = inputs.usable_bytes;
  var byIndex = {};
  entries.forEach(function (e) { if (isNum(e.index)) byIndex[e.index] = e; });
  function mem(e) { return obj(e.memory); }
  function tim(e) { return obj(e.time); }
  function devPeak(e) { return mem(e).device_peak_bytes; }
  function tokps(e) { return tim(e).tokens_per_s; }

  /* ---- header --------------------------------------------------------------------------- */
  var title = str(model.name, "model") + " on " + str(device.name, "device");
  document.title = "gckpt: " + title;
  document.getElementById("title").textContent = title;
  var sub = [
    "seq " + String(inputs.seq) + " tokens", str(inputs.precision), str(inputs.optimizer), str(inputs.attention) + " attention",
    "budget " + gib(budget) + ", usable " + gib(usable) + " (margin " + (isNum(inputs.margin) ? (100 * inputs.margin).toFixed(1) + " %" : "n/a") + ")",
    String(entries.length) + " entries"
  ];
  if (typeof inputs.method === "string") sub.splice(4, 0, str(inputs.method));
  if (layout) sub.push(String(layout.world_size) + " GPUs, " + str(layout.parallel));
  /* the kinds gckpt-run does not execute (planned only): TP with FSDP or replicas, CP, a VLM */
  var tpi = inputs.tensor_parallel ? obj(inputs.tensor_parallel) : null;
  var cpi = inputs.context_parallel ? obj(inputs.context_parallel) : null;
  var vis = inputs.vision ? obj(inputs.vision) : null;
  function count(v) { return isNum(v) ? String(v) : "?"; }
  if (tpi) sub.push("TP " + count(tpi.tp_size) + (isNum(tpi.fsdp_size) ? " x FSDP " + tpi.fsdp_size : "") +
    (isNum(tpi.dp_replicate_size) ? " x " + tpi.dp_replicate_size + " replicas" : "") + " over " + count(tpi.world_size) + " GPUs");
  if (cpi) sub.push("context parallel " + count(cpi.cp_size) + " x dp_shard " + count(cpi.dp_shard_size) + ", " + count(cpi.local_seq) + " tokens per rank");
  if (vis) sub.push(str(vis.model_type, "VLM") + ": " + count(vis.images) + " image(s) of " + count(vis.tokens_per_image) +
    " tokens per sample, vision tower " + str(vis.vision_tower, "?"));
  document.getElementById("subtitle").textContent = sub.join(" \u00b7 ");
  var wl = document.getElementById("warnings");
  arr(plan.warnings).forEach(function (w) {
    w = obj(w);
    wl.appendChild(el("li", null, "warning [" + str(w.code) + "]: " + str(w.message)));
  });
  var src = "plan: " + str(data.plan_file, "(this run of gckpt-plan)");
  if (reports.length) src += " \u00b7 reports: " + reports.map(function (r) { return str(r.file); }).join(", ");
  document.getElementById("source").textContent = src + " \u00b7 written by gckpt " + str(obj(plan.generator).version);

  /* ---- tabs ----------------------------------------------------------------------------- */
  var tabs = Array.prototype.slice.call(document.querySelectorAll("nav [role=tab]"));
  function showTab(name) {
    tabs.forEach(function (t) {
      var on = t.getAttribute("data-tab") === name;
      t.setAttribute("aria-selected", on ? "true" : "false");
      t.tabIndex = on ? 0 : -1;
      document.getElementById(t.getAttribute("aria-controls")).hidden = !on;
    });
    body.setAttribute("data-tab", name);
  }
  tabs.forEach(function (t, i) {
    t.addEventListener("click", function () { if (!t.disabled) showTab(t.getAttribute("data-tab")); });
    t.addEventListener("keydown", function (ev) {
      var d = ev.key === "ArrowRight" ? 1 : ev.key === "ArrowLeft" ? -1 : 0;
      if (!d) return;
      for (var k = 1; k <= tabs.length; k++) {
        var n = tabs[(i + d * k + tabs.length * k) % tabs.length];
        if (!n.disabled) { n.focus(); showTab(n.getAttribute("data-tab")); break; }
      }
      ev.preventDefault();
    });
  });
  if (!reports.length) {
    var mt = document.getElementById("tab-measured");
    mt.disabled = true;
    mt.title = "no report given (gckpt-dash -o page.html PLAN.json REPORT.jsonl)";
  }

  /* ---- colours and shapes --------------------------------------------------------------- */
  var okabe = ["#e69f00", "#56b4e9", "#009e73", "#f0e442", "#0072b2", "#d55e00", "#cc79a7", "#7f7f7f"];
  var viridis = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  var nValues = [];
  entries.forEach(function (e) { var v = everyN(e); if (nValues.indexOf(v) < 0) nValues.push(v); });
  nValues.sort(function (a, b) { return (a === "off" ? 0 : +a) - (b === "off" ? 0 : +b); });
  function colourOf(v) {
    var i = nValues.indexOf(v);
    if (nValues.length <= okabe.length) return okabe[i];
    var t = nValues.length > 1 ? i / (nValues.length - 1) : 0, s = t * (viridis.length - 1), k = Math.min(Math.floor(s), viridis.length - 2), f = s - k;
    var c = viridis[k].map(function (x, j) { return Math.round(x + f * (viridis[k + 1][j] - x)); });
    return "rgb(" + c.join(",") + ")";
  }
  /* circle: no checkpointing, square: offload off, diamond: offload on */
  function shapePath(kind, x, y, r) {
    if (kind === "on") return "M" + x + " " + (y - r * 1.3) + "L" + (x + r * 1.3) + " " + y + "L" + x + " " + (y + r * 1.3) + "L" + (x - r * 1.3) + " " + y + "Z";
    if (kind === "off") return "M" + (x - r) + " " + (y - r) + "h" + 2 * r + "v" + 2 * r + "h" + -2 * r + "Z";
    return "M" + (x - r) + " " + y + "a" + r + " " + r + " 0 1 0 " + 2 * r + " 0a" + r + " " + r + " 0 1 0 " + -2 * r + " 0Z";
  }

  /* ---- axes ----------------------------------------------------------------------------- */
  function niceTicks(lo, hi, n) {
    var span = hi - lo;
    if (!(span > 0)) return [lo];
    var step = Math.pow(10, Math.floor(Math.log10(span / n))), err = span / n / step;
    if (err >= 7.5) step *= 10; else if (err >= 3.5) step *= 5; else if (err >= 1.5) step *= 2;
    var t = [], v = Math.ceil(lo / step) * step;
    for (; v <= hi + step * 1e-9; v += step) t.push(v);
    return t;
  }
  function fmtTick(v) {
    var a = Math.abs(v);
    if (a >= 1e9) return String(+(v / 1e9).toPrecision(4)) + "G";
    if (a >= 1e6) return String(+(v / 1e6).toPrecision(4)) + "M";
    if (a >= 1e4) return String(+(v / 1e3).toPrecision(4)) + "k";
    return String(+v.toPrecision(6));
  }
  /* xWhole: whole numbers only on x (steps) */
  function axes(g, x0, y0, w, h, xs, ys, xl, yl, xWhole) {
    var ax = sv("g", { "class": "axis" });
    niceTicks(xs.lo, xs.hi, 8).filter(function (v) { return !xWhole || Math.abs(v - Math.round(v)) < 1e-9; }).forEach(function (v) {
      var x = xs.map(v);
      ax.appendChild(sv("line", { "class": "gridline", x1: x, x2: x, y1: y0, y2: y0 + h }));
      ax.appendChild(sv("text", { x: x, y: y0 + h + 16, "text-anchor": "middle" }, fmtTick(v)));
    });
    niceTicks(ys.lo, ys.hi, 6).forEach(function (v) {
      var y = ys.map(v);
      ax.appendChild(sv("line", { "class": "gridline", x1: x0, x2: x0 + w, y1: y, y2: y }));
      ax.appendChild(sv("text", { x: x0 - 6, y: y + 4, "text-anchor": "end" }, fmtTick(v)));
    });
    ax.appendChild(sv("path", { d: "M" + x0 + " " + y0 + "V" + (y0 + h) + "H" + (x0 + w), fill: "none" }));
    ax.appendChild(sv("text", { x: x0 + w / 2, y: y0 + h + 36, "text-anchor": "middle" }, xl));
    ax.appendChild(sv("text", { x: 14, y: y0 + h / 2, "text-anchor": "middle", transform: "rotate(-90 14 " + (y0 + h / 2) + ")" }, yl));
    g.appendChild(ax);
  }
  function scale(lo, hi, a, b) {
    if (!(hi > lo)) hi = lo + 1;
    return { lo: lo, hi: hi, map: function (v) { return a + (v - lo) / (hi - lo) * (b - a); } };
  }

  /* ---- the sweep ------------------------------------------------------------------------ */
  var svg = document.getElementById("sweep"), tip = document.getElementById("tip");
  var W = 900, H = 480, X0 = 78, Y0 = 14, PW = W - X0 - 24, PH = H - Y0 - 52;
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  svg.setAttribute("width", W);
  svg.setAttribute("height", H);
  var maxPeak = 0, maxTps = 0;
  entries.forEach(function (e) {
    if (isNum(devPeak(e))) maxPeak = Math.max(maxPeak, devPeak(e));
    if (isNum(tokps(e))) maxTps = Math.max(maxTps, tokps(e));
  });
  /* x: the entries' peaks, and the budget and usable lines when they are near */
  var minPeak = Infinity;
  entries.forEach(function (e) { if (isNum(devPeak(e))) minPeak = Math.min(minPeak, devPeak(e)); });
  if (!isFinite(minPeak)) minPeak = 0;
  var xhi = maxPeak, xlo = minPeak;
  [budget, usable].forEach(function (b) { if (isNum(b) && b < 1.5 * maxPeak) { xhi = Math.max(xhi, b); xlo = Math.min(xlo, b); } });
  var pad = Math.max((xhi - xlo) * 0.06, xhi * 0.01, 1);
  var XU = unitFor(xhi);
  var xs = scale(Math.max(0, xlo - pad) / XU.div, (xhi + pad) / XU.div, X0, X0 + PW), ys = scale(0, (maxTps || 1) * 1.08, Y0 + PH, Y0);
  /* tabindex -1 on the points' group: Chromium makes an SVG element with focus listeners a
   * tab stop of its own, an invisible one before the points */
  var gAxes = sv("g"), gLines = sv("g"), gPts = sv("g", { "class": "points", tabindex: -1 });
  svg.appendChild(gAxes);
  svg.appendChild(gLines);
  svg.appendChild(gPts);
  axes(gAxes, X0, Y0, PW, PH, xs, ys, "device peak (" + XU.name + ")", "throughput (tokens/s)");
  var offChart = [];
  function vline(bytesV, cls, label) {
    if (!isNum(bytesV)) return;
    var v = bytesV / XU.div;
    if (v > xs.hi || v < xs.lo) {
      offChart.push(label + " " + gib(bytesV) + (v > xs.hi ? " (right of the chart)" : " (left of the chart)"));
      return;
    }
    var x = xs.map(v), left = x < X0 + PW / 2;
    gLines.appendChild(sv("line", { "class": cls, x1: x, x2: x, y1: Y0, y2: Y0 + PH }));
    /* at the bottom of the plot, beside the line: points are fast, so rarely there */
    gLines.appendChild(sv("text", { x: x + (left ? 5 : -5), y: Y0 + PH - (cls === "budget" ? 22 : 8), "class": "halo", "text-anchor": left ? "start" : "end" },
      label + " " + gib(bytesV)));
  }
  vline(budget, "budget", "budget");
  vline(usable, "usable", "usable");

  function tipText(e) {
    var m = mem(e), t = tim(e);
    return "entry " + String(e.index) + ": " + setting(e) + "\n" +
      "device peak " + bytesGib(m.device_peak_bytes) + "\n" +
      "allocated peak " + bytesGib(m.peak_bytes) + "\n" +
      "throughput " + tps(t.tokens_per_s) + ", step " + secs(t.step_s) + "\n" +
      (e.fits === true ? "fits, headroom " + gib(e.headroom_bytes) : "does not fit");
  }
  function tipDetail(e) {
    var m = mem(e), bd = obj(m.breakdown), lines = [];
    lines.push("peak in " + str(m.peak_phase, "?") + (isNum(m.peak_layer) ? ", layer " + m.peak_layer : "") +
      ", micro-step " + str(m.peak_micro_step, "?") + ": " + str(m.peak_where, "?"));
    var parts = Object.keys(bd).filter(function (k) { return isNum(bd[k]) && bd[k] > 0; })
      .sort(function (a, b) { return bd[b] - bd[a]; });
    if (parts.length) lines.push("breakdown at the peak: " + parts.map(function (k) { return k + " " + gib(bd[k]); }).join(", "));
    if (isNum(m.host_pinned_bytes) && m.host_pinned_bytes > 0) lines.push("pinned host " + gib(m.host_pinned_bytes));
    var meas = measuredOf(e.index);
    if (meas) lines.push("measured (" + meas.file + "): allocated peak " + bytesGib(meas.alloc) + ", device peak " + bytesGib(meas.device) + ", step " + secs(meas.step));
    return lines.join("\n");
  }

  var points = [], pointOf = {}, selected = -1, frag = document.createDocumentFragment();
  entries.forEach(function (e) {
    var x = xs.map((devPeak(e) || 0) / XU.div), y = ys.map(tokps(e) || 0);
    var p = sv("path", {
      d: shapePath(offl(e), Math.round(x * 10) / 10, Math.round(y * 10) / 10, 5), fill: colourOf(everyN(e)),
      "class": "pt" + (e.fits === true ? "" : " nofit"), tabindex: -1, role: "button",
      "data-index": String(e.index), "data-every-n": everyN(e), "data-offload": offl(e),
      "data-micro-batch": String(e.micro_batch)
    });
    if (e.index === rec) p.setAttribute("data-recommended", "true");
    if (e.pareto === true) p.setAttribute("data-pareto", "true");
    /* no <title> per point: 10,000 of them were 40 % of a big plan's script time; the
     * tooltip (#tip) and the accessible name (aria-label) are made when a point is hovered
     * or focused (showTip) */
    p._entry = e;
    p._xy = [x, y];
    frag.appendChild(p);
    points.push(p);
    pointOf[e.index] = p;
  });
  gPts.appendChild(frag);
  svg.setAttribute("data-points", String(points.length));
  if (pointOf[rec]) {
    var rp = pointOf[rec]._xy;
    var ring = sv("circle", { "class": "rec-ring", cx: rp[0], cy: rp[1], r: 11, "data-recommended-ring": String(rec) });
    ring.appendChild(sv("title", null, "recommended: entry " + rec));
    gLines.appendChild(ring);
    gLines.appendChild(sv("text", { x: rp[0] + (rp[0] > X0 + PW * 0.7 ? -14 : 14), y: rp[1] - 12, "class": "halo", "text-anchor": rp[0] > X0 + PW * 0.7 ? "end" : "start" }, "recommended"));
  }
  var frontier = sv("path", { "class": "frontier" });
  gLines.appendChild(frontier);

  function showTip(p) {
    var e = p._entry;
    if (!p.hasAttribute("aria-label")) p.setAttribute("aria-label", tipText(e).split("\n").join("; "));
    clear(tip);
    tip.appendChild(el("strong", null, "entry " + String(e.index) + (e.index === rec ? " (recommended)" : "")));
    tip.appendChild(document.createTextNode("\n" + tipText(e).split("\n").slice(1).join("\n") + "\n" + tipDetail(e)));
    tip.setAttribute("data-index", String(e.index));
    tip.hidden = false;
    var bb = svg.getBoundingClientRect(), sx = bb.width / W;
    var left = p._xy[0] * sx + 14, top = p._xy[1] * (bb.height / H) + 8;
    if (left > bb.width * 0.6) left = Math.max(0, p._xy[0] * sx - 14 - tip.offsetWidth);
    tip.style.left = left + "px";
    tip.style.top = top + "px";
  }
  function hideTip() { tip.hidden = true; }
  function focusPoint(p) {
    points.forEach(function (q) { q.setAttribute("tabindex", "-1"); });
    p.setAttribute("tabindex", "0");
    p.focus();
  }
  function visible() { return points.filter(function (p) { return p.style.display !== "none"; }); }
  gPts.addEventListener("mouseover", function (ev) { if (ev.target._entry) showTip(ev.target); });
  gPts.addEventListener("mouseout", hideTip);
  gPts.addEventListener("focusin", function (ev) { if (ev.target._entry) showTip(ev.target); });
  gPts.addEventListener("focusout", hideTip);
  gPts.addEventListener("click", function (ev) { if (ev.target._entry) { select(ev.target._entry.index); focusPoint(ev.target); } });
  gPts.addEventListener("keydown", function (ev) {
    var p = ev.target;
    if (!p._entry) return;
    if (ev.key === "Enter" || ev.key === " ") { select(p._entry.index); ev.preventDefault(); return; }
    var d = ev.key === "ArrowRight" || ev.key === "ArrowUp" ? 1 : ev.key === "ArrowLeft" || ev.key === "ArrowDown" ? -1 : 0;
    if (!d) return;
    var v = visible().sort(function (a, b) { return a._xy[0] - b._xy[0] || b._xy[1] - a._xy[1]; });
    var k = v.indexOf(p);
    if (k >= 0 && v[k + d]) focusPoint(v[k + d]);
    ev.preventDefault();
  });

  /* legend */
  var legend = document.getElementById("legend");
  nValues.slice(0, 12).forEach(function (v) {
    var s = el("span");
    var sw = el("span", { "class": "sw" });
    sw.style.background = colourOf(v);
    s.appendChild(sw);
    s.appendChild(document.createTextNode("every_n " + v));
    legend.appendChild(s);
  });
  if (nValues.length > 12) legend.appendChild(el("span", null, "\u2026 " + nValues.length + " values (dark: off, light: the largest)"));
  ["-", "off", "on"].forEach(function (k) {
    var s = el("span"), g = sv("svg", { width: 14, height: 14, viewBox: "0 0 14 14", "aria-hidden": "true" });
    g.appendChild(sv("path", { d: shapePath(k, 7, 7, 4.5), fill: "currentColor" }));
    s.appendChild(g);
    s.appendChild(document.createTextNode(k === "-" ? " no checkpointing" : " offload " + k));
    legend.appendChild(s);
  });
  legend.appendChild(el("span", null, "faded: does not fit \u00b7 ring: recommended \u00b7 dashed: budget \u00b7 solid: usable"));
  offChart.forEach(function (t) { legend.appendChild(el("span", { "class": "offchart" }, t)); });

  /* filters */
  var filters = {};
  var fbox = document.getElementById("filters");
  function addFilter(key, label, values, valueOf) {
    var fs = el("fieldset"), lg = el("legend", null, label);
    fs.appendChild(lg);
    filters[key] = { on: {}, valueOf: valueOf };
    values.forEach(function (v) {
      var id = "f-" + key + "-" + String(v).replace(/[^A-Za-z0-9]/g, "_");
      var cb = el("input", { type: "checkbox", id: id, "data-filter": key, "data-value": String(v) });
      cb.checked = true;
      filters[key].on[String(v)] = true;
      cb.addEventListener("change", function () { filters[key].on[String(v)] = cb.checked; applyFilters(); });
      var lb = el("label", { "for": id });
      lb.appendChild(cb);
      lb.appendChild(document.createTextNode(" " + String(v)));
      fs.appendChild(lb);
    });
    fbox.appendChild(fs);
  }
  function distinct(f) {
    var out = [];
    entries.forEach(function (e) { var v = f(e); if (out.indexOf(v) < 0) out.push(v); });
    return out.sort(function (a, b) { return isNum(+a) && isNum(+b) ? +a - +b : String(a) < String(b) ? -1 : 1; });
  }
  addFilter("every_n", "every_n_layers", nValues, everyN);
  addFilter("offload", "offload", distinct(offl), offl);
  addFilter("micro_batch", "micro-batch", distinct(function (e) { return String(e.micro_batch); }), function (e) { return String(e.micro_batch); });
  if (layout) addFilter("parallel", "parallel mode", [str(layout.parallel)], function () { return str(layout.parallel); });
  function applyFilters() {
    var shown = 0;
    points.forEach(function (p) {
      var ok = true;
      for (var k in filters) if (!filters[k].on[String(filters[k].valueOf(p._entry))]) ok = false;
      p.style.display = ok ? "" : "none";
      if (ok) shown++;
    });
    svg.setAttribute("data-visible", String(shown));
    /* the frontier among the visible Pareto entries, as a step line */
    var fr = visible().filter(function (p) { return p._entry.pareto === true; }).sort(function (a, b) { return a._xy[0] - b._xy[0]; });
    var d = "";
    fr.forEach(function (p, i) {
      d += (i ? "H" + p._xy[0].toFixed(1) + "V" : "M" + p._xy[0].toFixed(1) + " ") + p._xy[1].toFixed(1);
    });
    frontier.setAttribute("d", d || "M0 0");
    if (!d) frontier.setAttribute("visibility", "hidden"); else frontier.removeAttribute("visibility");
  }
  applyFilters();
  var selLine = el("p", { id: "selected-line" });
  document.getElementById("panel-sweep").insertBefore(selLine, document.getElementById("legend"));

  /* ---- the selected entry --------------------------------------------------------------- */
  var components = ["weights", "quantized_weights", "quant_stats", "gradients", "optimizer_states", "paged_optimizer_states",
    "activations", "checkpoints", "recompute", "logits_loss", "backward", "weight_casts", "optimizer_temp", "workspace", "parallel"];
  var compColour = {};
  /* Okabe-Ito, then four of Paul Tol's muted colours (a breakdown can have 15 parts) */
  var bdPalette = okabe.concat(["#882255", "#332288", "#999933", "#44aa99"]);
  function bdParts(e) {
    var bd = obj(mem(e).breakdown), keys = components.slice();
    Object.keys(bd).forEach(function (k) { if (keys.indexOf(k) < 0) keys.push(k); });
    return keys.filter(function (k) { return isNum(bd[k]) && bd[k] > 0; }).map(function (k) { return [k, bd[k]]; });
  }
  function breakdownBars(e) {
    var box = document.getElementById("breakdown");
    clear(box);
    var rows = [[e, "entry " + e.index + " (selected)"]];
    if (rec >= 0 && rec !== e.index && byIndex[rec]) rows.push([byIndex[rec], "entry " + rec + " (recommended)"]);
    if (smallest >= 0 && smallest !== e.index && smallest !== rec && byIndex[smallest]) rows.push([byIndex[smallest], "entry " + smallest + " (smallest)"]);
    var max = 0, present = [];
    rows.forEach(function (r) { var m = mem(r[0]).peak_bytes; if (isNum(m)) max = Math.max(max, m); });
    /* the palette over the components these bars show, in the order of the list */
    rows.forEach(function (r) { bdParts(r[0]).forEach(function (pt) { if (present.indexOf(pt[0]) < 0) present.push(pt[0]); }); });
    present.sort(function (a, b) { return components.indexOf(a) - components.indexOf(b); });
    compColour = {};
    present.forEach(function (c, i) { compColour[c] = bdPalette[i % bdPalette.length]; });
    var BW = 900, LX = 190, BH = 26, g = sv("svg", { viewBox: "0 0 " + BW + " " + (rows.length * (BH + 12) + 40), width: BW, height: rows.length * (BH + 12) + 40, role: "img", "aria-label": "breakdown at the peak" });
    var BU = unitFor(max || 1), xsb = scale(0, (max || 1) * 1.02 / BU.div, LX, BW - 20);
    rows.forEach(function (r, k) {
      var y = 6 + k * (BH + 12), x = LX;
      g.appendChild(sv("text", { x: LX - 8, y: y + BH / 2 + 4, "text-anchor": "end" }, r[1] + ", " + gib(mem(r[0]).peak_bytes)));
      bdParts(r[0]).forEach(function (pt) {
        var w = xsb.map(pt[1] / BU.div) - LX;
        var rc = sv("rect", { x: x, y: y, width: Math.max(w, 0.5), height: BH, fill: compColour[pt[0]] || "#999" });
        rc.appendChild(sv("title", null, pt[0] + ": " + bytesGib(pt[1])));
        g.appendChild(rc);
        if (w > 8 * pt[0].length + 8)
          g.appendChild(sv("text", { x: x + 4, y: y + BH / 2 + 4, "class": "halo seg-label" }, pt[0]));
        x += w;
      });
    });
    var ticksY = rows.length * (BH + 12) + 8;
    niceTicks(0, xsb.hi, 8).forEach(function (v) { g.appendChild(sv("text", { x: xsb.map(v), y: ticksY + 10, "text-anchor": "middle" }, fmtTick(v))); });
    g.appendChild(sv("text", { x: BW - 20, y: ticksY + 26, "text-anchor": "end" }, "allocated at the peak (" + BU.name + ")"));
    box.appendChild(g);
    var t = el("table", { id: "breakdown-table" }), hr = el("tr");
    ["component", "bytes", "", "share"].forEach(function (h, i) { hr.appendChild(el("th", i ? null : { "class": "l" }, h)); });
    t.appendChild(hr);
    var total = mem(e).peak_bytes;
    bdParts(e).forEach(function (pt) {
      var tr = el("tr"), nm = el("td", { "class": "l" }), sw = el("span", { "class": "sw" });
      sw.textContent = "\u25a0 ";
      sw.style.color = compColour[pt[0]] || "#999";
      nm.appendChild(sw);
      nm.appendChild(document.createTextNode(pt[0]));
      tr.appendChild(nm);
      tr.appendChild(el("td", null, bytes(pt[1])));
      tr.appendChild(el("td", null, gib(pt[1])));
      tr.appendChild(el("td", null, isNum(total) && total > 0 ? (100 * pt[1] / total).toFixed(1) + " %" : "n/a"));
      t.appendChild(tr);
    });
    box.appendChild(t);
  }

  function timelineChart(e) {
    var box = document.getElementById("timeline");
    clear(box);
    var tl = obj(e.timeline), ts = arr(tl.seconds), ab = arr(tl.allocated_bytes), ph = arr(tl.phase);
    var n = Math.min(ts.length, ab.length);
    if (!n) {
      box.appendChild(el("p", { "class": "note" }, "The plan carries the memory timeline of its recommended entry only" +
        (rec >= 0 ? " (entry " + rec + ")" : "") + "; plan this setting alone (gckpt-plan --every-n ... --offload ... --micro-batch ...) to see its own."));
      return;
    }
    var TW = 900, TH = 300, tx0 = 78, ty0 = 14, tw = TW - tx0 - 24, th = TH - ty0 - 52;
    var g = sv("svg", { viewBox: "0 0 " + TW + " " + TH, width: TW, height: TH, role: "img", "aria-label": "allocated memory over the step", id: "timeline-svg" });
    var tmax = 0, amax = 0, ipk = 0;
    for (var i = 0; i < n; i++) {
      if (isNum(ts[i])) tmax = Math.max(tmax, ts[i]);
      if (isNum(ab[i]) && ab[i] > amax) { amax = ab[i]; ipk = i; }
    }
    var m = mem(e), top = Math.max(amax, m.peak_bytes || 0);
    /* the budget and usable lines, as on the sweep, when they are near enough to draw */
    var showUsable = isNum(usable) && usable < 1.6 * top, showBudget = isNum(budget) && budget < 1.6 * top;
    var TU = unitFor(top || 1), ymax = Math.max(top, showUsable ? usable : 0, showBudget ? budget : 0) * 1.08 / TU.div;
    var txs = scale(0, tmax * 1000 || 1, tx0, tx0 + tw), tys = scale(0, ymax || 1, ty0 + th, ty0);
    /* phases shaded */
    var start = 0;
    for (i = 1; i <= n; i++) {
      if (i === n || ph[i] !== ph[start]) {
        /* a sample's phase is the phase of the time leading up to it */
        var xa = txs.map((start ? ts[start - 1] || 0 : 0) * 1000), xb = txs.map((ts[i - 1] || 0) * 1000);
        var r = sv("rect", { x: xa, y: ty0, width: Math.max(xb - xa, 0.5), height: th, "class": "phase-" + str(ph[start]).replace(/[^a-z]/g, "") });
        r.appendChild(sv("title", null, str(ph[start], "?")));
        g.appendChild(r);
        start = i;
      }
    }
    axes(g, tx0, ty0, tw, th, txs, tys, "time in the step (ms)", "allocated (" + TU.name + ")");
    var d = "";
    for (i = 0; i < n; i++) d += (i ? "L" : "M") + txs.map((ts[i] || 0) * 1000).toFixed(1) + " " + tys.map((ab[i] || 0) / TU.div).toFixed(1);
    g.appendChild(sv("path", { "class": "tl-line", d: d }));
    if (showUsable) {
      var yu = tys.map(usable / TU.div);
      g.appendChild(sv("line", { "class": "usable", x1: tx0, x2: tx0 + tw, y1: yu, y2: yu, "data-bytes": String(usable) }));
      g.appendChild(sv("text", { x: tx0 + tw - 4, y: yu - 4, "text-anchor": "end", "class": "halo" }, "usable " + gib(usable)));
    }
    if (showBudget) { /* its label at the left: the two lines are a margin apart */
      var yb = tys.map(budget / TU.div);
      g.appendChild(sv("line", { "class": "budget", x1: tx0, x2: tx0 + tw, y1: yb, y2: yb, "data-bytes": String(budget) }));
      g.appendChild(sv("text", { x: tx0 + 4, y: yb - 4, "class": "halo" }, "budget " + gib(budget)));
    }
    var px = txs.map((ts[ipk] || 0) * 1000), py = tys.map(amax / TU.div);
    var mk = sv("circle", { "class": "peak-mark", cx: px, cy: py, r: 5, id: "peak-marker" });
    mk.appendChild(sv("title", null, "peak " + bytesGib(amax) + ": " + str(m.peak_where)));
    g.appendChild(mk);
    g.appendChild(sv("text", { x: px > tx0 + tw * 0.6 ? px - 8 : px + 8, y: py - 8, "class": "halo", "text-anchor": px > tx0 + tw * 0.6 ? "end" : "start" }, "peak " + gib(amax) + ": " + str(m.peak_where, "?")));
    box.appendChild(g);
    var lg = el("p", { "class": "note" });
    lg.textContent = "Shaded: forward (blue), loss (yellow), backward (purple), optimizer (green). Peak " + bytesGib(amax) +
      " in " + str(m.peak_phase, "?") + ": " + str(m.peak_where, "?") + "." +
      (isNum(usable) && !showUsable ? " The usable memory, " + gib(usable) + ", is far above the chart." : "") +
      (isNum(budget) && !showBudget ? " The budget, " + gib(budget) + ", is far above the chart." : "");
    box.appendChild(lg);
  }

  /* a JSON value as a Python literal (the rule of gckpt-plan's snippet, planner/plan_text.c) */
  function litWidth(v) {
    if (typeof v === "string") return v.length + 2;
    if (typeof v === "boolean") return v ? 4 : 5;
    if (typeof v === "number") return String(v).length;
    if (v && typeof v === "object") {
      var w = 2;
      Object.keys(v).forEach(function (k) { w += k.length + 4 + litWidth(v[k]) + 2; });
      return w;
    }
    return 4;
  }
  function literal(v, col, depth) {
    if (typeof v === "string") return "\"" + v.replace(/[\\"]/g, "\\$&") + "\"";
    if (typeof v === "boolean") return v ? "True" : "False";
    if (typeof v === "number") return isFinite(v) ? String(v) : "None";
    if (v && typeof v === "object" && !Array.isArray(v)) {
      var one = col + litWidth(v) <= 100, ks = Object.keys(v), s = "{", pad = new Array(4 * (depth + 1) + 1).join(" ");
      ks.forEach(function (k, i) {
        if (one) s += (i ? ", " : "") + "\"" + k + "\": ";
        else s += "\n" + pad + "\"" + k + "\": ";
        s += literal(v[k], one ? col : 4 * (depth + 1) + k.length + 4, depth + 1);
        if (!one) s += ",";
      });
      if (!one) s += "\n" + new Array(4 * depth + 1).join(" ");
      return s + "}";
    }
    return "None";
  }
  function trainingArgs(e) {
    var own = obj(e.training_arguments), shared = obj(inputs.training_arguments), merged = {}, order = [];
    function add(k, v) { if (!(k in merged)) order.push(k); merged[k] = v; }
    ["per_device_train_batch_size", "gradient_accumulation_steps"].forEach(function (k) { if (k in own) add(k, own[k]); });
    Object.keys(shared).forEach(function (k) { add(k, shared[k]); });
    Object.keys(own).forEach(function (k) { add(k, own[k]); });
    var s = "args = TrainingArguments(\n    ...,\n";
    order.forEach(function (k) {
      var v = merged[k];
      if (k === "parallelism_config" && v && typeof v === "object") /* accelerate's object, as the CLI prints it */
        s += "    " + k + "=ParallelismConfig(" + Object.keys(v).map(function (f) { return f + "=" + v[f]; }).join(", ") + "),\n";
      else s += "    " + k + "=" + literal(v, 4 + k.length + 1, 1) + ",\n";
    });
    return s + ")\n";
  }

  function fact(dl, k, v) { dl.appendChild(el("dt", null, k)); dl.appendChild(el("dd", null, v)); }
  function select(idx) {
    var e = byIndex[idx];
    if (!e) return;
    if (selected >= 0 && pointOf[selected]) pointOf[selected].classList.remove("selected");
    selected = idx;
    if (pointOf[idx]) pointOf[idx].classList.add("selected");
    body.setAttribute("data-selected", String(idx));
    clear(selLine);
    selLine.appendChild(document.createTextNode("Selected: entry " + idx + " (" + setting(e) + ", " + gib(devPeak(e)) + ", " + tps(tokps(e)) + ") "));
    var go = el("button", { type: "button" }, "Show the entry");
    go.addEventListener("click", function () { showTab("entry"); document.getElementById("tab-entry").focus(); });
    selLine.appendChild(go);
    var m = mem(e), t = tim(e);
    document.getElementById("entry-title").textContent = "Entry " + idx + (idx === rec ? " (recommended)" : "") + (idx === smallest ? " (smallest)" : "") + ": " + setting(e);
    var dl = document.getElementById("entry-facts");
    clear(dl);
    fact(dl, "device peak", bytesGib(m.device_peak_bytes));
    fact(dl, "allocated peak", bytesGib(m.peak_bytes));
    fact(dl, "peak at", str(m.peak_phase, "?") + (isNum(m.peak_layer) ? ", layer " + m.peak_layer : "") + ", micro-step " + str(m.peak_micro_step, "?") + ": " + str(m.peak_where, "?"));
    fact(dl, "fits", e.fits === true ? "yes, headroom " + bytesGib(e.headroom_bytes) : "no (usable " + gib(usable) + ")");
    fact(dl, "step", secs(t.step_s) + " (forward " + secs(t.forward_s) + ", backward " + secs(t.backward_s) + ", recompute " + secs(t.recompute_s) +
      ", offload copies " + secs(t.offload_copy_s) + ", optimizer " + secs(t.optimizer_s) + ")");
    fact(dl, "throughput", tps(t.tokens_per_s) + (isNum(t.mfu) ? ", MFU " + (100 * t.mfu).toFixed(1) + " %" : ""));
    if (isNum(m.host_pinned_bytes)) fact(dl, "pinned host memory", bytesGib(m.host_pinned_bytes));
    if (isNum(m.context_bytes)) fact(dl, "CUDA context (in the device peak)", gib(m.context_bytes));
    fact(dl, "checkpointed layers", arr(e.checkpointed_layers).length ? arr(e.checkpointed_layers).join(", ") : "none");
    if (Array.isArray(e.vision_checkpointed_layers))
      fact(dl, "checkpointed vision layers", e.vision_checkpointed_layers.length ? e.vision_checkpointed_layers.join(", ") : "none");
    breakdownBars(e);
    timelineChart(e);
    var rk = document.getElementById("ranks");
    clear(rk);
    if (layout) {
      rk.appendChild(el("h3", null, "Several GPUs"));
      var d2 = el("dl", { id: "rank-facts" });
      fact(d2, "layout", String(layout.world_size) + " ranks (" + String(layout.nodes) + " node(s) x " + String(layout.gpus) + " GPUs), " + str(layout.parallel));
      fact(d2, "memory shown", str(layout.memory));
      if (isNum(e.global_batch)) fact(d2, "global batch", e.global_batch + " sequences per optimizer step");
      if (isNum(obj(m.breakdown).parallel)) fact(d2, "added by the mode on this rank", bytesGib(obj(m.breakdown).parallel));
      if (isNum(t.collective_exposed_s)) fact(d2, "collectives not hidden by compute", secs(t.collective_exposed_s));
      if (isNum(m.host_pageable_bytes)) fact(d2, "pageable host memory (CPU offload)", bytesGib(m.host_pageable_bytes));
      rk.appendChild(d2);
      var rr = measuredRanks(idx);
      if (rr) rk.appendChild(rr);
    }
    document.getElementById("code").textContent = trainingArgs(e);
  }
  document.getElementById("copy").addEventListener("click", function () {
    var text = document.getElementById("code").textContent, out = document.getElementById("copied");
    function fallback() {
      var r = document.createRange();
      r.selectNodeContents(document.getElementById("code"));
      var s = window.getSelection();
      s.removeAllRanges();
      s.addRange(r);
      out.textContent = "selected: press Ctrl+C";
    }
    if (navigator.clipboard && navigator.clipboard.writeText)
      navigator.clipboard.writeText(text).then(function () { out.textContent = "copied"; }, fallback);
    else fallback();
  });

  /* ---- predicted vs measured ------------------------------------------------------------ */
  function repEntries(r) { return arr(obj(r.report).entries).filter(function (x) { return x && typeof x === "object"; }); }
  function check(x) { x = obj(x); return { pred: x.predicted, meas: x.measured, rel: x.relative_error, pass: x.pass }; }
  function measuredOf(idx) {
    for (var k = reports.length - 1; k >= 0; k--) {
      var es = repEntries(reports[k]);
      for (var j = 0; j < es.length; j++)
        if (es[j].index === idx) {
          var mm = obj(es[j].memory);
          return { file: str(reports[k].file), alloc: obj(mm.peak_bytes).measured, device: obj(mm.device_peak_bytes).measured, step: obj(es[j].time).measured_step_s };
        }
    }
    return null;
  }
  function bytesCell(b, cls) {
    var td = el("td", cls ? { "class": cls } : null, gib(b));
    if (isNum(b)) td.setAttribute("title", bytes(b));
    return td;
  }
  function shortSetting(x) { return "every_n " + everyN(x) + ", offload " + offl(x) + ", mb " + String(x.micro_batch) + " x ga " + String(x.grad_accum); }
  function passCell(v) {
    return v === true ? el("td", { "class": "pass" }, "pass") : v === false ? el("td", { "class": "fail" }, "FAIL") : el("td", null, "-");
  }
  function dateText(d) { return isNum(d) ? new Date(d * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC") : "unknown date"; }
  function measuredRanks(idx) {
    var last = null;
    reports.forEach(function (r) { repEntries(r).forEach(function (x) { if (x.index === idx && arr(x.ranks).length) last = [r, x]; }); });
    if (!last) return null;
    var wrap = el("div");
    wrap.appendChild(el("p", { "class": "note" }, "Each rank as measured in " + str(last[0].file) + " (" + dateText(last[0].date) + "): its own schedule's allocated peak against the measured one."));
    var t = el("table", { "class": "ranks-table" }), hr = el("tr");
    ["rank", "status", "predicted alloc", "measured alloc", "exact", "step", "loss"].forEach(function (h) { hr.appendChild(el("th", null, h)); });
    t.appendChild(hr);
    arr(last[1].ranks).forEach(function (x) {
      x = obj(x);
      var tr = el("tr"), pk = obj(x.peak_bytes);
      [String(x.rank), str(x.status, "?"), bytesGib(pk.predicted), bytesGib(pk.measured), pk.exact === true ? "yes" : pk.exact === false ? "NO" : "-",
        secs(x.measured_step_s), isNum(x.loss) ? x.loss.toFixed(6) : "n/a"].forEach(function (v) { tr.appendChild(el("td", null, v)); });
      t.appendChild(tr);
    });
    wrap.appendChild(t);
    return wrap;
  }
  function measuredTables() {
    var box = document.getElementById("measured");
    if (!reports.length) { box.appendChild(el("p", { "class": "note" }, "No report given.")); return; }
    reports.forEach(function (r, k) {
      var rep = obj(r.report), dv = obj(rep.device), sm = obj(rep.summary);
      var ranks = obj(rep.ranks), gen = obj(rep.generator);
      var h = el("h3", null, "Report " + (k + 1) + ": " + str(r.file) + " (" + dateText(r.date) + ")" +
        (isNum(rep.rank) ? ", rank " + rep.rank + (isNum(ranks.world_size) ? " of " + ranks.world_size : "") : ""));
      box.appendChild(h);
      box.appendChild(el("p", { "class": "note" }, "backend " + str(rep.backend, "?") + " (" + str(gen.name, "?") + ") on " + str(dv.name, "?") +
        " \u00b7 " + String(sm.passed) + " passed, " + String(sm.failed) + " failed of " + String(sm.selected) + " selected" +
        (sm.ended === false ? " (the run had not ended)" : "") + (typeof sm.signal === "string" ? " \u00b7 stopped by " + sm.signal : "")));
      reportWarnings(box, rep, k);
      var wrap = el("div", { "class": "table-scroll" }), t = el("table", { "class": "measured-table", "data-report": String(k) }), hr = el("tr");
      ["entry", "setting", "status", "predicted alloc", "measured alloc", "error", "pass", "predicted device", "measured device", "error", "pass",
        "predicted step", "measured step", "error", "time", "pass", "message"].forEach(function (x, i) { hr.appendChild(el("th", i === 1 || i === 16 ? { "class": "l" } : null, x)); });
      t.appendChild(hr);
      repEntries(r).forEach(function (x) {
        var mm = obj(x.memory), a = check(mm.peak_bytes), dvc = check(mm.device_peak_bytes), tt = obj(x.time);
        var tr = el("tr", { "data-entry": String(x.index), "data-measured-alloc": isNum(a.meas) ? String(a.meas) : "",
          "data-measured-device": isNum(dvc.meas) ? String(dvc.meas) : "", "data-measured-step": isNum(tt.measured_step_s) ? String(tt.measured_step_s) : "" });
        tr.appendChild(el("td", null, String(x.index)));
        tr.appendChild(el("td", { "class": "l setting" }, shortSetting(x)));
        tr.appendChild(el("td", null, str(x.status, "?")));
        tr.appendChild(bytesCell(a.pred));
        tr.appendChild(bytesCell(a.meas, "meas-alloc"));
        tr.appendChild(el("td", null, pct(a.rel)));
        tr.appendChild(passCell(a.pass));
        tr.appendChild(bytesCell(dvc.pred));
        tr.appendChild(bytesCell(dvc.meas, "meas-device"));
        tr.appendChild(el("td", null, pct(dvc.rel)));
        tr.appendChild(passCell(dvc.pass));
        tr.appendChild(el("td", null, secs(tt.predicted_step_s)));
        tr.appendChild(el("td", { "class": "meas-step" }, secs(tt.measured_step_s)));
        tr.appendChild(el("td", null, pct(tt.relative_error)));
        tr.appendChild(el("td", null, tt.judged === true ? "judged" : "not judged"));
        tr.appendChild(passCell(x.pass));
        tr.appendChild(el("td", { "class": "l msg" }, str(x.message)));
        tr.tabIndex = 0;
        tr.addEventListener("click", function () { select(x.index); showTab("entry"); });
        tr.addEventListener("keydown", function (ev) { if (ev.key === "Enter") { select(x.index); showTab("entry"); } });
        t.appendChild(tr);
        arr(x.ranks).forEach(function (y) {
          y = obj(y);
          var pk = obj(y.peak_bytes), rt = el("tr", { "class": "rank", "data-entry": String(x.index), "data-rank": String(y.rank) });
          rt.appendChild(el("td", null, ""));
          rt.appendChild(el("td", { "class": "l" }, "rank " + String(y.rank)));
          rt.appendChild(el("td", null, str(y.status, "?")));
          rt.appendChild(bytesCell(pk.predicted));
          rt.appendChild(bytesCell(pk.measured));
          rt.appendChild(el("td", null, isNum(pk.predicted) && pk.predicted > 0 && isNum(pk.measured) ? pct((pk.measured - pk.predicted) / pk.predicted) : "n/a"));
          rt.appendChild(el("td", null, pk.exact === true ? "exact" : pk.exact === false ? "NO" : "-"));
          for (var q = 0; q < 5; q++) rt.appendChild(el("td", null, ""));
          rt.appendChild(el("td", null, secs(y.measured_step_s)));
          for (q = 0; q < 2; q++) rt.appendChild(el("td", null, ""));
          rt.appendChild(passCell(y.pass));
          rt.appendChild(el("td", { "class": "l" }, str(y.message)));
          t.appendChild(rt);
        });
      });
      wrap.appendChild(t);
      box.appendChild(wrap);
      stepCharts(box, rep, k);
    });
  }
  /* gckpt.TrainerCallback's warnings: where the live run differs from the plan's entry */
  function reportWarnings(box, rep, k) {
    var ws = arr(rep.warnings).filter(function (w) { return w && typeof w === "object"; });
    if (!ws.length) return;
    var ul = el("ul", { "class": "report-warnings", "data-report": String(k) });
    ws.forEach(function (w) {
      var li = el("li", { "data-code": str(w.code) }, "PlanMismatchWarning [" + str(w.code) + "]: " + str(w.message));
      ul.appendChild(li);
    });
    box.appendChild(el("p", { "class": "note" }, "The run differs from its plan (" + ws.length + " warning" + (ws.length > 1 ? "s" : "") + "; it went on):"));
    box.appendChild(ul);
  }
  /* gckpt.TrainerCallback's step records: per entry, each optimizer step's measured peak
   * against the plan's line; step 1 is measured but not judged (the optimizer creates its
   * states in it, the plan is for step 2 onwards) */
  function stepCharts(box, rep, k) {
    var by = {}, order = [];
    arr(rep.steps).forEach(function (s) {
      if (!s || typeof s !== "object" || !isNum(s.entry) || !isNum(s.step)) return;
      if (!by[s.entry]) { by[s.entry] = []; order.push(s.entry); }
      by[s.entry].push(s);
    });
    order.forEach(function (idx) {
      var ss = by[idx].slice().sort(function (a, b) { return a.step - b.step; });
      box.appendChild(stepChart(ss, idx, k));
      box.appendChild(stepTable(ss, idx, k));
    });
  }
  function stepChart(ss, idx, k) {
    var wrap = el("div", { "class": "steps" });
    wrap.appendChild(el("h4", null, "Entry " + idx + ", every optimizer step (" + ss.length + ")"));
    var series = [["peak_bytes", "allocated", "circle"], ["device_peak_bytes", "device", "square"]].filter(function (sr) {
      return ss.some(function (s) { return isNum(check(obj(s.memory)[sr[0]]).meas); });
    });
    var lo = Infinity, hi = 0, smax = 1;
    ss.forEach(function (s) {
      smax = Math.max(smax, s.step);
      series.forEach(function (sr) {
        var c = check(obj(s.memory)[sr[0]]);
        [c.meas, c.pred].forEach(function (v) { if (isNum(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); } });
      });
    });
    if (!series.length || !isFinite(lo)) { wrap.appendChild(el("p", { "class": "note" }, "No measured peak in these steps.")); return wrap; }
    var span = Math.max(hi - lo, hi * 0.002, 1), SU = unitFor(hi);
    var SW = 900, SH = 300, x0 = 78, y0 = 14, w = SW - x0 - 24, h = SH - y0 - 52;
    var sxs = scale(ss.length > 1 ? Math.min(ss[0].step, 1) : 0, Math.max(smax, 2), x0 + 12, x0 + w - 12);
    var sys = scale(Math.max(0, lo - span * 0.15) / SU.div, (hi + span * 0.15) / SU.div, y0 + h, y0);
    var g = sv("svg", { viewBox: "0 0 " + SW + " " + SH, width: SW, height: SH, role: "img", "class": "steps-svg",
      "data-report": String(k), "data-entry": String(idx), "aria-label": "each step's measured peak against the plan's, entry " + idx });
    axes(g, x0, y0, w, h, sxs, sys, "optimizer step", "peak (" + SU.name + ")", true);
    var legendText = [];
    series.forEach(function (sr, si) {
      var colour = si ? okabe[5] : okabe[4], pred = null;
      ss.forEach(function (s) { var c = check(obj(s.memory)[sr[0]]); if (isNum(c.pred) && pred === null) pred = c.pred; });
      if (isNum(pred)) {
        var yp = sys.map(pred / SU.div);
        g.appendChild(sv("line", { "class": "pred-line", x1: x0, x2: x0 + w, y1: yp, y2: yp, stroke: colour, "data-series": sr[1], "data-predicted": String(pred) }));
        g.appendChild(sv("text", { x: x0 + 30, y: yp - 7 - 14 * si, "class": "halo" }, "planned " + sr[1] + " " + gib(pred)));
        legendText.push("dashed: the plan's " + sr[1] + " peak, " + bytesGib(pred));
      }
      var d = "";
      ss.forEach(function (s) {
        var c = check(obj(s.memory)[sr[0]]);
        if (!isNum(c.meas)) return;
        var x = sxs.map(s.step), y = sys.map(c.meas / SU.div);
        d += (d ? "L" : "M") + x.toFixed(1) + " " + y.toFixed(1);
      });
      g.appendChild(sv("path", { "class": "step-line", d: d || "M0 0", stroke: colour }));
      ss.forEach(function (s) {
        var c = check(obj(s.memory)[sr[0]]);
        if (!isNum(c.meas)) return;
        var x = sxs.map(s.step), y = sys.map(c.meas / SU.div), judged = s.judged === true;
        var pt = sv("path", { d: shapePath(sr[2] === "square" ? "off" : "-", Math.round(x * 10) / 10, Math.round(y * 10) / 10, 4.5),
          "class": "step-pt" + (judged ? "" : " not-judged") + (c.pass === false ? " failed" : ""), stroke: colour, fill: judged ? colour : "none",
          "data-series": sr[1], "data-step": String(s.step), "data-measured": String(c.meas), "data-judged": String(judged) });
        pt.appendChild(sv("title", null, "step " + s.step + (judged ? "" : " (not judged: the optimizer creates its states in it)") + ": " + sr[1] +
          " peak " + bytesGib(c.meas) + " against " + bytesGib(c.pred) + " planned, " + pct(c.rel) +
          (judged ? (c.pass === true ? ", pass" : c.pass === false ? ", FAIL" : "") : "") + "; step " + secs(obj(s.time).measured_step_s)));
        g.appendChild(pt);
        if (!judged && si === 0)
          g.appendChild(sv("text", { x: x + 8, y: y + 4, "class": "halo not-judged-label" }, "step " + s.step + ": not judged"));
      });
    });
    wrap.appendChild(g);
    wrap.appendChild(el("p", { "class": "note" }, "Each optimizer step's measured peak (" + series.map(function (sr) { return sr[1] + ": " + sr[2]; }).join(", ") +
      "); hollow: not judged (step 1, before the optimizer's states exist; the plan is for step 2 onwards); " + legendText.join("; ") + "."));
    return wrap;
  }
  function stepTable(ss, idx, k) {
    var det = el("details", { "class": "steps-detail" }), t = el("table", { "class": "steps-table", "data-report": String(k), "data-entry": String(idx) }), hr = el("tr");
    det.appendChild(el("summary", null, "Every step of entry " + idx + " as a table"));
    ["step", "judged", "predicted alloc", "measured alloc", "error", "predicted device", "measured device", "error", "pass", "step time"].forEach(function (x) { hr.appendChild(el("th", null, x)); });
    t.appendChild(hr);
    ss.forEach(function (s) {
      var mm = obj(s.memory), a = check(mm.peak_bytes), dvc = check(mm.device_peak_bytes);
      var tr = el("tr", { "data-step": String(s.step) });
      tr.appendChild(el("td", null, String(s.step)));
      tr.appendChild(el("td", null, s.judged === true ? "judged" : "not judged"));
      tr.appendChild(bytesCell(a.pred));
      tr.appendChild(bytesCell(a.meas));
      tr.appendChild(el("td", null, pct(a.rel)));
      tr.appendChild(bytesCell(dvc.pred));
      tr.appendChild(bytesCell(dvc.meas));
      tr.appendChild(el("td", null, pct(dvc.rel)));
      tr.appendChild(passCell(s.pass));
      tr.appendChild(el("td", null, secs(obj(s.time).measured_step_s)));
      t.appendChild(tr);
    });
    var sc = el("div", { "class": "table-scroll" });
    sc.appendChild(t);
    det.appendChild(sc);
    return det;
  }
  /* several reports: each entry's relative error of the allocated peak (and of the step time)
   * over the reports' dates */
  function trend() {
    var box = document.getElementById("trend");
    /* one line per entry over runs: rank 0's report of each (gckpt-run's reports are rank 0's;
     * gckpt.TrainerCallback's other ranks write files of their own) */
    var runs = reports.filter(function (r) { var rk = obj(r.report).rank; return !(isNum(rk) && rk > 0); });
    if (runs.length < 2) return;
    var rs = runs.map(function (r, k) { return { r: r, k: k, d: isNum(r.date) ? r.date : k }; }).sort(function (a, b) { return a.d - b.d; });
    var series = {};
    rs.forEach(function (o, pos) {
      repEntries(o.r).forEach(function (x) {
        var a = check(obj(x.memory).peak_bytes);
        if (!isNum(a.rel)) return;
        (series[x.index] = series[x.index] || []).push([o.d, a.rel, str(o.r.file), pos]);
      });
    });
    var keys = Object.keys(series);
    box.appendChild(el("h3", null, "Trend over the reports' dates"));
    if (!keys.length) { box.appendChild(el("p", { "class": "note" }, "No measured allocated peak in these reports.")); return; }
    var TW = 900, TH = 280, x0 = 78, y0 = 14, w = TW - x0 - 24, h = TH - y0 - 52, lo = 0, hi = 0;
    keys.forEach(function (k) { series[k].forEach(function (p) { lo = Math.min(lo, p[1] * 100); hi = Math.max(hi, p[1] * 100); }); });
    if (hi - lo < 0.1) { lo -= 0.05; hi += 0.05; }
    var d0 = rs[0].d, d1 = rs[rs.length - 1].d;
    var txs = scale(0, Math.max((d1 - d0) / 3600, 1e-6), x0, x0 + w), tys = scale(lo, hi, y0 + h, y0);
    var g = sv("svg", { viewBox: "0 0 " + TW + " " + TH, width: TW, height: TH, role: "img", "aria-label": "relative error of the allocated peak over time", id: "trend-svg" });
    axes(g, x0, y0, w, h, txs, tys, "hours since " + dateText(d0), "allocated peak error (%)");
    keys.forEach(function (k, i) {
      var c = okabe[i % okabe.length], d = "";
      series[k].forEach(function (p, j) {
        var x = txs.map((p[0] - d0) / 3600), y = tys.map(p[1] * 100);
        d += (j ? "L" : "M") + x.toFixed(1) + " " + y.toFixed(1);
        var dot = sv("circle", { cx: x, cy: y, r: 3.5, fill: c, "data-entry": k });
        dot.appendChild(sv("title", null, "entry " + k + ", " + p[2] + " (" + dateText(p[0]) + "): " + pct(p[1])));
        g.appendChild(dot);
      });
      g.appendChild(sv("path", { "class": "trend-line", d: d, stroke: c }));
    });
    box.appendChild(g);
    box.appendChild(el("p", { "class": "note" }, "One line per entry (colours in entry order: " + keys.slice(0, 8).map(function (k) { return "entry " + k; }).join(", ") +
      (keys.length > 8 ? ", \u2026" : "") + "). A report's date is its file's modification time."));
  }
  measuredTables();
  trend();

  /* ---- start: the view the address asks for (#tab=entry&entry=3), else the sweep with the
   * recommended (or smallest) entry selected ----------------------------------------------- */
  var want = {};
  location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
    var p = kv.split("=");
    if (p[0]) want[decodeURIComponent(p[0])] = decodeURIComponent(p[1] || "");
  });
  var first = /^\d+$/.test(want.entry || "") && byIndex[+want.entry] ? +want.entry : byIndex[rec] ? rec : byIndex[smallest] ? smallest : isNum(obj(entries[0]).index) ? entries[0].index : -1;
  if (first >= 0) {
    select(first);
    if (pointOf[first]) pointOf[first].setAttribute("tabindex", "0");
  }
  showTab(want.tab === "entry" || (want.tab === "measured" && reports.length) ? want.tab : "sweep");
  /* for the tests and the benchmark: whether the page is wider than the window, and the
   * time from the navigation's start until now */
  var de = document.documentElement;
  body.setAttribute("data-overflow-x", String(de.scrollWidth > de.clientWidth + 1));
  body.setAttribute("data-load-ms", performance.now().toFixed(0));
  body.setAttribute("data-script-ms", (performance.now() - t0).toFixed(0));
  body.setAttribute("data-state", "ready");
  /* the frame after this one has begun: the page as laid out by the script has been painted */
  requestAnimationFrame(function () {
    requestAnimationFrame(function () { body.setAttribute("data-painted-ms", performance.now().toFixed(0)); });
  });
})();
