"""The docs site builds in strict mode and renders: its home, a how-to guide and a reference page, opened in
headless Chromium, show their title, navigation and body text. Screenshots go to test-artifacts/docs/."""

from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser import headless_chromium

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "docs"
# page, its title, a phrase from its body
PAGES = [
    ("", "vla_recover", "is an operator-hour better spent supervising a fleet"),
    ("how-to/collect-and-train/", "Collect and train", "Scripted experts record demonstrations"),
    ("reference/config/", "Configuration", "first held-out seed; fleet seeds must stay below it"),
]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site_dir = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env["NO_MKDOCS_2_WARNING"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-5000:]}"
    return site_dir


def test_the_site_has_every_page_and_generated_references(site: Path) -> None:
    cli = (site / "reference" / "cli" / "index.html").read_text()
    assert "vla-recover loop" in cli and "--method" in cli  # from the Typer app itself
    api = (site / "reference" / "api" / "envs" / "index.html").read_text()
    assert "register_task" in api  # a mapped package's docstrings (envs/ installs as vla_recover.envs)
    config = (site / "reference" / "config" / "index.html").read_text()
    assert "human_s_per_round" in config


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()


@pytest.mark.browser
def test_pages_render_in_chromium(served: str) -> None:
    driver = headless_chromium()
    from selenium.webdriver.common.by import By

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        for path, title, phrase in PAGES:
            driver.get(served + path)
            assert driver.find_element(By.TAG_NAME, "h1").text.strip() == title
            nav = driver.find_element(By.CSS_SELECTOR, "nav.md-nav--primary").text
            assert "Getting started" in nav and "Reference" in nav, f"{path or 'home'}: no navigation"
            body = driver.find_element(By.CSS_SELECTOR, "article").text
            assert phrase in body, f"{path or 'home'}: body text missing {phrase!r}"
            name = path.strip("/").replace("/", "_") or "home"
            driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))
    finally:
        driver.quit()
