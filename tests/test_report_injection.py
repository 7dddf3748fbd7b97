"""A report is safe to open whatever JSON it came from (issue 9).

Every string of a result (family names, workload, model, reasons, machine names, ...)
carries a `</script>` breakout and a `"onmouseover=` attribute breakout. The page is
rendered by `provision report` and opened in headless Chromium (as in
test_report_browser.py); the hover labels of every chart are triggered, and no injected
script ran, no element carries an event-handler attribute, no chart id came from a name.
"""

from __future__ import annotations

import json
import re

import pytest

from test_report_browser import CHROMIUM, LAUNCH_ARGS, _sync_playwright
from test_reports import fixture_result

MARK = "data-pwned"
PAYLOAD = (f"</script><script>document.body.setAttribute('{MARK}','script')</script>"
           f"\"onmouseover=\"document.body.setAttribute('{MARK}','attr')\" x='<img src=x onerror=alert(1)>")
SEMANTIC_KEYS = {"goal"}   # a closed vocabulary, validated: poisoning it is refused, not rendered

INSPECT_JS = """
(mark) => {
  const handlers = [];
  for (const el of document.querySelectorAll('*')) {
    for (const a of el.attributes) {
      if (a.name.startsWith('on')) handlers.push(el.tagName + '.' + a.name);
    }
  }
  const injected = Array.from(document.scripts).filter(s => s.text.trim().startsWith('document.body'));
  return {pwned: document.body.getAttribute(mark), marked: document.querySelectorAll('[' + mark + ']').length,
          handlers, injected: injected.length, imgs: document.querySelectorAll('img').length,
          ids: Array.from(document.querySelectorAll('.chart .js-plotly-plot')).map(g => g.id)};
}
"""


def poison(x, key=None):
    """A copy of a JSON value with PAYLOAD appended to every string (keys kept)."""
    if isinstance(x, dict):
        return {k: (v if k in SEMANTIC_KEYS else poison(v, k)) for k, v in x.items()}
    if isinstance(x, list):
        return [poison(v, key) for v in x]
    return x + PAYLOAD if isinstance(x, str) else x


def test_poisoned_strings_are_escaped_in_every_context(tmp_path):
    from provisioner.cli import run

    result = poison(fixture_result(("splitwise-hh", "baseline-h100")))
    src, out = tmp_path / "r.json", tmp_path / "r.html"
    src.write_text(json.dumps(result))
    assert run(["report", str(src), "--out", str(out)]) == 0
    html = out.read_text()
    assert "<script>document.body" not in html          # never a raw breakout in the file
    assert not re.search(r'<[^>]*\s"?onmouseover=', html)
    assert not re.search(r'id="[^"]*(script|onmouseover)', html)


@pytest.mark.slow
def test_poisoned_report_runs_no_injected_code_in_a_browser(tmp_path):
    sync_playwright = _sync_playwright()
    result = poison(fixture_result(("splitwise-hh", "baseline-h100")))
    out = tmp_path / "r.html"
    from reports import write_report

    write_report(result, out)
    errors = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        try:
            page = browser.new_context(viewport={"width": 1400, "height": 1000}, offline=True).new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("dialog", lambda d: (errors.append(f"dialog: {d.message}"), d.dismiss()))
            page.goto(out.as_uri(), wait_until="load")
            page.wait_for_function("() => document.querySelectorAll('.chart svg.main-svg').length >= 5",
                                   timeout=30_000)
            for box in [c.bounding_box() for c in page.query_selector_all(".chart .js-plotly-plot")]:
                if box is None:
                    continue
                for fx, fy in ((0.5, 0.5), (0.3, 0.6), (0.7, 0.4)):   # hover labels carry names
                    page.mouse.move(box["x"] + fx * box["width"], box["y"] + fy * box["height"])
                    page.wait_for_timeout(50)
            seen = page.evaluate(INSPECT_JS, MARK)
        finally:
            browser.close()
    assert seen["pwned"] is None and seen["marked"] == 0, seen
    assert seen["handlers"] == [] and seen["injected"] == 0 and seen["imgs"] == 0, seen
    assert seen["ids"] and all(re.fullmatch(r"chart-\d+", i) for i in seen["ids"]), seen["ids"]
    assert not errors, errors
