"""Where the LeRobot venv is, and a skip mark for tests that need it finished.

``scripts/install_lerobot_venv.sh`` writes ``READY`` only once LeRobot imports there, so a half-built venv (a failed
download, a full disk) skips these tests, as ``.ci/run`` promises, instead of failing them on a missing module.
"""

from __future__ import annotations

from pathlib import Path

import pytest

LEROBOT_VENV = Path(__file__).resolve().parents[1] / ".venv-lerobot"
LEROBOT_PYTHON = LEROBOT_VENV / "bin" / "python"

needs_lerobot_venv = pytest.mark.skipif(
    not (LEROBOT_VENV / "READY").exists(),
    reason="no finished .venv-lerobot (bash scripts/install_lerobot_venv.sh)",
)
