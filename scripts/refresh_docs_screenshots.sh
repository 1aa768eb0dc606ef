#!/usr/bin/env bash
# Refresh the screenshots the docs show (docs/assets/console/): run the console's browser story in headless Chromium
# and copy the screenshots it takes. The docs build reads only the committed copies, never a test's artifacts.
set -euo pipefail
cd "$(dirname "$0")/.."

.venv/bin/python -m pytest -q -p no:cacheprovider tests/console/test_browser.py
mkdir -p docs/assets/console
cp test-artifacts/console/1_floor_fleet.png docs/assets/console/fleet.png
cp test-artifacts/console/4_teleop_driving.png docs/assets/console/teleop.png
cp test-artifacts/console/5_episode_timeline.png docs/assets/console/timeline.png
cp test-artifacts/console/6_episode_frames.png docs/assets/console/episode.png
echo "refreshed: $(ls docs/assets/console)"
