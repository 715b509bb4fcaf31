#!/usr/bin/env python3
"""The dashboard driven as a user drives it (issue 24): headless Chromium through the DevTools
protocol (tests/dash/cdp.py), real mouse and key events on the page gckpt-dash wrote.

usage: dash_devtools.py --build DIR --source DIR [SHOTS_DIR]

  - hover each point: the tooltip's text equals the one built here from the entry's numbers
    in the plan JSON (setting, both peaks, throughput and step, fits, where the peak is, the
    breakdown at the peak, the latest report's measured values), as JavaScript formats them
  - the selected entry: its timeline's phase bands, budget and usable lines and peak marker
    (with the tensor), its stacked breakdown, each from the plan JSON
  - a click selects (the point marked, the entry view retitled); keyboard: Tab reaches the
    tabs and the points, each focus visible, the arrow keys move, Enter selects
  - each filter checkbox (every_n, offload, micro-batch, parallel mode) hides exactly the
    points of its value, and shows them again
  - colour by every_n (Okabe-Ito), shape by offload; light and dark (prefers-color-scheme
    emulated); every element's text selectable; the measured tables' numbers carry units
  - hostile strings (tests/dash/dash_test.py's hostile plan and report) against the same
    inputs with plain strings: the charts, filters, legend and tabs render the same (but for
    a few pixels of rendering noise); only the text areas differ, nothing wider than the window
  - the requests the page made (only itself) and every console message and exception
    (none) over all of the above
Exit 77 (skipped) without chromium.
"""
import argparse
import base64
import decimal
import json
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cdp  # noqa: E402
import dash_test as dt  # noqa: E402

check = dt.check
GiB = 1073741824
OKABE = ["#e69f00", "#56b4e9", "#009e73", "#f0e442", "#0072b2", "#d55e00", "#cc79a7", "#7f7f7f"]


# ---- JavaScript's number formatting (ECMA-262 toFixed / toPrecision: an exact tie goes up) ----

def to_fixed(x, d):
    q = decimal.Decimal(x).quantize(decimal.Decimal(1).scaleb(-d), rounding=decimal.ROUND_HALF_UP)
    s = "%.*f" % (d, q) if d else str(int(q))
    return "0" + s[2:] if s.startswith("-0") and float(q) == 0 else s


def to_precision(x, p):
    if x == 0:
        return to_fixed(0, p - 1)
    v = decimal.Decimal(x)
    e = v.adjusted()
    q = v.quantize(decimal.Decimal(1).scaleb(e - p + 1), rounding=decimal.ROUND_HALF_UP)
    if q.adjusted() != e:  # 9.9995 -> 10.00
        e = q.adjusted()
        q = v.quantize(decimal.Decimal(1).scaleb(e - p + 1), rounding=decimal.ROUND_HALF_UP)
    if e < -6 or e >= p:
        digits = str(abs(q.scaleb(-(e - p + 1)).to_integral_value()))
        m = digits[0] + ("." + digits[1:] if p > 1 else "")
        return ("-" if x < 0 else "") + m + "e" + ("+" if e >= 0 else "-") + str(abs(e))
    return "%.*f" % (max(0, p - 1 - e), q)


def unit_for(b):
    b = abs(b)
    return (GiB, "GiB") if b >= GiB else (1048576, "MiB") if b >= 1048576 else (1024, "KiB") if b >= 1024 else (1, "bytes")


def num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def gib(b):
    if not num(b):
        return "n/a"
    div, name = unit_for(b)
    return to_fixed(b / div, 2 if div > 1 else 0) + " " + name


def bytes_(b):
    return (str(int(decimal.Decimal(b).to_integral_value(decimal.ROUND_HALF_UP))) + " bytes") if num(b) else "n/a"


def bytes_gib(b):
    if not num(b):
        return "n/a"
    return bytes_(b) if unit_for(b)[0] == 1 else gib(b) + " (" + bytes_(b) + ")"


def secs(s):
    if not num(s):
        return "n/a"
    if s != 0 and abs(s) < 1e-6:
        return to_precision(s * 1e6, 4) + " \u00b5s"
    return to_precision(s * 1000, 4) + " ms" if abs(s) < 1 else to_precision(s, 4) + " s"


def every_n(e):
    return str(e["every_n_layers"]) if num(e.get("every_n_layers")) and e["every_n_layers"] > 0 else "off"


def offl(e):
    return ("on" if e.get("offload") is True else "off") if every_n(e) != "off" else "-"


def setting(e):
    return "every_n_layers %s, offload %s, micro-batch %d x grad-accum %d" % (every_n(e), offl(e), e["micro_batch"], e["grad_accum"])


def expected_tip(e, plan, reports):
    """The tooltip of entry e: built from the plan JSON and the reports, not from the page."""
    m, t = e["memory"], e["time"]
    lines = ["entry %d%s" % (e["index"], " (recommended)" if e["index"] == plan.get("recommended") else ""),
             "device peak " + bytes_gib(m["device_peak_bytes"]), "allocated peak " + bytes_gib(m["peak_bytes"]),
             "throughput " + to_fixed(t["tokens_per_s"], 1) + " tokens/s, step " + secs(t["step_s"]),
             ("fits, headroom " + gib(e["headroom_bytes"])) if e.get("fits") is True else "does not fit",
             "peak in %s%s, micro-step %s: %s" % (m["peak_phase"], ", layer %d" % m["peak_layer"] if num(m.get("peak_layer")) else "",
                                                 m["peak_micro_step"], m["peak_where"])]
    parts = sorted([(k, v) for k, v in m["breakdown"].items() if num(v) and v > 0], key=lambda kv: -kv[1])
    if parts:
        lines.append("breakdown at the peak: " + ", ".join("%s %s" % (k, gib(v)) for k, v in parts))
    if num(m.get("host_pinned_bytes")) and m["host_pinned_bytes"] > 0:
        lines.append("pinned host " + gib(m["host_pinned_bytes"]))
    for path in reversed(reports):  # the latest report given that has the entry
        got = [x for x in dt.report_entries(path) if x["index"] == e["index"]]
        if got:
            x = got[0]
            lines.append("measured (%s): allocated peak %s, device peak %s, step %s" % (
                path, bytes_gib(x["memory"]["peak_bytes"]["measured"]), bytes_gib(x["memory"]["device_peak_bytes"]["measured"]),
                secs(x["time"]["measured_step_s"])))
            break
    return "\n".join(lines)


# ---- the page through DevTools -------------------------------------------------------------

POINTS_JS = """(function () {
  return Array.prototype.map.call(document.querySelectorAll('#sweep .pt'), function (p) {
    var b = p.getBoundingClientRect(), x = b.left + b.width / 2, y = b.top + b.height / 2;
    return { index: +p.getAttribute('data-index'), x: x, y: y, top: document.elementFromPoint(x, y) === p,
             fill: p.getAttribute('fill'), d: p.getAttribute('d'), shown: p.style.display !== 'none' };
  });
})()"""

ACTIVE_JS = """(function () {
  var a = document.activeElement;
  return { tag: a.tagName.toLowerCase(), id: a.id, index: a.getAttribute('data-index'), filter: a.getAttribute('data-filter'),
           outline: getComputedStyle(a).outlineStyle + ' ' + getComputedStyle(a).outlineWidth,
           stroke: getComputedStyle(a).strokeWidth, tab: document.body.getAttribute('data-tab'),
           tip: document.getElementById('tip').hidden ? null : document.getElementById('tip').getAttribute('data-index') };
})()"""


def tip_now(c):
    return c.eval("(function(){var t=document.getElementById('tip');return t.hidden?null:[t.getAttribute('data-index'),t.textContent];})()")


def scroll_to(c, p):
    """Scrolls so that the point's centre is in the window (a mouse event needs it there)."""
    return c.eval("(function(){var p=document.querySelector('#sweep .pt[data-index=\"%d\"]');p.scrollIntoView({block:'center'});"
                  "var b=p.getBoundingClientRect();return [b.left+b.width/2,b.top+b.height/2,"
                  "document.elementFromPoint(b.left+b.width/2,b.top+b.height/2)===p];})()" % p)


def check_hover(c, plan, reports, label):
    entries = {e["index"]: e for e in plan["entries"]}
    hovered = focused = 0
    for p in c.eval(POINTS_JS):
        x, y, top = scroll_to(c, p["index"])
        want = expected_tip(entries[p["index"]], plan, reports)
        if top:
            c.mouse("mouseMoved", x, y)
            hovered += 1
            how = "hovered"
        else:  # under another point: reached by focus, as a keyboard user does
            c.eval("document.querySelector('#sweep .pt[data-index=\"%d\"]').focus()" % p["index"])
            focused += 1
            how = "focused"
        got = tip_now(c)
        check(got is not None and got[0] == str(p["index"]), "%s: entry %d %s: the tooltip shows %r" % (label, p["index"], how, got and got[0]))
        if got:
            check(got[1] == want, "%s: entry %d's tooltip\n%s\nthe plan's numbers\n%s" % (label, p["index"], got[1], want))
        # its accessible name: the tooltip's first five lines, the entry's number with its setting
        e = entries[p["index"]]
        name = "; ".join(["entry %d: %s" % (e["index"], setting(e))] + want.split("\n")[1:5])
        aria = c.eval("document.querySelector('#sweep .pt[data-index=\"%d\"]').getAttribute('aria-label')" % p["index"])
        check(aria == name, "%s: entry %d's accessible name %r, the plan's %r" % (label, p["index"], aria, name))
        c.mouse("mouseMoved", 1, 1)
        c.eval("document.activeElement && document.activeElement.blur && document.activeElement.blur()")
    check(hovered > 0, "%s: no point could be hovered" % label)
    print("%s: %d tooltips by hover, %d by focus, each equal to its entry's numbers in the plan" % (label, hovered, focused))


def check_click(c, plan, label):
    rec = plan["recommended"]
    pts = [p for p in c.eval(POINTS_JS) if p["index"] != rec]
    for p in pts[:3]:
        x, y, top = scroll_to(c, p["index"])
        if not top:
            continue
        c.click(x, y)
        got = c.eval("[document.body.getAttribute('data-selected'), document.querySelector('#sweep .pt.selected').getAttribute('data-index'),"
                     " document.getElementById('entry-title').textContent, document.querySelectorAll('#sweep .pt.selected').length]")
        check(got[0] == str(p["index"]) and got[1] == str(p["index"]) and got[3] == 1, "%s: a click on entry %d selected %r" % (label, p["index"], got))
        e = [x for x in plan["entries"] if x["index"] == p["index"]][0]
        check(got[2].startswith("Entry %d" % p["index"]) and got[2].endswith(setting(e)), "%s: the entry view's title %r" % (label, got[2]))


def check_keyboard(c, url, label):
    c.navigate(url)
    seen, point_at, moved = [], None, None
    for _ in range(60):
        c.key("Tab")
        a = c.eval(ACTIVE_JS)
        seen.append(a["id"] or a["filter"] or ("pt%s" % a["index"] if a["index"] is not None else a["tag"]))
        if a["id"] == "tab-sweep":
            check(a["outline"] == "solid 3px", "%s: the focused tab shows no focus ring (%s)" % (label, a["outline"]))
            c.key("ArrowRight")
            b = c.eval(ACTIVE_JS)
            check(b["id"] == "tab-entry" and b["tab"] == "entry", "%s: ArrowRight on the tabs went to %r" % (label, b))
            c.key("ArrowLeft")
            b = c.eval(ACTIVE_JS)
            check(b["id"] == "tab-sweep" and b["tab"] == "sweep", "%s: ArrowLeft on the tabs went to %r" % (label, b))
        if a["index"] is not None and a["tag"] == "path":
            point_at = a
            break
    check(point_at is not None, "%s: Tab never reached a point (%s)" % (label, seen))
    check("tab-sweep" in seen, "%s: Tab never reached the tabs (%s)" % (label, seen))
    stops = [x for x in seen if not (x in ("tab-sweep",) or x.startswith("f-") or x.startswith("pt"))]
    check(not stops, "%s: Tab stops on %s before the points (%s)" % (label, stops, seen))
    if point_at:
        check(point_at["stroke"] == "3px" and point_at["tip"] == point_at["index"],
              "%s: the focused point: stroke %s, tooltip of %s" % (label, point_at["stroke"], point_at["tip"]))
        for k in ("ArrowRight", "ArrowLeft"):
            c.key(k)
            moved = c.eval(ACTIVE_JS)
            if moved["index"] not in (None, point_at["index"]):
                break
        check(moved and moved["tag"] == "path" and moved["index"] != point_at["index"], "%s: the arrow keys did not move between points" % label)
        if moved and moved["index"] is not None:
            c.key("Enter")
            check(c.eval("document.body.getAttribute('data-selected')") == moved["index"], "%s: Enter did not select entry %s" % (label, moved["index"]))
            c.key(" ")  # Space selects too, and does not scroll away
            check(c.eval("document.body.getAttribute('data-selected')") == moved["index"], "%s: Space" % label)
    print("%s: Tab order %s" % (label, " ".join(seen)))


def check_filters(c, url, plan, label):
    c.navigate(url)
    layout = plan["inputs"].get("layout")
    value_of = {"every_n": every_n, "offload": offl, "micro_batch": lambda e: str(e["micro_batch"]),
                "parallel": lambda e: layout["parallel"]}
    boxes = c.eval("Array.prototype.map.call(document.querySelectorAll('#filters input'),function(i){return [i.getAttribute('data-filter'),i.getAttribute('data-value')];})")
    kinds = sorted({k for k, _ in boxes})
    want_kinds = sorted(["every_n", "offload", "micro_batch"] + (["parallel"] if layout else []))
    check(kinds == want_kinds, "%s: filters %s, expected %s" % (label, kinds, want_kinds))
    for kind in value_of:
        want = sorted({value_of[kind](e) for e in plan["entries"]}) if kind != "parallel" or layout else []
        check(sorted(v for k, v in boxes if k == kind) == want, "%s: the %s filter's values" % (label, kind))
    for kind, value in boxes:
        sel = "#filters input[data-filter=\"%s\"][data-value=\"%s\"]" % (kind, value)
        for state in ("off", "on"):
            x, y = c.eval("(function(){var i=document.querySelector('%s');i.scrollIntoView({block:'center'});var b=i.getBoundingClientRect();"
                          "return [b.left+b.width/2,b.top+b.height/2];})()" % sel.replace("'", "\\'"))
            c.click(x, y)
            shown = sorted(p["index"] for p in c.eval(POINTS_JS) if p["shown"])
            want = sorted(e["index"] for e in plan["entries"] if state == "on" or value_of[kind](e) != value)
            check(shown == want, "%s: filter %s=%s %s: shown %s, expected %s" % (label, kind, value, state, shown, want))
            check(c.eval("document.getElementById('sweep').getAttribute('data-visible')") == str(len(want)), "%s: data-visible" % label)
    print("%s: %d filter checkboxes (%s) each hide and show exactly their entries" % (label, len(boxes), ", ".join(kinds)))


def check_look(c, url, plan, label, shots):
    c.navigate(url)
    pts = c.eval(POINTS_JS)
    by_n, by_off = {}, {}
    for p in pts:
        e = [x for x in plan["entries"] if x["index"] == p["index"]][0]
        by_n.setdefault(every_n(e), set()).add(p["fill"])
        shape = "circle" if "a" in p["d"] else "square" if "h" in p["d"] else "diamond"
        by_off.setdefault(offl(e), set()).add(shape)
    check(all(len(v) == 1 for v in by_n.values()) and len({min(v) for v in by_n.values()}) == len(by_n),
          "%s: colour is not one per every_n: %s" % (label, by_n))
    check(all(min(v) in OKABE for v in by_n.values()), "%s: colours outside Okabe-Ito: %s" % (label, by_n))
    check(by_off == {k: {s} for k, s in (("-", "circle"), ("off", "square"), ("on", "diamond")) if k in by_off},
          "%s: shape by offload: %s" % (label, by_off))
    colours = {}
    for scheme in ("light", "dark"):
        c.call("Emulation.setEmulatedMedia", features=[{"name": "prefers-color-scheme", "value": scheme}])
        colours[scheme] = c.eval("[getComputedStyle(document.body).backgroundColor, getComputedStyle(document.body).color,"
                                 " getComputedStyle(document.querySelector('#sweep text')).fill,"
                                 " getComputedStyle(document.querySelector('#sweep .gridline')).stroke]")
        if shots:
            shot = c.call("Page.captureScreenshot", format="png")["data"]
            with open(os.path.join(shots, "dash-devtools-sweep-%s.png" % scheme), "wb") as f:
                f.write(base64.b64decode(shot))
    c.call("Emulation.setEmulatedMedia", features=[])
    check(colours["light"][:2] == ["rgb(255, 255, 255)", "rgb(26, 26, 26)"], "%s: light colours %s" % (label, colours["light"]))
    check(colours["dark"][:2] == ["rgb(20, 20, 20)", "rgb(236, 236, 236)"], "%s: dark colours %s" % (label, colours["dark"]))
    check(colours["dark"][2] == "rgb(236, 236, 236)", "%s: the chart's text in the dark %s" % (label, colours["dark"][2]))
    # the grid in the faint --grid colour of each scheme, not the axes' --muted
    check([colours["light"][3], colours["dark"][3]] == ["rgb(217, 217, 217)", "rgb(58, 58, 58)"],
          "%s: the grid lines' colour (light, dark): %s" % (label, [colours["light"][3], colours["dark"][3]]))
    # text selectable: no element refuses selection, and selecting the page selects its text
    c.navigate(url + "#tab=measured")
    unsel = c.eval("Array.prototype.filter.call(document.querySelectorAll('*'),function(n){return getComputedStyle(n).userSelect==='none';}).length")
    check(unsel == 0, "%s: %d elements are not selectable" % (label, unsel))
    sel = c.eval("(function(){var s=getSelection();s.selectAllChildren(document.body);var t=s.toString();s.removeAllRanges();return t;})()")
    title = c.eval("document.getElementById('title').textContent")
    check(title in sel and "measured alloc" in sel, "%s: selecting the page did not select its text" % label)
    # units: every number in the measured tables and the axes' labels carries its unit
    tables = c.eval("""Array.prototype.map.call(document.querySelectorAll('table.measured-table, table.ranks-table, table.steps-table'),
      function (t) { return Array.prototype.map.call(t.querySelectorAll('tr'), function (tr) {
        return Array.prototype.map.call(tr.children, function (td) { return td.textContent; }); }); })""")
    unit_re = re.compile(r"^(n/a|-|[+-]?\d[\d.]*(e[+-]?\d+)? (bytes|KiB|MiB|GiB|ms|s|%))$")
    plain = {"entry", "setting", "status", "pass", "time", "message", "judged", "step", "rank", "exact", "loss"}
    bad = [(t[0][i], v) for t in tables for row in t[1:] for i, v in enumerate(row)
           if i < len(t[0]) and t[0][i] not in plain and v and not unit_re.match(v)]
    check(tables and not bad, "%s: numbers without a unit: %s" % (label, bad[:5]))
    # the charts: ticks are plain numbers, each axis's title names the unit
    texts = c.eval("Array.prototype.map.call(document.querySelectorAll('svg .axis > text'),function(t){return t.textContent;})")
    titles = [x for x in texts if not re.match(r"^-?[\d.]+[kMG]?$", x)]
    bad = [x for x in titles if not re.search(r"\((bytes|KiB|MiB|GiB|tokens/s|ms|s|%)\)$", x)
           and not x.startswith("hours since ") and x != "optimizer step"]
    check(titles and not bad, "%s: an axis title without its unit: %s" % (label, bad))


COMPONENTS = ["weights", "quantized_weights", "quant_stats", "gradients", "optimizer_states", "paged_optimizer_states",
              "activations", "checkpoints", "recompute", "logits_loss", "backward", "weight_casts", "optimizer_temp", "workspace",
              "parallel"]  # the order the page stacks them in (planner/dash/dash.js)


def check_entry_view(c, url, plan, label):
    """The recommended entry's view: its memory timeline (one shaded band per run of a phase,
    the budget and usable lines when near, the peak marked with its tensor) and its breakdown
    at the peak as stacked bars, each from the plan JSON."""
    c.navigate(url + "#tab=entry")
    e = [x for x in plan["entries"] if x["index"] == plan["recommended"]][0]
    m, tl = e["memory"], e["timeline"]
    got = c.eval("""(function(){var g=document.getElementById('timeline-svg');if(!g)return null;
      function ln(c){var l=g.querySelector('line.'+c);return l?+l.getAttribute('data-bytes'):null;}
      var mk=document.getElementById('peak-marker');
      return {bands:Array.prototype.map.call(g.querySelectorAll('rect[class^=phase-]'),function(r){return r.getAttribute('class').slice(6);}),
              budget:ln('budget'),usable:ln('usable'),marker:mk&&mk.textContent,
              labels:Array.prototype.map.call(g.querySelectorAll('text'),function(t){return t.textContent;}),
              bars:Array.prototype.map.call(document.querySelectorAll('#breakdown svg rect[y="6"]'),function(r){return r.textContent;})};})()""")
    check(got is not None, "%s: no timeline" % label)
    if not got:
        return
    runs = [p for i, p in enumerate(tl["phase"]) if i == 0 or p != tl["phase"][i - 1]]
    check(got["bands"] == [re.sub("[^a-z]", "", p) for p in runs], "%s: phase bands %s, the timeline's runs %s" % (label, got["bands"], runs))
    top = max(max(tl["allocated_bytes"]), m["peak_bytes"])
    for k in ("budget", "usable"):
        b = plan["inputs"][k + "_bytes"]
        check(got[k] == (b if b < 1.6 * top else None), "%s: the %s line at %s, the plan's %d (peak %d)" % (label, k, got[k], b, top))
    amax = max(tl["allocated_bytes"])
    want = "peak %s: %s" % (bytes_gib(amax), m["peak_where"])
    check(got["marker"] == want and ("peak %s: %s" % (gib(amax), m["peak_where"])) in got["labels"],
          "%s: the peak marker %r, label %s; the plan's %r" % (label, got["marker"], got["labels"][-1:], want))
    bd = m["breakdown"]
    parts = [k for k in COMPONENTS + [k for k in bd if k not in COMPONENTS] if num(bd.get(k)) and bd[k] > 0]
    check(got["bars"] == ["%s: %s" % (k, bytes_gib(bd[k])) for k in parts], "%s: the stacked bar %s, the breakdown %s" % (label, got["bars"], parts))
    print("%s: timeline of entry %d: %d phase bands, budget line %s, usable line %s, the peak marked at %s; %d parts stacked"
          % (label, e["index"], len(got["bands"]), got["budget"] is not None, got["usable"] is not None, gib(amax), len(got["bars"])))


def page_events(c, start, urls, label, end=None):
    """Over events[start:end]: the pages asked for nothing but themselves, said nothing."""
    ev = c.page_events(start, end)
    reqs = [e["params"]["request"]["url"] for e in ev if e["method"] == "Network.requestWillBeSent"]
    check(set(reqs) <= {u.split("#")[0] for u in urls} and reqs, "%s: requests %s" % (label, sorted(set(reqs))))
    noise = [(e["method"], json.dumps(e["params"])[:300]) for e in ev
             if e["method"] in ("Runtime.consoleAPICalled", "Runtime.exceptionThrown", "Log.entryAdded")]
    check(not noise, "%s: console messages or exceptions: %s" % (label, noise))
    return len(reqs)


# ---- hostile strings against the clean case, pixel by pixel --------------------------------

DIFF_JS = """(function (a, b) {
  function img(src) { return new Promise(function (ok, ko) { var i = new Image(); i.onload = function () { ok(i); }; i.onerror = ko; i.src = src; }); }
  return Promise.all([img(a), img(b)]).then(function (ims) {
    if (ims[0].width !== ims[1].width || ims[0].height !== ims[1].height)
      return { size: [ims[0].width, ims[0].height, ims[1].width, ims[1].height] };
    var w = ims[0].width, h = ims[0].height, px = ims.map(function (im) {
      var cv = document.createElement('canvas'); cv.width = w; cv.height = h;
      var g = cv.getContext('2d'); g.drawImage(im, 0, 0); return g.getImageData(0, 0, w, h).data; });
    var n = 0, box = null, delta = 0;
    for (var i = 0; i < px[0].length; i += 4)
      if (px[0][i] !== px[1][i] || px[0][i + 1] !== px[1][i + 1] || px[0][i + 2] !== px[1][i + 2]) {
        n++;
        delta = Math.max(delta, Math.abs(px[0][i] - px[1][i]), Math.abs(px[0][i + 1] - px[1][i + 1]), Math.abs(px[0][i + 2] - px[1][i + 2]));
        var x = (i / 4) % w, y = Math.floor(i / 4 / w);
        box = box ? [Math.min(box[0], x), Math.min(box[1], y), Math.max(box[2], x), Math.max(box[3], y)] : [x, y, x, y];
      }
    return { size: [w, h], differ: n, box: box, delta: delta };
  });
})"""


def element_shot(c, selector):
    r = c.eval("(function(){var e=document.querySelector('%s');if(!e)return null;var b=e.getBoundingClientRect();"
               "return [b.left+scrollX,b.top+scrollY,b.width,b.height];})()" % selector)
    if not r:
        return None
    # whole pixels: both pages' element at the same offset within its pixel grid
    clip = dict(x=r[0], y=r[1], width=r[2], height=r[3], scale=1)
    return "data:image/png;base64," + c.call("Page.captureScreenshot", format="png", clip=clip, captureBeyondViewport=True)["data"]


TEXT_AREAS = ["header", "#entry-title", "#entry-facts", "#selected-line"]  # where the data's strings are


def check_hostile_layout(c, fx, clean_url, hostile_url, label):
    """The charts, filters, legend and tabs of the hostile page against the clean page's, pixel
    by pixel. The text areas above them (TEXT_AREAS) are given the same height in both pages
    first (each the taller of the two, through min-height), so that what follows them starts
    at the same (fractional) offset; a hostile string that spilled out of its area would show
    in the captures. Returns the index of the first event of the comparison (about:blank's)."""
    views = {"": ["nav", "#filters", "#sweep", "#legend"], "#tab=entry": ["nav", "#breakdown > svg"]}
    heights_js = "JSON.stringify(%s.map(function(s){var e=document.querySelector(s);return e?e.getBoundingClientRect().height:0;}))" % json.dumps(TEXT_AREAS)
    shots, widths = {}, {}
    for view, sels in views.items():
        hs = {}
        for which, url in (("clean", clean_url), ("hostile", hostile_url)):
            c.navigate(url + view)
            hs[which] = json.loads(c.eval(heights_js))
            if view == "":  # the control: unpadded, each page's filters where its header put them
                shots[("control", which)] = element_shot(c, "#filters")
        tall = [max(x, y) for x, y in zip(hs["clean"], hs["hostile"])]
        for which, url in (("clean", clean_url), ("hostile", hostile_url)):
            c.navigate(url + view)
            got = json.loads(c.eval("(function(){var s=%s,h=%s;s.forEach(function(q,i){var e=document.querySelector(q);if(e)e.style.minHeight=h[i]+'px';});"
                                    "return %s;})()" % (json.dumps(TEXT_AREAS), json.dumps(tall), heights_js)))
            check(got == tall, "%s: %s %s: the text areas' heights %s, set to %s" % (label, which, view or "sweep", got, tall))
            for q in sels:
                shots[(which, view, q)] = element_shot(c, q)
            widths[(which, view)] = c.eval("""(function(){var w=document.documentElement.clientWidth,out=[];
              document.querySelectorAll('header *, main *, footer *').forEach(function(n){var b=n.getBoundingClientRect();
                var sc=n.closest('.table-scroll');if(b.width&&b.right>w+1&&!sc)out.push(n.tagName+'#'+n.id+' '+Math.round(b.right));});
              return [w, document.documentElement.scrollWidth, out.slice(0,5)];})()""")
        print("%s: %s: text areas %s px high (clean %s, hostile %s)" % (label, view or "sweep", tall, hs["clean"], hs["hostile"]))
    start = c.navigate("about:blank")
    same, diffs = 0, []
    for view, sels in views.items():
        for q in sels:
            x, y = shots[("clean", view, q)], shots[("hostile", view, q)]
            check(x and y, "%s: no %s in %s" % (label, q, view or "the sweep"))
            if not (x and y):
                continue
            d = c.eval("(%s)(%s, %s)" % (DIFF_JS, json.dumps(x), json.dumps(y)))
            # a few pixels of an edge come out differently between two renders of the same
            # page in this headless build (seen: 4 pixels, at varying places, run to run); a
            # string that moved or covered a chart changes thousands
            ok = "differ" in d and d["differ"] <= max(16, d["size"][0] * d["size"][1] // 1000)
            same += ok
            diffs.append("%s%s %d px" % (view, q, d.get("differ", -1)))
            check(ok, "%s: %s in %s differs from the clean page's: %s" % (label, q, view or "the sweep", d))
    # the control: the same filters, only moved by a fraction of a pixel (the headers' heights
    # differ by 124.578125 px), are told apart
    d = c.eval("(%s)(%s, %s)" % (DIFF_JS, json.dumps(shots[("control", "clean")]), json.dumps(shots[("control", "hostile")])))
    check(d.get("differ", 0) > max(16, d["size"][0] * d["size"][1] // 1000),
          "%s: the control (the filters where each page's header put them) is not told apart: %s" % (label, d))
    diffs.append("control: the filters unaligned %d px" % d.get("differ", -1))
    for (which, view), (w, sw, out) in widths.items():
        check(sw <= w and not out, "%s: %s %s: wider than the window (%d > %d): %s" % (label, which, view or "sweep", sw, w, out))
    print("%s: %d chart/filter/legend/tab areas the same as the clean page's (pixels that differ: %s); nothing wider than the window"
          % (label, same, ", ".join(diffs)))
    return start


def clean_twin(fx, hostile_path, name):
    """The hostile plan with each hostile string replaced by a plain one: the same entries,
    the same optional fields left out, so a difference between the two pages is the strings'."""
    p = dt.load(hostile_path)
    p["inputs"]["model"]["name"] = "tiny-llama"
    p["inputs"]["device"]["name"] = "cpu-exact"
    p["warnings"] = [{"code": "padding_not_modelled", "message": "a plain warning"}]
    p["inputs"]["training_arguments"]["optim"] = "adamw_torch_fused"
    for e in p["entries"]:
        e["memory"]["peak_where"] = "backward, lm_head/loss: fp32 logits gradient"
    out = fx.p(name)
    with open(out, "w") as f:
        json.dump(p, f)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("shots", nargs="?")
    a = ap.parse_args()
    if not dt.chromium():
        print("chromium not found (apt-get install chromium; tools/install-deps.sh): skipped")
        return dt.SKIP
    with tempfile.TemporaryDirectory(prefix="gckpt-dash-dt-") as tmp:
        fx = dt.Fx(os.path.abspath(a.build), os.path.abspath(a.source), tmp)
        plan_path = fx.tiny_plan()
        plan = dt.load(plan_path)
        day = 86400
        r1 = fx.report(plan_path, "r1.jsonl", "--all", date=time.time() - 2 * day)
        r2 = fx.report(plan_path, "r2.jsonl", "--entry", "0,3,5", date=time.time() - day)
        r = fx.dash("page.html", plan_path, r1, r2)
        check(r.returncode == 0, "gckpt-dash: %r" % r.stderr)
        url = "file://" + fx.p("page.html")
        zp = fx.plan("zero3.json", "--model", fx.source + "/tests/executor/data/tiny-llama.json", "--seq", "32",
                     "--every-n", "off,2", "--micro-batch", "1,2", "--gpus", "2", "--parallel", "zero3")
        check(fx.dash("zero3.html", zp).returncode == 0, "gckpt-dash zero3")
        zurl = "file://" + fx.p("zero3.html")
        # the README's plan (dash-screenshots): its peak near the budget, so both lines drawn
        lp = fx.plan("llama.json", "--model", "llama-3.2-3b", "--seq", "4096", "--micro-batch", "1,2,4,8", "--every-n", "off,1,2,4,7")
        check(fx.dash("llama.html", lp).returncode == 0, "gckpt-dash llama")
        lurl = "file://" + fx.p("llama.html")
        hp = dt.hostile_plan(fx, plan_path)
        cp = clean_twin(fx, hp, "clean-twin.json")
        evil_rep = fx.report(hp, "hostile-run.jsonl", "--entry", "0,3")
        lines = open(evil_rep, encoding="utf-8").read().rstrip("\n").split("\n")
        e0 = json.loads(lines[1])
        e0["message"] = "<script>document.body.setAttribute('data-pwned','msg')</script>\u202e" + "B" * 300
        with open(evil_rep, "w", encoding="utf-8") as f:
            f.write("\n".join([lines[0], json.dumps(e0)] + lines[2:]) + "\n")
        clean_rep = fx.report(cp, "clean-run.jsonl", "--entry", "0,3")
        check(fx.dash("hostile.html", hp, evil_rep).returncode == 0, "gckpt-dash hostile")
        check(fx.dash("clean.html", cp, clean_rep).returncode == 0, "gckpt-dash clean twin")
        with cdp.Chrome(dt.chromium()) as c:
            start = c.navigate(url)
            check_hover(c, plan, [r1, r2], "tiny plan")
            check_click(c, plan, "tiny plan")
            n = page_events(c, start, [url], "tiny plan, hover and click")
            check_keyboard(c, url, "keyboard")
            start = c.navigate(zurl)
            check_hover(c, dt.load(zp), [], "zero3 plan")
            page_events(c, start, [zurl], "zero3 plan")
            for u, p in ((url, plan), (zurl, dt.load(zp))):
                start = len(c.events)
                check_filters(c, u, p, "filters " + os.path.basename(u))
                page_events(c, start, [u], "filters")
            start = len(c.events)
            check_entry_view(c, url, plan, "tiny plan")
            check_entry_view(c, lurl, dt.load(lp), "llama-3.2-3b plan")
            page_events(c, start, [url, lurl], "entry views")
            start = len(c.events)
            check_look(c, url, plan, "look", a.shots)
            page_events(c, start, [url], "look")
            start = len(c.events)
            urls = ["file://" + fx.p("clean.html"), "file://" + fx.p("hostile.html")]
            end = check_hostile_layout(c, fx, urls[0], urls[1], "hostile")
            page_events(c, start, urls, "hostile and clean pages", end)
            print("requests of the page over hover and click: %d (itself)" % n)
    if dt.FAILS:
        print("%d check(s) failed" % len(dt.FAILS))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
