"""Views of the sim robots for people: a camera rendered for the console whether or not the policy sees cameras, kept
off the fleet's requests and replies.

The console marks a view wanted (`ViewBoard.want`: a small JSON file per robot in the fleet's view folder, valid for
a few seconds, renewed while someone watches); the robot's sim worker (`ViewPainter`) renders that camera after a
step once a frame is due at the view's rate and replaces the robot's JPEG atomically; the console serves the newest
(`ViewBoard.frame`). Nothing is rendered while nobody watches, and a slow viewer only misses frames: the fleet never
waits for one. Sim robots on Ray actors (possibly other machines) and hardware robots have no painted view.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SIZES", "ViewBoard", "ViewPainter"]

# name → (width, height, frames a second): the driven robot's view, and a fleet card's thumbnail
SIZES: dict[str, tuple[int, int, float]] = {"large": (320, 240, 10.0), "thumb": (128, 96, 1.0)}
WANTED_FOR_S = 3.0  # a view stops being rendered this long after its last request
CAMERA = "front"


def _replace(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old file or the new one, never half of one."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_bytes(data)
    os.replace(partial, path)


class ViewBoard:
    """The console's side: which views are wanted, and the newest frame of each robot."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def want(self, robot: str, size: str) -> None:
        """Ask for ``robot``'s view at ``size`` (a key of SIZES) for the next few seconds; the larger of two wanted
        sizes wins."""
        if size not in SIZES:
            raise ValueError(f"size: got {size!r}; valid sizes: {', '.join(SIZES)}")
        width, height, fps = SIZES[size]
        path, now = self.folder / f"{robot}.want", time.time()
        try:
            current = json.loads(path.read_text())
            if current["until"] > now and current["width"] > width:
                width, height, fps = current["width"], current["height"], current["fps"]
        except (OSError, ValueError, KeyError):
            pass  # none yet, or one being replaced: this request stands
        wanted = {"width": width, "height": height, "fps": fps, "until": now + WANTED_FOR_S}
        _replace(path, json.dumps(wanted).encode())

    def frame(self, robot: str) -> tuple[bytes, float] | None:
        """The newest JPEG of ``robot``'s view and its age in seconds, or None before the first."""
        path = self.folder / f"{robot}.jpg"
        try:
            return path.read_bytes(), max(0.0, time.time() - path.stat().st_mtime)
        except OSError:
            return None


class ViewPainter:
    """The sim worker's side for one robot: renders its wanted view after a step when a frame is due."""

    def __init__(self, folder: str | Path, robot: str) -> None:
        self.want_path, self.frame_path = Path(folder) / f"{robot}.want", Path(folder) / f"{robot}.jpg"
        self._seen: float | None = None  # the want file's mtime when last read
        self._wanted: dict[str, Any] | None = None
        self._painted_at = 0.0

    def after_step(self, env: Any) -> bool:
        """Render and publish a frame of ``env`` if one is wanted and due; whether it did."""
        try:
            modified = self.want_path.stat().st_mtime
        except OSError:
            return False
        if modified != self._seen:
            self._seen = modified
            try:
                self._wanted = json.loads(self.want_path.read_text())
            except (OSError, ValueError):
                self._wanted = None
        wanted, now = self._wanted, time.time()
        render = getattr(env.unwrapped, "render_view", None)
        if wanted is None or wanted["until"] < now or render is None or now - self._painted_at < 1.0 / wanted["fps"]:
            return False
        import imageio.v3 as iio

        frame = np.asarray(render(CAMERA, int(wanted["width"]), int(wanted["height"])))
        _replace(self.frame_path, iio.imwrite("<bytes>", frame, extension=".jpg", quality=80))
        self._painted_at = now
        return True
