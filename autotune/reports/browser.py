"""Render a report in headless Chromium: a screenshot and the page's console messages.

Used by the browser test and by anyone who wants a picture of a report (a CI
artifact, a bug report) without a display. Chromium runs with a fresh profile and
with every background service off, so it never reaches for the network.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

FLAGS = (
    "--headless",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--enable-logging=stderr",
    "--v=0",
)

# Chromium logs every console message of the page as "[...:INFO:CONSOLE:1] "text", source: url",
# at INFO whatever the message's own level, so errors are told apart by their text.
CONSOLE = re.compile(r":[A-Z]+:CONSOLE[^\]]*\]\s*(?P<message>.*)")
ERROR_WORDS = re.compile(r"Uncaught|Error|Failed|Refused|Not allowed|net::ERR_")


@dataclass(frozen=True)
class Rendering:
    screenshot: Path
    console: tuple[str, ...]  # every console message the page logged
    errors: tuple[str, ...]  # those that report a failure (uncaught exceptions, refused loads)
    returncode: int


def find_chromium() -> str | None:
    """Path of a Chromium-family browser, or None."""
    configured = os.environ.get("AUTOTUNE_CHROMIUM")
    if configured:
        return shutil.which(configured) or configured
    return next((path for path in map(shutil.which, CANDIDATES) if path), None)


def render(html: Path, screenshot: Path, *, width: int = 1280, height: int = 2400,
           browser: str | None = None, timeout: float = 90.0) -> Rendering:
    """Load ``html`` in headless Chromium and save a ``width x height`` screenshot."""
    browser = browser or find_chromium()
    if not browser:
        raise FileNotFoundError("no Chromium found (Debian: apt-get install chromium)")
    screenshot = Path(screenshot).resolve()
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    screenshot.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="autotune-chromium-") as profile:
        argv = [browser, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
                f"--screenshot={screenshot}", Path(html).resolve().as_uri()]
        if os.geteuid() == 0:
            argv.insert(1, "--no-sandbox")  # Chromium refuses to start as root with its sandbox
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                env={**os.environ, "HOME": profile})
    console, errors = [], []
    for line in result.stderr.splitlines():
        match = CONSOLE.search(line)
        if match:
            console.append(match["message"])
            if ERROR_WORDS.search(match["message"]):
                errors.append(match["message"])
    return Rendering(screenshot, tuple(console), tuple(errors), result.returncode)


# A probe appended to a copy of the page (the report itself runs no script): after
# layout it writes what overflows into <body data-...> for --dump-dom to show.
_LAYOUT_PROBE = """
<script>
addEventListener("load", () => {
  const viewport = document.documentElement.clientWidth;
  const wide = [];
  for (const el of document.querySelectorAll("body *")) {
    // Inside a scroll box an element may be wider than the window: the box scrolls, the page does not.
    if (el.parentElement.closest(".scroll")) continue;
    const box = el.getBoundingClientRect();
    if (box.width && box.right > viewport + 0.5)
      wide.push(`${el.tagName.toLowerCase()}${el.id ? "#" + el.id : ""} right=${Math.round(box.right)}`);
  }
  const scales = [...document.querySelectorAll("figure.heatmap img")]
    .map(img => img.naturalWidth ? img.getBoundingClientRect().width / img.naturalWidth : 0);
  document.body.dataset.viewport = viewport;
  document.body.dataset.pageWidth = document.documentElement.scrollWidth;
  document.body.dataset.overflow = wide.slice(0, 20).join("; ");
  document.body.dataset.heatmapScale = scales.length ? Math.min(...scales).toFixed(3) : "";
});
</script>
"""


@dataclass(frozen=True)
class Layout:
    viewport: int  # CSS px the page was laid out in
    page_width: int  # the document's scroll width: above viewport, the page scrolls sideways
    overflow: tuple[str, ...]  # elements reaching past the window's right edge (outside scroll boxes)
    heatmap_scale: float | None  # smallest displayed/natural width of the heatmap images (1.0: unscaled)


def layout(html: Path, *, width: int = 800, height: int = 1000, browser: str | None = None,
           timeout: float = 90.0) -> Layout:
    """Lay ``html`` out in headless Chromium ``width`` px wide and report what does not fit."""
    browser = browser or find_chromium()
    if not browser:
        raise FileNotFoundError("no Chromium found (Debian: apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="autotune-chromium-") as profile:
        probe = Path(profile) / "probe.html"
        page = Path(html).read_text()
        probe.write_text(page.replace("</body>", _LAYOUT_PROBE + "</body>", 1))
        argv = [browser, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
                "--virtual-time-budget=10000", "--dump-dom", probe.as_uri()]
        if os.geteuid() == 0:
            argv.insert(1, "--no-sandbox")
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                env={**os.environ, "HOME": profile})
    body = re.search(r"<body([^>]*)>", result.stdout)
    if not body:
        raise RuntimeError(f"Chromium printed no page (exit {result.returncode}): {result.stderr[-500:]}")
    attrs = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', body.group(1)))
    if "viewport" not in attrs:
        raise RuntimeError("the layout probe did not run")
    scale = attrs.get("heatmap-scale", "")
    overflow = tuple(s for s in attrs.get("overflow", "").replace("&gt;", ">").split("; ") if s)
    return Layout(int(attrs["viewport"]), int(attrs["page-width"]), overflow, float(scale) if scale else None)
