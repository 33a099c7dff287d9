"""The `stats --html` report opens in headless Chromium (Debian's package): the charts render (bar colours on the
screenshot, SVG rects in the DOM) and the page logs no console error. The set-up installs `chromium` with apt-get
where it can (root, apt-get present); elsewhere the test skips, saying why."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from statekit.savepoint.stats import savepoint_stats
from statekit.savepoint.stats_html import render_html, write_report

pytestmark = pytest.mark.slow

CASE = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "2.3.0" / "long-hashmap-canonical" / "savepoint"
BLUE, ORANGE = (0x4A, 0x7F, 0xB5), (0xD9, 0x82, 0x2B)  # .bar and .bar2 of the report's style


@pytest.fixture(scope="module")
def chromium() -> str:
    """Debian's chromium, installed by apt-get when missing and possible."""
    found = shutil.which("chromium")
    if found:
        return found
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        pytest.skip("headless Chromium is not installed and cannot be here (needs root and apt-get: "
                    "apt-get install chromium)")
    proc = subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], capture_output=True, text=True,
                          env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"), timeout=900)
    found = shutil.which("chromium")
    if proc.returncode != 0 or not found:
        pytest.skip(f"apt-get install chromium failed here ({proc.returncode}): {proc.stderr.strip()[-300:]}")
    return found


def _run(chromium: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--disable-extensions", "--enable-logging=stderr", "--v=0", *args],
                          capture_output=True, text=True, timeout=120)


def test_report_renders_in_headless_chromium(chromium, tmp_path):
    pytest.importorskip("PIL", reason="Pillow reads the screenshot")
    from PIL import Image

    page = tmp_path / "report.html"
    write_report(page, render_html(savepoint_stats(CASE, top=3), parallelism=3))
    url = page.resolve().as_uri()
    shot = tmp_path / "shot.png"
    r = _run(chromium, f"--screenshot={shot}", "--window-size=1100,4000", url)
    assert shot.is_file() and shot.stat().st_size > 0, r.stderr[-2000:]
    console = [ln for ln in r.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert not console, console
    img = Image.open(shot).convert("RGB")
    colours = img.getcolors(maxcolors=1 << 20) or []
    count = {c: n for n, c in colours}
    assert count.get(BLUE, 0) > 2000, "the blue bars of the charts are not on the screenshot"
    assert count.get(ORANGE, 0) > 500, "the per-subtask bars (at parallelism 3) are not on the screenshot"
    dom = _run(chromium, "--dump-dom", url).stdout
    assert dom.count("<svg") >= 5 and dom.count("<rect") >= 20
