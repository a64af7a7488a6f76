"""Serve the dashboard and photograph every page in headless Chromium (Playwright driving the system browser).

Regenerate the dashboard's screenshots (docs/dashboard.md): every page of ``dashboard.app.PAGES``, on a real study of
the built-in task. docs/dashboard.md's come from a local run of the quickstart (``ppo-tune run
studies/quickstart.yaml --workers 2``, then ``ppo-tune validate quickstart --workers 2``); without ``--storage`` the
tool photographs tools.real_studies' small validated study, built into ``$PPO_TUNE_CACHE`` on first use::

    python -m tools.screenshots --storage sqlite:///studies/quickstart.db --study quickstart --select 18,16,0,20
    python -m tools.screenshots                       # the small real study; writes docs/screenshots/<page>.png

It prints docs/dashboard.md's tables of the pages it wrote. The browser test uses the same functions on the real
studies.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dashboard.app import PAGES
from dashboard.serve import STORAGE_ENV, stop, streamlit_command
from tools.real_studies import HELDOUT, cached_set

if TYPE_CHECKING:  # Playwright is a test dependency; only this tool uses it
    from playwright.sync_api import Page, ViewportSize

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync")
DOCS_DIR = Path(__file__).resolve().parent.parent / "docs" / "screenshots"
VIEWPORT: ViewportSize = {"width": 1440, "height": 1100}
# The page scrolls inside Streamlit's main container, so a full-page screenshot needs a viewport that tall.
CONTENT_HEIGHT_SCRIPT = """() => Math.max(
    ...Array.from(document.querySelectorAll('[data-testid="stMain"], section, div'), (e) => e.scrollHeight))"""
MAX_HEIGHT = 5000
TABLE_COLUMNS = 4  # screenshots to a row of docs/dashboard.md's tables
# Streamlit is idle when its "Running..." status widget is gone and no element is still a loading skeleton.
IDLE_SCRIPT = """() => !document.querySelector('[data-testid="stStatusWidget"]')
    && !document.querySelector('[data-testid="stSkeleton"]')"""


@dataclass(frozen=True)
class PageCapture:
    slug: str
    title: str
    text: str
    screenshot: Path
    exceptions: int
    charts: int


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def port_in_use(port: int) -> bool:
    """Whether something on 127.0.0.1 holds ``port`` (it cannot be bound)."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _wait_healthy(base_url: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"streamlit exited with status {process.returncode} before serving")
        try:
            with urllib.request.urlopen(f"{base_url}/_stcore/health", timeout=2) as response:
                if response.read().strip() == b"ok":
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"streamlit did not answer on {base_url} within {timeout:g} s")


@contextlib.contextmanager
def serve(storage: str, port: int | None = None, log: Path | None = None, timeout: float = 90) -> Iterator[str]:
    """Run ``streamlit run dashboard/app.py`` on localhost against ``storage``; yields the base URL. A port already
    in use is refused at once, in one line, rather than waited on until ``timeout``."""
    if port is not None and port_in_use(port):
        raise RuntimeError(f"port {port} is in use on 127.0.0.1: streamlit cannot serve there")
    port = port or free_port()
    # The command `ppo-tune dashboard` runs, so the pages are photographed as users see them.
    command = streamlit_command(argparse.Namespace(host="127.0.0.1", port=port))
    environment = {**os.environ, STORAGE_ENV: storage}
    with contextlib.ExitStack() as stack:
        output = stack.enter_context(open(log, "wb")) if log else subprocess.DEVNULL
        process = subprocess.Popen(command, env=environment, stdout=output, stderr=subprocess.STDOUT)
        base_url = f"http://127.0.0.1:{port}"
        try:
            _wait_healthy(base_url, process, timeout)
            yield base_url
        finally:
            stop(process, timeout=15)


def _settle(page: Page, title: str, timeout_ms: int) -> None:
    page.get_by_role("heading", name=title, exact=True).first.wait_for(timeout=timeout_ms)
    # Idle twice, a moment apart: the page may rerun once after its first paint (query params, widgets),
    # and charts draw just after the script ends.
    for pause_ms in (400, 300):
        page.wait_for_function(IDLE_SCRIPT, timeout=timeout_ms)
        page.wait_for_timeout(pause_ms)


def capture_pages(
    base_url: str, out_dir: Path, study: str | None = None, pages: Sequence[tuple[str, str, str]] = PAGES,
    timeout_ms: int = 60_000, tall: bool = True, selected: Sequence[int] = (),
) -> list[PageCapture]:
    """Open every page in headless Chromium, wait until it has rendered, and screenshot it.

    ``tall`` grows the window to the page's height first, so the screenshot shows all of it.
    """
    from playwright.sync_api import sync_playwright

    out_dir.mkdir(parents=True, exist_ok=True)
    parameters = {"study": study, "trials": ",".join(str(n) for n in selected)}
    query = "?" + urllib.parse.urlencode({k: v for k, v in parameters.items() if v})
    captures = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS), headless=True)
        try:
            page = browser.new_context(viewport=VIEWPORT, device_scale_factor=1).new_page()
            # One tab, loaded once, then each page reached through the sidebar's links as a user moves between
            # them (which also checks that the links keep the study and the selection): loading Streamlit's
            # scripts afresh for every page cost twice the wall time and a third more CPU.
            first = pages[0][0]
            page.goto(f"{base_url}/{'' if first == PAGES[0][0] else first}{query}", wait_until="commit")
            for index, (slug, title, _icon) in enumerate(pages):
                if index:
                    page.set_viewport_size(VIEWPORT)
                    page.locator(f'[data-testid="stSidebarNavLink"][href$="/{slug}"]').click(timeout=timeout_ms)
                _settle(page, title, timeout_ms)
                height = min(int(page.evaluate(CONTENT_HEIGHT_SCRIPT)) + 40, MAX_HEIGHT)
                if tall and height > VIEWPORT["height"]:
                    page.set_viewport_size({"width": VIEWPORT["width"], "height": height})
                    _settle(page, title, timeout_ms)
                path = out_dir / f"{slug}.png"
                page.screenshot(path=str(path))
                captures.append(PageCapture(
                    slug, title, page.inner_text("body"), path,
                    page.locator('[data-testid="stException"]').count(),
                    page.locator(".js-plotly-plot").count(),
                ))
        finally:
            browser.close()
    return captures


def screenshot_tables(pages: Sequence[tuple[str, str, str]] = PAGES, directory: str = "screenshots",
                      columns: int = TABLE_COLUMNS) -> str:
    """docs/dashboard.md's Markdown tables of the pages' screenshots, ``columns`` to a row, in the navigation's order;
    ``directory`` is where the images are, relative to that page."""
    tables = []
    for start in range(0, len(pages), columns):
        row = pages[start:start + columns]
        tables.append("\n".join([
            "| " + " | ".join(title for _, title, _ in row) + " |",
            "|" + "---|" * len(row),
            "| " + " | ".join(f"![{title}]({directory}/{slug}.png)" for slug, title, _ in row) + " |",
        ]))
    return "\n\n".join(tables)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.screenshots", description=__doc__.splitlines()[0])
    parser.add_argument("--storage", default=None,
                        help="Study storage URL (default: tools.real_studies' set, built on first use).")
    parser.add_argument("--study", default=None, help="Study to open (default: the first; with the default "
                        f"storage, {HELDOUT}).")
    parser.add_argument("--select", default="", help="Trials to highlight, e.g. 3,7; the Compare page compares "
                        "them (default: none; with the default storage, 0,1).")
    parser.add_argument("--out", type=Path, default=DOCS_DIR, help=f"Where to write <page>.png (default {DOCS_DIR}).")
    args = parser.parse_args(argv)
    storage, study, selected = args.storage, args.study, [int(n) for n in args.select.split(",") if n.strip()]
    if storage is None:
        storage, study, selected = cached_set(), study or HELDOUT, selected or [0, 1]
    with tempfile.TemporaryDirectory() as scratch, serve(storage, log=Path(scratch) / "streamlit.log") as base_url:
        for capture in capture_pages(base_url, args.out, study, selected=selected):
            print(f"{capture.screenshot}  ({capture.charts} charts, {capture.exceptions} exceptions)")
    print(screenshot_tables())
    return 0


if __name__ == "__main__":
    sys.exit(main())
