#!/usr/bin/env bash
# Create ./.venv-lerobot with LeRobot 0.4.4 and vla_recover beside it: the LeRobot interop and adapter tests and
# the LeRobot side of benchmarks/store_io.py and benchmarks/policy_speed.py run there.
#
# LeRobot 0.4.4 (the newest release for Python 3.11) declares torch < 2.11, which is not on this machine's
# disk. It runs on torch 2.14.1 + torchvision 0.29.1 (a CUDA build that also runs on CPU, both on local disk),
# so we install its needs pinned by hand and then LeRobot itself with --no-deps. About 8.6 GB, a few minutes.
#
#   bash scripts/install_lerobot_venv.sh          create (or complete) .venv-lerobot
#   bash scripts/install_lerobot_venv.sh --fresh  delete it first
#
# Only a finished install writes $venv/READY; the tests and benchmarks that need LeRobot look for that file, so a
# half-built venv (a failed download, a full disk) makes them skip rather than fail on a missing module.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-lerobot
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null || python=python3

if [ "${1:-}" = "--fresh" ]; then
  rm -rf "$venv"
fi
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
marker="$venv/READY"
# this machine's pip config lists local indexes whose missing entries pip reports once per package: hide that noise
pip_install() {
  "$venv/bin/pip" install --quiet "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}
ready="import lerobot, pytest, scservo_sdk, vla_recover.policies, sys; sys.exit(lerobot.__version__ != '0.4.4')"
if HF_HUB_OFFLINE=1 "$venv/bin/python" -c "$ready" 2>/dev/null; then
  echo "lerobot 0.4.4 is already in $venv (--fresh to rebuild)"
  touch "$marker"
  exit 0
fi
rm -f "$marker"
need_gb=10
free_gb=$(df -P -BG "$venv" | awk 'NR == 2 { sub("G", "", $4); print $4 }')
if [ "$free_gb" -lt "$need_gb" ]; then
  echo "error: $venv needs about $need_gb GB of free disk and $(df -P "$venv" | awk 'NR == 2 { print $6 }') has $free_gb GB" >&2
  exit 1
fi
pip_install --upgrade pip

echo "[1/4] torch 2.14.1 + torchvision 0.29.1 (local disk)"
pip_install torch==2.14.1 torchvision==0.29.1

echo "[2/4] LeRobot 0.4.4's runtime needs, pinned"
pip_install \
  numpy==2.2.6 \
  opencv-python-headless==4.12.0.88 \
  datasets==4.8.5 \
  accelerate==1.16.0 \
  av==15.1.0 \
  draccus==0.10.0 \
  rerun-sdk==0.26.2 \
  wandb==0.24.2 \
  einops==0.8.2 \
  jsonlines==4.0.0 \
  deepdiff==8.6.2 \
  pynput==1.8.2 \
  pyserial==3.5 \
  termcolor==3.3.0 \
  "imageio[ffmpeg]==2.38.2" \
  diffusers==0.35.2 \
  huggingface-hub==0.35.3 \
  feetech-servo-sdk==1.0.0

echo "[3/4] lerobot 0.4.4 (--no-deps: its torch<2.11 pin cannot be met here)"
pip_install --no-deps lerobot==0.4.4

echo "[4/4] vla_recover itself (--no-deps: the LeRobot adapter needs only what LeRobot brings) and pytest"
pip_install pytest==9.2.0
pip_install --no-deps -e .

HF_HUB_OFFLINE=1 "$venv/bin/python" -c "
import lerobot, torch
import vla_recover.policies  # noqa: F401
from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: F401
print(f'lerobot {lerobot.__version__} on torch {torch.__version__}: ready in $venv')
"
touch "$marker"
