"""Headless Chromium for tests of the HTML outputs (Debian's chromium driven by Playwright;
no browser download). Pages are opened from file:// with the network blocked, so a page
that needs the network fails its test."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("IRBRIDGE_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def require_tool(path_or_name: str, package: str) -> str:
    """The tool's path. Missing: a failure in CI (the setup installs it), a skip naming
    the setup command elsewhere."""
    found = shutil.which(path_or_name)
    if found:
        return found
    message = f"{path_or_name} not found: run `bash tools/setup-system.sh` (Debian {package})"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@dataclass
class PageLog:
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return self.console_errors + self.page_errors


@contextmanager
def open_page(path: Path, *, width: int = 1400, height: int = 900) -> Iterator[tuple[object, PageLog]]:
    """Open a local HTML file in headless Chromium; yield (playwright Page, PageLog).
    Any request that is not file:// or data: is recorded and aborted."""
    from playwright.sync_api import sync_playwright

    executable = require_tool(CHROMIUM, "chromium")
    log = PageLog()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})

            def route(r: object) -> None:
                url = r.request.url  # type: ignore[attr-defined]
                if url.startswith(("file:", "data:", "blob:")):
                    r.continue_()  # type: ignore[attr-defined]
                else:
                    log.requests.append(url)
                    r.abort()  # type: ignore[attr-defined]

            page.route("**/*", route)
            page.on("console", lambda m: log.console_errors.append(m.text)
                    if m.type == "error" else None)
            page.on("pageerror", lambda e: log.page_errors.append(str(e)))
            page.goto(path.resolve().as_uri())
            page.wait_for_load_state("load")
            yield page, log
        finally:
            browser.close()
