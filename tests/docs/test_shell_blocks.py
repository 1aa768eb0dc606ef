"""Every shell block in the README, the getting-started page and the how-to guides runs, in order, on small settings
(SMALL_SETTINGS: each rewrite and why), or its first line says visibly why it is not run. The pages share one
working folder, as a reader following them would: the fleet guide uses the policy the training guide trained."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    "README.md",
    "docs/getting-started.md",
    "docs/how-to/collect-and-train.md",
    "docs/how-to/run-a-fleet.md",
    "docs/how-to/console.md",
    "docs/how-to/lerobot.md",
    "docs/how-to/robots.md",
    "docs/how-to/ros2.md",
    "docs/how-to/scale-out.md",
]
NOT_RUN = "# not run by the docs tests: "
# (pattern, replacement, why): applied to every line of a block before it runs
SMALL_SETTINGS: list[tuple[str, str, str]] = [
    (r"^bash scripts/install\.sh( dev)? && ", "", "the tests run inside that install (.ci/run's first step)"),
    (r"-m pytest$", "-m pytest --collect-only -q tests/docs", "the suite itself runs the suite: collect, not recurse"),
    (r"vla-recover loop$", "vla-recover loop --config configs/loop/debug.yaml --rounds 1", "the debug preset"),
    (r"--config configs/loop/quickstart\.yaml", "--config configs/loop/debug.yaml --rounds 1", "the debug preset"),
    (r"--episodes 100\b", "--episodes 4", "4 demonstrations or evaluation episodes"),
    (
        r"--config configs/train/lift_diffusion\.yaml$",
        "--config configs/train/debug.yaml --data runs/lift_demos --out runs/train/lift_diffusion",
        "the 20-step training smoke config on the same data and run folder",
    ),
    (
        r"--config configs/train/lift_diffusion\.yaml --out",
        "--config configs/train/debug.yaml --data runs/lift_demos --out",
        "the 20-step training smoke config on the same data, in its own run folder",
    ),
    (r"^(vla-recover critic train .*)$", r"\1 --steps 40", "40 critic steps"),
    (r"--robots 8 --episodes 16", "--robots 2 --episodes 8", "2 robots"),
]


def shell_blocks(page: Path) -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```$", page.read_text(), flags=re.MULTILINE | re.DOTALL)


def small(block: str) -> str:
    lines = []
    for line in block.splitlines():
        for pattern, replacement, _why in SMALL_SETTINGS:
            line = re.sub(pattern, replacement, line)
        lines.append(line)
    return "\n".join(lines)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("docs_shell")
    for name in (".venv", "configs", "scripts", "tests"):
        (work / name).symlink_to(ROOT / name)
    (work / "runs").mkdir()
    return work


def test_every_page_has_blocks_and_every_skip_says_why() -> None:
    for page in PAGES:
        blocks = shell_blocks(ROOT / page)
        assert blocks, f"{page}: no ```bash blocks (the test reads only those)"
        for block in blocks:
            if block.startswith("#") and not block.startswith(NOT_RUN):
                assert not block.lower().startswith("# not run"), f"{page}: write skips as {NOT_RUN!r}<reason>"
            if block.startswith(NOT_RUN):
                assert len(block.splitlines()[0]) > len(NOT_RUN) + 10, f"{page}: a skipped block needs its reason"


def test_the_small_settings_rewrite_what_they_say() -> None:
    assert small("bash scripts/install.sh && .venv/bin/vla-recover loop") == (
        ".venv/bin/vla-recover loop --config configs/loop/debug.yaml --rounds 1"
    )
    assert small("vla-recover collect --task LiftCube --episodes 100 --out x") == (
        "vla-recover collect --task LiftCube --episodes 4 --out x"
    )


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_the_page_runs(page: str, workdir: Path) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for block in shell_blocks(ROOT / page):
        if block.startswith(NOT_RUN):
            continue
        script = small(block)
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script], cwd=workdir, env=env, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip
        output = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        assert done.returncode == 0, f"{page}: this block failed ({done.returncode}):\n{script}\n{output}"
