"""Headless Chromium for the browser tests (the console's story, the docs site): Debian's chromium and its
chromedriver, which ``scripts/install.sh dev`` installs as root; a test without them skips."""

from __future__ import annotations

import shutil
from typing import Any

import pytest


def headless_chromium() -> Any:
    """A selenium driver of headless Chromium at 1400x1000; skips the calling test where there is none."""
    if shutil.which("chromedriver") is None or shutil.which("chromium") is None:
        pytest.skip("no chromium / chromedriver (scripts/install.sh dev installs them as root)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
