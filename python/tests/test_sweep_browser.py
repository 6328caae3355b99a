"""A sweep's pictures (`symshard report --sweep`) in headless Chromium: they render without a
console error, and every chart has labels on both axes that do not overlap."""

from __future__ import annotations

import re
from pathlib import Path

from symshard import _native
from test_browser import browse, chromium, spied

SPEC = """\
models: [gpt3-125m]
devices: [8, 16]
machines: [a100-80gb, h100-sxm]
precisions: [bf16]
price_per_gpu_hour: {a100-80gb: 1.5, h100-sxm: 2.5}
"""

MEASURE = """<script>
(function () {
  var out = {};
  ['scaling', 'hours', 'pareto'].forEach(function (id) {
    var fig = document.getElementById(id);
    out[id] = Array.prototype.map.call(fig.querySelectorAll('text'), function (t) {
      var r = t.getBoundingClientRect();
      return [r.left, r.top, r.right, r.bottom, t.textContent.trim()];
    }).filter(function (x) { return x[4] !== ''; });
  });
  var p = document.createElement('pre'); p.id = '__texts'; p.textContent = JSON.stringify(out);
  document.body.appendChild(p);
})();
</script>"""


def sweep_page(tmp_path: Path) -> Path:
    (tmp_path / "spec.yaml").write_text(SPEC)
    out = tmp_path / "s.parquet"
    _native.run_json(["sweep", str(tmp_path / "spec.yaml"), "-o", str(out), "--jobs", "1"])
    page = tmp_path / "s.html"
    _native.run_json(["report", "--sweep", str(out), "-o", str(page)])
    return page


def test_the_sweep_report_renders_without_errors(tmp_path):
    browser = chromium()
    page = sweep_page(tmp_path)
    dom, errors, console, _ = spied(browser, page.read_text(), tmp_path)
    assert errors == []
    assert console == []
    for chart in ("scaling", "hours", "pareto"):
        assert re.search(rf'<figure id="{chart}">\s*<svg', dom), chart
    assert '<table class="heat">' in dom


def test_the_sweep_charts_label_both_axes_without_overlap(tmp_path):
    import html as h
    import json

    browser = chromium()
    page = sweep_page(tmp_path)
    measured = tmp_path / "measured.html"
    measured.write_text(page.read_text().replace("</body>", MEASURE + "</body>", 1))
    p = browse(browser, measured, "--dump-dom")
    assert p.returncode == 0, p.stderr[-2000:]
    m = re.search(r'<pre id="__texts">(.*?)</pre>', p.stdout, re.S)
    assert m is not None
    texts = json.loads(h.unescape(m.group(1)))
    for chart, boxes in texts.items():
        names = [b[4] for b in boxes]
        # The device counts on the scaling chart's x axis; numbers on every other axis.
        if chart in ("scaling", "hours"):
            assert "8" in names and "16" in names, names
        numeric = [n for n in names if re.match(r"^[0-9][0-9.]*( [kMG])?$", n)]
        assert len(numeric) >= 4, (chart, names)
        for i, a in enumerate(boxes):
            for b in boxes[i + 1 :]:
                overlap = a[0] < b[2] - 0.5 and b[0] < a[2] - 0.5 and a[1] < b[3] - 0.5 and b[1] < a[3] - 0.5
                assert not overlap, (chart, a, b)
