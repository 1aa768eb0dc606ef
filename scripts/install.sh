#!/usr/bin/env bash
# Install vla_recover into ./.venv: system libraries for offscreen rendering, then the package.
#   bash scripts/install.sh        the package
#   bash scripts/install.sh dev    the package, robosuite, the test, lint and docs tools, and Chromium for browser tests
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-}"

if ! ldconfig -p 2>/dev/null | grep -q libOSMesa.so; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing OSMesa for headless rendering (apt-get)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libosmesa6 libgl1-mesa-dri libegl-mesa0 >/dev/null
  else
    echo "warning: libOSMesa not found; camera observations need it (Debian: apt-get install libosmesa6)" >&2
  fi
fi

if [ "$extra" = dev ] && ! command -v chromedriver >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Chromium and its driver for the console's browser tests (apt-get)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        chromium chromium-driver >/dev/null; } || echo "warning: no Chromium; the browser tests will skip" >&2
  else
    echo "warning: chromedriver not found; the console's browser tests will skip (apt-get install chromium-driver)" >&2
  fi
fi

python3 -m venv .venv
# torch==2.13.0 is pinned in pyproject.toml: pip takes the CPU build from local disk.
.venv/bin/pip install --quiet --upgrade pip
if [ -n "$extra" ]; then
  .venv/bin/pip install --quiet -e ".[$extra]"
else
  .venv/bin/pip install --quiet -e .
fi
echo "installed: $(.venv/bin/vla-recover --help >/dev/null && echo vla-recover ready in .venv/bin)"
