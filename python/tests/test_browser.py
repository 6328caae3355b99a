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

SPY = """<script>
window.__errors = [];
window.addEventListener('error', function (e) { __errors.push('error: ' + e.message); });
window.addEventListener('unhandledrejection', function (e) { __errors.push('rejection: ' + e.reason); });
var __ce = console.error;
console.error = function () { __errors.push('console.error: ' + Array.prototype.join.call(arguments, ' ')); __ce.apply(console, arguments); };
</script>"""

REPORT_BACK = """<script>
(function wait() {
  if (document.body.dataset.rendered !== 'yes') { setTimeout(wait, 20); return; }
  var p = document.createElement('pre'); p.id = '__errors'; p.textContent = JSON.stringify(__errors);
  document.body.appendChild(p);
})();
</script>"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    message = "headless Chromium is not installed (.ci/browser installs Debian's `chromium`)"
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


def test_the_report_renders_in_headless_chromium(report, tmp_path):
    browser = chromium()
    html = report.read_text()
    spied = tmp_path / "spied.html"
    spied.write_text(html.replace("<head>", "<head>" + SPY, 1).replace("</body>", REPORT_BACK + "</body>", 1))
    p = browse(browser, spied, "--dump-dom")
    assert p.returncode == 0, p.stderr[-2000:]
    dom = p.stdout
    assert 'data-rendered="yes"' in dom, "the page's script did not finish"
    errors = re.search(r'<pre id="__errors">(.*?)</pre>', dom, re.S)
    assert errors is not None
    assert json.loads(errors.group(1).replace("&quot;", '"')) == []
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
