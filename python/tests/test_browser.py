"""The report of the shipped example (GPT-3 175B on 1024 devices) in a real browser: headless
Chromium, with every host name unresolvable, must render every chart without a console error,
and its screenshot must show them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import symshard

CHARTS = ("components", "frontier", "timeline", "memory")

# Injected first in <head>: records uncaught errors, rejected promises, console.error calls and
# (listening in the capture phase, since a failed load's error event does not bubble) every
# element whose resource failed to load.
SPY = """<script>
window.__errors = [];
window.addEventListener('error', function (e) {
  var t = e.target;
  if (t && t !== window && t.tagName) {
    __errors.push('failed to load: <' + t.tagName.toLowerCase() + '> ' + (t.src || t.href || t.data || ''));
  } else {
    __errors.push('error: ' + e.message);
  }
}, true);
window.addEventListener('unhandledrejection', function (e) { __errors.push('rejection: ' + e.reason); });
var __ce = console.error;
console.error = function () { __errors.push('console.error: ' + Array.prototype.join.call(arguments, ' ')); __ce.apply(console, arguments); };
</script>"""

# Injected last in <body>: once the page's script has rendered and every resource has loaded or
# failed (the document is complete), clicks the ranking table's
# `memory` header twice (as a reader would), records the `rank` column after each click, then
# reports the errors.
REPORT_BACK = """<script>
(function wait() {
  if (document.body.dataset.rendered !== 'yes' || document.readyState !== 'complete') {
    setTimeout(wait, 20); return;
  }
  var out = {};
  var t = document.getElementById('ranking');
  if (t) {
    var ranks = function () {
      return Array.prototype.map.call(t.tBodies[0].rows, function (r) { return r.cells[0].textContent; });
    };
    var th = Array.prototype.filter.call(t.tHead.rows[0].cells, function (c) { return c.textContent === 'memory'; })[0];
    out.before = ranks();
    if (th) {
      th.click(); out.up = ranks();
      th.click(); out.down = ranks();
    }
  }
  var p = document.createElement('pre'); p.id = '__errors'; p.textContent = JSON.stringify(__errors);
  document.body.appendChild(p);
  var q = document.createElement('pre'); q.id = '__sorted'; q.textContent = JSON.stringify(out);
  document.body.appendChild(q);
})();
</script>"""

# Injected last in <body>: once the page has rendered, records the box on the page of every
# non-empty text of the charts drawn here (the Gantt chart, drawn by `timeline --svg`, aside).
MEASURE = """<script>
(function wait() {
  if (document.body.dataset.rendered !== 'yes' || document.readyState !== 'complete') {
    setTimeout(wait, 20); return;
  }
  var out = {};
  ['components', 'frontier', 'memory'].forEach(function (id) {
    var fig = document.getElementById(id);
    out[id] = Array.prototype.map.call(fig ? fig.querySelectorAll('text') : [], function (t) {
      var r = t.getBoundingClientRect();
      return [r.left, r.top, r.right, r.bottom, t.textContent.trim()];
    }).filter(function (x) { return x[4] !== ''; });
  });
  var p = document.createElement('pre'); p.id = '__texts'; p.textContent = JSON.stringify(out);
  document.body.appendChild(p);
})();
</script>"""

# A tick label: a number, with a decimal prefix and unit where the axis has one.
TICK = re.compile(r"^-?[0-9][0-9,.]*( [kMGTPEZYRQ]?(FLOP|B))?$")

# Chromium's log of what pages print to their console (`--enable-logging=stderr`): a line such
# as `[…:INFO:CONSOLE:12] "Uncaught TypeError: …", source: file:///… (12)`.
CONSOLE = re.compile(r"^\[[^\]]*:CONSOLE[^\]]*\] (.*)$", re.M)


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    message = "headless Chromium is not installed (.ci/python installs Debian's `chromium`)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def browse(browser: str, page: Path, *extra: str) -> subprocess.CompletedProcess:
    args = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--virtual-time-budget=20000",
        "--enable-logging=stderr",
        "--v=0",
        *extra,
        page.as_uri(),
    ]
    return subprocess.run(args, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    return symshard.report("gpt3-175b", devices=1024, output=tmp_path_factory.mktemp("r") / "report.html")


def test_the_report_is_one_small_file_that_fetches_nothing(report):
    html = report.read_text()
    assert report.stat().st_size < 2_000_000
    refs = set(re.findall(r"https?://[^\s\"'<>)]+", html))
    assert refs <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}, refs
    for pattern in (r"<link\b", r"<script[^>]*\bsrc=", r"<img\b", r"<iframe\b", r"@import", r"url\("):
        assert not re.search(pattern, html), pattern


def spied(browser: str, html: str, tmp_path: Path) -> tuple:
    """Renders ``html`` with the spy and the report-back scripts: (the DOM, the errors the spy
    recorded, the lines Chromium logged from the page's console, what the sort clicks saw)."""
    page = tmp_path / "spied.html"
    page.write_text(html.replace("<head>", "<head>" + SPY, 1).replace("</body>", REPORT_BACK + "</body>", 1))
    p = browse(browser, page, "--dump-dom")
    assert p.returncode == 0, p.stderr[-2000:]
    dom = p.stdout

    def pre(name: str) -> object:
        m = re.search(rf'<pre id="{name}">(.*?)</pre>', dom, re.S)
        assert m is not None, f"the page did not report {name}"
        return json.loads(html_unescape(m.group(1)))

    return dom, pre("__errors"), CONSOLE.findall(p.stderr), pre("__sorted")


def html_unescape(text: str) -> str:
    import html

    return html.unescape(text)


def test_the_spy_sees_failed_loads_and_console_errors(tmp_path):
    """The checks below can fail: a missing image, an unreachable style sheet and an uncaught
    error are each reported."""
    browser = chromium()
    page = (
        '<html><head><link rel="stylesheet" href="https://example.com/x.css"></head><body>'
        '<img src="missing.png"><script>document.body.dataset.rendered = "yes"; nosuch();</script>'
        "</body></html>"
    )
    _, errors, console, _ = spied(browser, page, tmp_path)
    assert any(e.startswith("failed to load: <img>") and "missing.png" in e for e in errors), errors
    assert any(e.startswith("failed to load: <link>") and "example.com" in e for e in errors), errors
    assert any("nosuch" in e for e in errors), errors
    assert any("Uncaught ReferenceError" in line for line in console), console


def test_the_report_renders_in_headless_chromium(report, tmp_path):
    browser = chromium()
    dom, errors, console, _ = spied(browser, report.read_text(), tmp_path)
    assert 'data-rendered="yes"' in dom, "the page's script did not finish"
    assert errors == []
    # The report logs nothing to the console: any line is an error or a warning of the page.
    assert console == []
    for chart in CHARTS:
        m = re.search(rf'<figure class="chart" id="{chart}"[^>]*>\s*<svg', dom)
        assert m, f"chart {chart} has no SVG in the rendered page"
    assert dom.count('<figure class="chart"') == len(CHARTS)
    ranking = re.search(r'<table class="sortable" id="ranking">.*?</table>', dom, re.S)
    assert ranking is not None and ranking.group(0).count("<tr>") == 20 + 1
    gantt = re.search(r'<figure class="chart" id="timeline">(.*?)</figure>', dom, re.S)
    assert gantt is not None and gantt.group(1).count("<rect") > 1000
    # The lanes name their stage and device: the last stage of the #1 strategy is drawn.
    top = symshard.rank("gpt3-175b", devices=1024, top=1).rows[0]
    last = top.pp - 1
    assert f"stage {last} · device {last * top.dp * top.tp}" in gantt.group(1)


def test_clicking_a_column_header_sorts_the_ranking(report, tmp_path):
    browser = chromium()
    html = report.read_text()
    _, errors, console, sorted_ = spied(browser, html, tmp_path)
    assert errors == [] and console == []
    # The expected orders, from the memory the report writes in each row (its `data-v`).
    table = re.search(r'<table class="sortable" id="ranking">.*?<tbody>(.*?)</tbody>', html, re.S)
    assert table is not None
    heads = re.findall(r"<th[^>]*>(.*?)</th>", re.search(r"<thead>(.*?)</thead>", table.group(0), re.S).group(1))
    col = heads.index("memory")
    rows = []
    for tr in re.findall(r"<tr>(.*?)</tr>", table.group(1), re.S):
        cells = re.findall(r'<td data-v="([^"]*)"', tr)
        rows.append((cells[0], float(cells[col])))
    assert len(rows) == 20
    shown = [r for r, _ in rows]
    up = [r for r, _ in sorted(rows, key=lambda x: x[1])]
    down = [r for r, _ in sorted(rows, key=lambda x: -x[1])]
    assert up != shown, "the ranking is already in memory order: the click would show nothing"
    assert sorted_ == {"before": shown, "up": up, "down": down}


def test_the_screenshot_shows_the_charts(report, tmp_path):
    image = pytest.importorskip("PIL.Image")
    browser = chromium()
    shot = tmp_path / "report.png"
    p = browse(browser, report, "--hide-scrollbars", "--window-size=1300,4300", f"--screenshot={shot}")
    assert p.returncode == 0 and shot.is_file(), p.stderr[-2000:]
    img = image.open(shot).convert("RGB")
    assert img.size == (1300, 4300)
    colours = img.getcolors(maxcolors=1 << 24)
    assert colours is not None
    total = img.size[0] * img.size[1]
    white = sum(n for n, px in colours if px == (255, 255, 255))
    assert total - white > 0.05 * total, "the screenshot is blank"

    def near(rgb: tuple) -> int:
        return sum(n for n, px in colours if all(abs(a - b) <= 24 for a, b in zip(px, rgb)))

    # Compute bars and forward passes (#4e79a7), backward passes (#59a14f), tensor-parallel
    # collectives (#b07aa1), the capacity line (red): each must cover a visible area.
    for rgb, least in (((0x4E, 0x79, 0xA7), 20000), ((0x59, 0xA1, 0x4F), 2000), ((0xB0, 0x7A, 0xA1), 20000), ((0xFF, 0, 0), 500)):
        assert near(rgb) > least, f"colour {rgb} barely drawn"
    keep = os.environ.get("SYMSHARD_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)


def measured(browser: str, html: str, tmp_path: Path) -> dict:
    """The boxes on the rendered page of the charts' texts: ``{chart: [[left, top, right,
    bottom, text], …]}``."""
    page = tmp_path / "measured.html"
    page.write_text(html.replace("</body>", MEASURE + "</body>", 1))
    p = browse(browser, page, "--dump-dom", "--window-size=1300,4300")
    assert p.returncode == 0, p.stderr[-2000:]
    m = re.search(r'<pre id="__texts">(.*?)</pre>', p.stdout, re.S)
    assert m is not None, "the page did not report its texts"
    return json.loads(html_unescape(m.group(1)))


def test_chart_labels_exist_on_every_axis_and_do_not_overlap(report, tmp_path):
    """As the browser lays them out: the components chart and both panels of the memory-versus-
    cost chart (the frontier, the rows shown close up) have a row of x tick labels and a column
    of y tick labels, the memory bar its x ticks; no two texts of a chart overlap."""
    from collections import Counter

    browser = chromium()
    texts = measured(browser, report.read_text(), tmp_path)
    # (rows of x ticks, panels with a column of y ticks) each chart must have.
    axes = {"components": (1, 1), "frontier": (2, 2), "memory": (1, 0)}
    assert set(texts) == set(axes)
    for chart, boxes in texts.items():
        assert boxes, f"{chart} has no text"
        for i, a in enumerate(boxes):
            for b in boxes[i + 1 :]:
                wide = min(a[2], b[2]) - max(a[0], b[0])
                high = min(a[3], b[3]) - max(a[1], b[1])
                assert wide <= 1 or high <= 1, f"{chart}: {a[4]!r} {a[:4]} overlaps {b[4]!r} {b[:4]}"
        # x ticks share their top, y ticks their right edge (one column for both panels of the
        # frontier chart: each panel's y ticks lie above its row of x ticks).
        ticks = [b for b in boxes if TICK.match(b[4])]
        tops = Counter(round(b[1]) for b in ticks)
        rows = sorted(top for top, n in tops.items() if n >= 3)
        rights = Counter(round(b[2]) for b in ticks)
        y_ticks = [b for b in ticks if rights[round(b[2])] >= 3 and round(b[1]) not in rows]
        want_rows, want_columns = axes[chart]
        assert len(rows) >= want_rows, f"{chart}: x ticks {tops}"
        for above, row in zip([float("-inf")] + rows, rows[:want_columns]):
            panel = [b for b in y_ticks if above < b[1] < row]
            assert len(panel) >= 3, f"{chart}: y ticks above {row}: {panel}"
