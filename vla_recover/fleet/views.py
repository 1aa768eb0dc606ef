"""Views of the sim robots for people: a camera rendered for the console whether or not the policy sees cameras, kept
off the fleet's requests and replies.

The console marks a view wanted (`ViewBoard.want`: a small JSON file per robot in the fleet's view folder, valid for
a few seconds, renewed while someone watches); the robot's sim worker (`ViewPainter`), after it has sent its
replies, renders that camera when a frame is due at the view's rate (`paint`: without what a software renderer pays
most for) and replaces the robot's JPEG atomically; the console sends each viewer
the newest frame it has not seen yet (`ViewFeed`, over the viewer's WebSocket) or serves one on request
(`ViewBoard.frame`). Nothing is rendered while nobody watches, and a slow viewer only misses frames: the fleet never
waits for one, and a viewer is sent the newest frame when it is ready for one, never a backlog. Sim robots on Ray
actors paint where they share the view folder (`vla_recover.fleet.ray_backend`); hardware robots show their own
cameras instead.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SIZES", "ViewBoard", "ViewFeed", "ViewPainter", "jpeg", "paint"]

# name → (width, height, frames a second): the driven robot's view, and a fleet card's thumbnail
SIZES: dict[str, tuple[int, int, float]] = {"large": (320, 240, 10.0), "thumb": (128, 96, 1.0)}
WANTED_FOR_S = 3.0  # a view stops being rendered this long after its last request
RENEW_EVERY_S = 1.0  # how often a feed renews the views its viewer watches
CAMERA = "front"


def _replace(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old file or the new one, never half of one."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_bytes(data)
    os.replace(partial, path)


def paint(env: Any, width: int, height: int) -> bytes | None:
    """``env``'s console camera as a JPEG for people, or None for a task that renders no views: no antialiasing or
    floor reflections, shadows only in a view as large as the driven robot's (the teleoperator's cue for the
    gripper's height; a thumbnail is too small to show one). Under OSMesa: 15 against 20 ms at 320 x 240, 3.8
    against 12.6 ms at 128 x 96."""
    render = getattr(env.unwrapped, "render_view", None)
    if render is None:
        return None
    shadows = width >= SIZES["large"][0]
    return jpeg(render(CAMERA, width, height, antialias=False, shadows=shadows, reflections=False))


def jpeg(frame: Any) -> bytes:
    """An RGB frame as a JPEG, compressed for a view (about 10 kB at 320 x 240)."""
    import imageio.v3 as iio

    return bytes(iio.imwrite("<bytes>", np.asarray(frame), extension=".jpg", quality=80))


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
        newest = self.newest(robot)
        return None if newest is None else (newest[0], max(0.0, time.time() - newest[1]))

    def painted_at(self, robot: str) -> float | None:
        """When ``robot``'s newest frame was painted (wall-clock seconds), or None before the first."""
        try:
            return (self.folder / f"{robot}.jpg").stat().st_mtime
        except OSError:
            return None

    def newest(self, robot: str) -> tuple[bytes, float] | None:
        """The newest JPEG of ``robot``'s view and when it was painted, read from one open file (a frame replaced
        meanwhile does not mix the two), or None before the first."""
        try:
            with (self.folder / f"{robot}.jpg").open("rb") as file:
                return file.read(), os.fstat(file.fileno()).st_mtime
        except OSError:
            return None


class ViewFeed:
    """What one viewer (a WebSocket client) watches: each robot's view at a size, each frame sent once, the newest
    when it is due at the size's rate (at most twice that rate: the frames come at step boundaries, unevenly
    spaced in wall time); frames painted meanwhile are skipped, not queued.

    A frame goes out as one binary message: a JSON header line (``type`` "view", ``robot``, ``painted``: wall-clock
    seconds, ``age_s``: seconds since painted when sent), a newline, then the JPEG.
    """

    def __init__(self, board: ViewBoard) -> None:
        self.board = board
        self.watching: dict[str, str] = {}  # robot → size; replaced whole by watch()
        self._renewed: dict[str, float] = {}
        self._sent: dict[str, tuple[float, float]] = {}  # robot → (painted, sent at) of the last frame sent

    def watch(self, sizes: dict[str, str]) -> None:
        """Watch these robots' views (robot → a key of SIZES) from now on, and no others."""
        for robot, size in sizes.items():
            if size not in SIZES:
                raise ValueError(f"views.{robot}: got size {size!r}; valid sizes: {', '.join(SIZES)}")
        self.watching = dict(sizes)
        self._renewed = {}  # every view asked for at once, a new size included

    def due(self) -> list[bytes]:
        """The messages to send now: a frame of each watched robot painted since the last sent and due at its rate."""
        messages, now = [], time.time()
        for robot, size in list(self.watching.items()):
            if now - self._renewed.get(robot, 0.0) >= RENEW_EVERY_S:
                self.board.want(robot, size)
                self._renewed[robot] = now
            last_painted, sent_at = self._sent.get(robot, (None, 0.0))
            if now - sent_at < 0.5 / SIZES[size][2]:  # not due: no need to look for a frame
                continue
            painted = self.board.painted_at(robot)
            if painted is None or painted == last_painted:
                continue
            newest = self.board.newest(robot)
            if newest is None:
                continue
            frame, painted = newest
            header = {"type": "view", "robot": robot, "painted": painted, "age_s": round(max(0.0, now - painted), 4)}
            messages.append(json.dumps(header).encode() + b"\n" + frame)
            self._sent[robot] = (painted, now)
        return messages


class ViewPainter:
    """The sim worker's side for one robot: renders its wanted view at the view's rate in wall-clock time, as the
    person watching sees it, whatever the fleet's pace. Frames come at step boundaries: each at the boundary nearest
    the time it is due, on a schedule that does not drift (a 10 frames/s view of a fleet stepping every 52 ms gets
    frames mostly 104 ms apart and now and then 52: ten a second). A reset or a rewind is shown at once."""

    JUMP = 1_000  # what a reset or a rewind counts as in ``after_steps``' steps

    def __init__(self, folder: str | Path, robot: str, control_dt: float, clock: Any = time.monotonic) -> None:
        self.want_path, self.frame_path = Path(folder) / f"{robot}.want", Path(folder) / f"{robot}.jpg"
        self.control_dt = control_dt
        self.clock = clock
        self._seen: float | None = None  # the want file's mtime when last read
        self._wanted: dict[str, Any] | None = None
        self._due = 0.0  # the clock's time the next frame is due

    def after_steps(self, env: Any, steps: int) -> bool:
        """Render and publish a frame of ``env`` (moved on by ``steps`` control steps, or ``JUMP`` for a reset or a
        rewind) if one is wanted and due; whether it did."""
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
        wanted = self._wanted
        if wanted is None or wanted["until"] < time.time():
            return False
        now, period = self.clock(), 1.0 / float(wanted["fps"])
        if steps < self.JUMP and now < self._due - self.control_dt / 2:
            return False
        # the next frame one period after this one was due; after a pause or a jump, one period from now
        self._due = self._due + period if now - self._due < period else now + period
        frame = paint(env, int(wanted["width"]), int(wanted["height"]))
        if frame is None:
            return False
        _replace(self.frame_path, frame)
        return True
