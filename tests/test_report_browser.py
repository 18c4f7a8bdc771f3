"""The report page in a real browser (Debian's chromium, headless): every figure decodes and the
page logs no error. Skips only where chromium is not installed (.ci/run installs it)."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from optbench.report.synthetic import synthetic_trials
from optbench.report.writer import write_report
from optbench.spec.schema import parse_spec

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.slow,  # a headless browser per page
    pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install chromium)"),
]

MODELS = ["vit_p_w64_16px", "vit_c_w64_16px"]

# Put first in <head>: records errors (scripts, failed resources, console.error) and, once the
# page has loaded, writes what it saw of each image into the DOM that --dump-dom prints.
PROBE = """<script>
window.__errors = [];
window.addEventListener("error", (e) => window.__errors.push(
  e.message || ("failed to load " + (e.target && e.target.tagName))), true);
const consoleError = console.error;
console.error = (...args) => { window.__errors.push(args.join(" ")); consoleError(...args); };
window.addEventListener("load", () => {
  const images = [...document.images].map((i) => ({alt: i.alt, width: i.naturalWidth}));
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify({images, errors: window.__errors});
  document.body.appendChild(out);
});
</script>"""


def browse(page: Path, tmp_path: Path) -> dict:
    """Open `page` in headless chromium; what the probe saw: images and errors."""
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text().replace("<head>", "<head>" + PROBE, 1))
    flags = ["--headless", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000"]  # fmt: skip
    if os.geteuid() == 0:
        flags.append("--no-sandbox")  # chromium refuses to run as root with its sandbox
    done = subprocess.run(
        [CHROMIUM, *flags, "--dump-dom", probed.as_uri()],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, re.DOTALL)
    assert found, f"the page did not finish loading: {done.stdout[-500:]}"
    return json.loads(html.unescape(found.group(1)))


def test_every_figure_of_the_page_decodes_and_it_logs_no_error(tmp_path):
    spec = parse_spec({
        "name": "tiny", "dataset": {"name": "digits", "img_size": 16}, "models": MODELS,
        "optimizers": ["adamw", "sgd"], "epochs": [5, 10], "batch_size": 64,
        "search": {"n_samples": 4, "ranges": {
            "adamw": {"lr": [2.5e-4, 8e-3], "wd": [0.02, 0.8]},
            "sgd": {"lr": [0.1, 3.2], "wd": [4e-6, 1.2e-4]}}},
    })  # fmt: skip
    trials = synthetic_trials(MODELS, ["adamw", "sgd"], [5, 10], 4, seed=1)
    out = tmp_path / "report"
    write_report(spec, trials, out, n_boot=20, data_shape=(10, 1, 16))
    seen = browse(out / "index.html", tmp_path)
    assert seen["errors"] == []
    assert sorted(i["alt"] for i in seen["images"]) == sorted(p.stem for p in out.glob("*.png"))
    # Two models, two optimizers and two lengths: the EDFs, the scatter, the tunability view,
    # the length and optimizer comparisons, each drawn (a figure missing from the page fails).
    expected = {"edf", "edf_raw", "scatter", "tunability", "length", "optimizer"}
    assert expected <= {i["alt"] for i in seen["images"]}
    assert all(i["width"] > 0 for i in seen["images"])


def test_a_broken_figure_is_caught(tmp_path):
    page = tmp_path / "broken.html"
    page.write_text(
        "<!doctype html><html><head><meta charset='utf-8'></head><body>"
        "<img alt='edf' src='data:image/png;base64,iVBORw0KGgoAAAA='></body></html>"
    )
    seen = browse(page, tmp_path)
    assert seen["images"] == [{"alt": "edf", "width": 0}] and seen["errors"]
