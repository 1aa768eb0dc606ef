"""The console's third-party front-end files, fetched by pinned version from the npm registry and checked against
the registry's integrity hash, never committed: the build backend (build_support/backend.py) runs `fetch` before it
builds a wheel or an editable install, so `scripts/install.sh` and every wheel carry them.

    python build_support/console_assets.py      fetch (or check) them by hand
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import tarfile
import urllib.request
from pathlib import Path

VENDOR = Path(__file__).resolve().parents[1] / "vla_recover" / "console" / "static" / "vendor"
REGISTRY = os.environ.get("NPM_REGISTRY", "https://registry.npmjs.org").rstrip("/")
# package, version, the registry's sha512 integrity of its tarball, {file in the tarball: file in vendor/}
UPLOT_INTEGRITY = "sha512-KIMVnG68zvu5XXUbC4LQEPnhwOxBuLyW1AHtpm6IKTXImkbLgkMy+jabjLgSLMasNuGGzQm/ep3tOkyTxpiQIw=="
ASSETS = [
    ("uplot", "1.6.32", UPLOT_INTEGRITY,
     {"package/dist/uPlot.iife.min.js": "uPlot.iife.min.js", "package/dist/uPlot.min.css": "uPlot.min.css",
      "package/LICENSE": "uPlot.LICENSE"}),
]  # fmt: skip
STAMP = VENDOR / "versions.json"


def fetch(vendor: Path = VENDOR) -> list[str]:
    """Put every asset in ``vendor`` (skipping those already there at their pinned version); returns what it
    fetched. A download that fails or does not match its hash raises, naming the package."""
    stamp = vendor / STAMP.name
    have = json.loads(stamp.read_text()) if stamp.is_file() else {}
    fetched = []
    for package, version, integrity, files in ASSETS:
        if have.get(package) == version and all((vendor / name).is_file() for name in files.values()):
            continue
        url = f"{REGISTRY}/{package}/-/{package}-{version}.tgz"
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                tarball = response.read()
        except OSError as exc:
            raise RuntimeError(f"console assets: cannot fetch {package} {version} from {url}: {exc}") from exc
        digest = "sha512-" + base64.b64encode(hashlib.sha512(tarball).digest()).decode()
        if digest != integrity:
            raise RuntimeError(f"console assets: {url} does not match its pinned integrity {integrity}")
        vendor.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
            for member, name in files.items():
                source = archive.extractfile(member)
                if source is None:
                    raise RuntimeError(f"console assets: {package} {version} has no {member}")
                (vendor / name).write_bytes(source.read())
        have[package] = version
        fetched.append(f"{package} {version}")
    stamp.write_text(json.dumps(have, indent=2) + "\n")
    return fetched


if __name__ == "__main__":
    done = fetch()
    print(f"console assets in {VENDOR}: " + (", ".join(done) + " fetched" if done else "up to date"))
