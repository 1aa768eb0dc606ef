"""End to end in headless Chromium: a floor operator sees eight sim robots move, each with its view and progress
curve, and asks for a takeover; a teleoperator (another browser) takes the robot, drives it with the keyboard and its
view in front of them, previews and makes a rewind, and hands back; the intervention and the rewind show on the
episode's timeline beside its drawn curve and frames. Screenshots go to test-artifacts/console/."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.browser import headless_chromium
from vla_recover.cli.main import app
from vla_recover.data import EpisodeStore
from vla_recover.serving.launch import free_port

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "console"
PASSWORD = "a good password"

if shutil.which("chromedriver") is None or shutil.which("chromium") is None:
    pytest.skip("no chromium / chromedriver (scripts/install.sh dev installs them as root)", allow_module_level=True)
pytest.importorskip("selenium.webdriver")


def wait(condition: Callable[[], Any], seconds: float = 20.0, what: str = "condition") -> Any:
    from selenium.common.exceptions import StaleElementReferenceException

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            result = condition()
        except StaleElementReferenceException:  # the cards re-render ten times a second
            result = None
        if result:
            return result
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("browser")
    store = root / "store"
    for name, role in (("fred", "floor"), ("tess", "teleop")):
        CliRunner().invoke(app, ["console", "user", "add", name, "--role", role, "--store", str(store),
                                 "--password-stdin"], input=PASSWORD + "\n")  # fmt: skip
    fleet = root / "fleet.yaml"
    fleet.write_text(
        f"task: LiftCube\nrobots: 8\nrobots_per_process: 4\nepisodes: 100\nstore: {store}\n"
        "constant_action: [0.3, 0, 0, 0, -1]\ntask_config: {horizon: 300}\n"
        "floor_operator: {enabled: false}\nteleoperator: {enabled: false}\n"
    )
    # a second console browses a demonstration recorded with a camera (a store holds one schema: the fleet's
    # episodes have no camera), for the episode page with frames
    demos = root / "demos"
    (root / "collect.yaml").write_text(
        f"task: LiftCube\nepisodes: 1\nworkers: 1\nout: {demos}\n"
        "task_config: {horizon: 60, cameras: [front], image_size: 48}\n"
    )
    collected = CliRunner().invoke(app, ["collect", "--config", str(root / "collect.yaml")])
    assert collected.exit_code == 0, collected.output
    CliRunner().invoke(app, ["console", "user", "add", "fred", "--role", "floor", "--store", str(demos),
                             "--password-stdin"], input=PASSWORD + "\n")  # fmt: skip
    port, demo_port = free_port(), free_port()
    commands = [
        [sys.executable, "-m", "vla_recover.cli.main", "console", "--fleet", str(fleet), "--port", str(port)],
        [sys.executable, "-m", "vla_recover.cli.main", "console", "--store", str(demos), "--port", str(demo_port)],
    ]
    processes = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True) for command in commands]  # fmt: skip
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        yield {"url": f"http://127.0.0.1:{port}", "store": store, "demos_url": f"http://127.0.0.1:{demo_port}"}
    finally:
        for process in processes:
            os.killpg(process.pid, signal.SIGINT)
            process.wait(timeout=20)


def log_in(driver: Any, url: str, name: str) -> None:
    from selenium.webdriver.common.by import By

    for _ in range(100):  # the server may still be starting
        try:
            driver.get(url)
            break
        except Exception:
            time.sleep(0.5)
    wait(lambda: driver.find_element(By.ID, "login").is_displayed(), what="the login form")
    driver.find_element(By.NAME, "username").send_keys(name)
    driver.find_element(By.NAME, "password").send_keys(PASSWORD)
    driver.find_element(By.CSS_SELECTOR, "#login-form button").click()
    wait(lambda: name in driver.find_element(By.ID, "who").text, what=f"{name} logged in")


# the spread of an image's red channel as drawn in a canvas (0: one flat colour, a blank)
SPREAD = """const img = arguments[0]; if (!img || !img.naturalWidth) return 0;
const c = document.createElement("canvas"); c.width = img.naturalWidth; c.height = img.naturalHeight;
const g = c.getContext("2d"); g.drawImage(img, 0, 0); const d = g.getImageData(0, 0, c.width, c.height).data;
let low = 255, high = 0;
for (let i = 0; i < d.length; i += 4) { low = Math.min(low, d[i]); high = Math.max(high, d[i]); }
return high - low;"""


def spread(driver: Any, selector: str) -> int:
    return int(driver.execute_script(SPREAD, driver.execute_script(f"return document.querySelector('{selector}')")))


def card_text(driver: Any, robot: str) -> str:
    return str(driver.execute_script(f"return document.querySelector('.card[data-robot=\"{robot}\"]').textContent"))


def click_card_button(driver: Any, robot: str, label: str) -> None:

    def press() -> bool:
        script = (f"const b = [...document.querySelectorAll('.card[data-robot=\"{robot}\"] button')]"
                  f".find(b => b.textContent === '{label}'); if (b) b.click(); return Boolean(b);")  # fmt: skip
        return bool(driver.execute_script(script))

    wait(press, what=f"the {label} button of {robot}")


def test_floor_operator_and_teleoperator_recover_a_robot_in_the_browser(server: dict[str, Any]) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    floor, teleop = headless_chromium(), headless_chromium()
    try:
        log_in(floor, server["url"], "fred")
        wait(lambda: len(floor.find_elements(By.CSS_SELECTOR, ".card")) == 8, what="eight robot cards")

        def steps() -> list[int]:  # read in one script: the cards re-render ten times a second
            texts = floor.execute_script("return [...document.querySelectorAll('.card')].map(c => c.textContent)")
            return [int(text.split("step ")[1].split()[0]) for text in texts]

        wait(lambda: min(steps()) > 0, 60, "the robots to start")
        before = steps()
        wait(lambda: all(a > b for a, b in zip(steps(), before, strict=True)), what="every robot to move")
        # each card draws its progress curve (a uPlot sparkline) from the points the snapshot sends
        sparklines = "return document.querySelectorAll('#cards .card .sparkline canvas').length"
        wait(lambda: floor.execute_script(sparklines) == 8, what="a progress sparkline on every card")
        points = "return [...window.sparklines.values()].map(([, plot]) => plot.data[1].length)"
        wait(lambda: min(floor.execute_script(points)) > 5, what="points on every sparkline")
        # and a view of its robot painted for people (128 x 96, over the WebSocket), beside the policy's camera
        thumbs = "return [...document.querySelectorAll('#cards .card img.thumb')].map(i => i.naturalWidth)"
        wait(lambda: floor.execute_script(thumbs) == [128] * 8, what="a painted view on every card")
        assert spread(floor, "#cards .card img.thumb") > 30  # a scene, not a blank
        floor.save_screenshot(str(ARTIFACTS / "1_floor_fleet.png"))
        wait(lambda: "autonomous" in card_text(floor, "sim00") and steps()[0] < 150, 30, "sim00 early in an episode")
        click_card_button(floor, "sim00", "Request takeover")
        wait(lambda: "takeover_requested" in card_text(floor, "sim00"), what="the takeover request")
        click_card_button(floor, "sim02", "Request takeover")  # a robot further down starts waiting too

        def grid() -> list[tuple[str, str]]:
            cards = "return [...document.querySelectorAll('#cards .card')].map(c => [c.dataset.robot, c.className])"
            return [tuple(card) for card in floor.execute_script(cards)]

        # the robots waiting for a person come first, the longest wait first, and a newcomer is cued
        wait(lambda: [r for r, _ in grid()[:2]] == ["sim00", "sim02"] and "cue" in grid()[1][1], what="sim02 cued")
        assert "needs-person" in grid()[0][1] and "needs-person" not in grid()[2][1]
        assert floor.title == "(2) vla_recover console"
        floor.save_screenshot(str(ARTIFACTS / "2_floor_takeover_requested.png"))

        log_in(teleop, server["url"], "tess")
        teleop.find_element(By.CSS_SELECTOR, 'nav a[data-page="queue"]').click()
        wait(lambda: "sim00" in teleop.find_element(By.ID, "queue-rows").text, what="sim00 in the queue")
        teleop.save_screenshot(str(ARTIFACTS / "3_teleop_queue.png"))
        take = "const b = document.querySelector('#queue-rows button'); if (b) b.click(); return Boolean(b);"
        wait(lambda: teleop.execute_script(take), what="take over")  # one script: the queue re-renders at 10 Hz
        wait(lambda: "Driving sim00" in teleop.find_element(By.ID, "teleop-lease").text, what="the lease")
        body = teleop.find_element(By.TAG_NAME, "body")
        ActionChains(teleop).move_to_element(body).key_down("r").pause(1.5).key_up("r").perform()  # raise the gripper
        large = "const i = document.querySelector('#teleop-images img.view'); return i ? i.naturalWidth : 0"
        wait(lambda: teleop.execute_script(large) == 320, what="the driven robot's view, 320 x 240")
        assert spread(teleop, "#teleop-images img.view") > 30
        teleop_points = "return window.sparklines.get('teleop:sim00')[1].data[1].length"
        wait(lambda: teleop.execute_script(teleop_points) > 5, what="the attempt's progress curve")
        slide = ("const s = document.getElementById('rewind-steps'); s.value = 5;"
                 "s.dispatchEvent(new Event('input')); return true;")  # fmt: skip
        teleop.execute_script(slide)
        preview = "const i = document.getElementById('rewind-preview'); return i.hidden ? 0 : i.naturalWidth"
        wait(lambda: teleop.execute_script(preview) == 320, what="the rewind's preview frame")
        assert "5 steps back" in teleop.find_element(By.ID, "rewind-preview-caption").text
        assert spread(teleop, "#rewind-preview") > 30
        shown = teleop.find_element(By.ID, "teleop-input").text  # what the driver's hands send, as the robot gets it
        assert shown.startswith("keyboard") and "sending [" in shown
        teleop.save_screenshot(str(ARTIFACTS / "4_teleop_driving.png"))
        teleop.find_element(By.ID, "rewind").click()
        wait(lambda: "rewound 5 steps" in teleop.find_element(By.ID, "notice").text, what="the rewind")
        ActionChains(teleop).key_down("w").pause(0.5).key_up("w").perform()
        teleop.find_element(By.ID, "release").click()
        wait(lambda: "You hold no robot" in teleop.find_element(By.ID, "teleop-lease").text, what="the hand back")
        wait(lambda: "autonomous" in card_text(floor, "sim00"), what="sim00 autonomous again")

        # the attempt is stored when its episode ends; then its timeline shows who was in control
        floor.find_element(By.CSS_SELECTOR, 'nav a[data-page="episodes"]').click()

        def sim00_episode_with_intervention() -> Any:
            floor.find_element(By.CSS_SELECTOR, "#episode-filter button").click()
            time.sleep(0.3)
            for row in floor.find_elements(By.CSS_SELECTOR, "#episode-rows tr"):
                if "sim00" in row.text:
                    row.click()
                    time.sleep(0.3)
                    parts = floor.find_elements(
                        By.CSS_SELECTOR, '#episode-view .timeline div[data-kind="intervention"]'
                    )
                    if parts:
                        return parts
            return None

        wait(sim00_episode_with_intervention, 60, "sim00's episode with an intervention segment")
        assert floor.find_elements(By.CSS_SELECTOR, '#episode-view .timeline div[data-kind="rewind"]')
        # and who chose each step: the policy, the human's commands, and the rewind no one chose (holds between two
        # commands depend on how the browser's 20 Hz sends fall against the fleet's ticks: tests/fleet covers them)
        for actor in ("policy", "human", "rewind"):
            assert floor.find_elements(By.CSS_SELECTOR, f'#episode-view .timeline.actors div[data-actor="{actor}"]')
        # the progress curve is drawn with a point for every step, and scrubbing along it shows that step
        points = "return window.episodeChart ? window.episodeChart.data[1].filter(v => v !== null).length : 0"
        length = int(floor.execute_script("return window.episodeChart.data[0].length"))
        assert floor.execute_script(points) == length > 10
        floor.execute_script("window.episodeChart.setCursor({left: window.episodeChart.valToPos(7, 'x'), top: 5})")
        wait(
            lambda: floor.find_element(By.CSS_SELECTOR, "#episode-view .scrub span").text.startswith("7 · "),
            what="the frames scrubbed to step 7 with the chart's cursor",
        )
        floor.save_screenshot(str(ARTIFACTS / "5_episode_timeline.png"))

        # a demonstration recorded with a camera: the episode page shows its frames beside the drawn curve
        log_in(floor, server["demos_url"], "fred")
        floor.find_element(By.CSS_SELECTOR, 'nav a[data-page="episodes"]').click()
        show = "const r = document.querySelector('#episode-rows tr'); if (r) r.click(); return Boolean(r);"
        wait(lambda: floor.execute_script(show), what="the demonstration in the episode list")
        frame = "const i = document.querySelector('#episode-view .scrub img.frame'); return i ? i.naturalWidth : 0"
        wait(lambda: floor.execute_script(frame) == 48, what="the demonstration's camera frame")
        assert floor.execute_script(points) == int(floor.execute_script("return window.episodeChart.data[0].length"))
        floor.execute_script("window.episodeChart.setCursor({left: window.episodeChart.valToPos(10, 'x'), top: 5})")
        wait(lambda: floor.find_element(By.CSS_SELECTOR, "#episode-view .scrub span").text.startswith("10 · "),
             what="the frames scrubbed to step 10")  # fmt: skip
        time.sleep(0.5)  # the frame of step 10 loads
        assert spread(floor, "#episode-view .scrub img.frame") > 30  # the scene, not a blank
        floor.save_screenshot(str(ARTIFACTS / "6_episode_frames.png"))
    finally:
        floor.quit()
        teleop.quit()

    with EpisodeStore(server["store"]) as store:
        rows = [r for r in store.episodes() if r.robot == "sim00"]
        episode = store.episode(rows[0].id)
        human = episode["action"][np.asarray(episode["intervention"], dtype=bool)]
        events = [(e.kind, e.actor) for e in store.events(robot="sim00")]
    assert (human[:, 2] > 0.5).sum() >= 5  # the R key raised the gripper for many steps
    assert ("takeover_requested", "fred") in events and ("rewind", "tess") in events
