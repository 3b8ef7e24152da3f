"""A headless Chromium driven by Selenium: what opens report.html as a reader would (the browser test,
``leanlm report-page --screenshot``).

Debian's ``chromium`` and ``chromium-driver`` (scripts/setup.sh installs them) and the ``selenium`` package
(the dev extra). The driver is named explicitly, so Selenium never looks for one on the network (its
"Selenium Manager"), and Chromium starts with a new empty profile and its background traffic off: a page
that loads a remote resource fails the test instead of fetching it.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from leanlm.errors import LeanLMError

CHROMIUM_NAMES = ("chromium", "chromium-browser")
DRIVER_NAMES = ("chromedriver",)
# --no-sandbox: Chromium refuses to run as root with its sandbox (CI containers and this project's machines
# run as root); the rest keep a test run offline and free of first-run dialogs.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage")
WINDOW = (1280, 900)  # the browser's window and the front page's screenshot (its viewport), in px


def _which(names: tuple[str, ...]) -> str | None:
    return next((path for path in map(shutil.which, names) if path), None)


def missing() -> str | None:
    """What is missing to drive a browser (a sentence naming it and how to install it), or None."""
    absent = [what for what, names in (("chromium", CHROMIUM_NAMES), ("chromedriver", DRIVER_NAMES))
              if not _which(names)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        absent.append("the selenium package")
    if not absent:
        return None
    return (f"{' and '.join(absent)} not found: install them with scripts/setup.sh (Debian: apt-get install "
            "chromium chromium-driver; pip install the dev extra)")


@contextlib.contextmanager
def chromium(window: tuple[int, int] = WINDOW) -> Iterator:
    """A Selenium driver of headless Chromium with the browser's console log kept; the browser and its
    driver are quit, and its profile folder removed, however the block ends."""
    problem = missing()
    if problem:
        raise LeanLMError(problem)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory(prefix="leanlm-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = _which(CHROMIUM_NAMES)
        for flag in FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={profile}")
        options.add_argument(f"--window-size={window[0]},{window[1]}")
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(service=Service(executable_path=_which(DRIVER_NAMES)), options=options)
        try:
            yield driver
        finally:
            driver.quit()  # ends Chromium and chromedriver; the profile folder goes with the with-block


def screenshot(page: str | Path, out: str | Path) -> Path:
    """Save a PNG of the first screen of ``page`` (an HTML file opened from disk) to ``out``."""
    page, out = Path(page).resolve(), Path(out)
    if not page.is_file():
        raise LeanLMError(f"{page} does not exist: build it first (leanlm report-page)")
    from leanlm.io import atomic_path

    with chromium() as driver:
        # the page's viewport exactly WINDOW (a window of that size has a smaller one in headless mode)
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": WINDOW[0], "height": WINDOW[1], "deviceScaleFactor": 1, "mobile": False})
        driver.get(page.as_uri())
        with atomic_path(out, suffix=".png") as tmp:
            if not driver.save_screenshot(str(tmp)):
                raise LeanLMError(f"Chromium could not save a screenshot of {page} to {out}")
    return out
