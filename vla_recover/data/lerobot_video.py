"""Frames of LeRobot video features, decoded with PyAV (AV1 through libdav1d, also H.264/HEVC).

LeRobot v3.0 puts many episodes one after another in each mp4; an episode's frame at ``timestamp`` t lies at
``from_timestamp + t`` in its file. We seek to the key frame before the episode's first frame and decode forward to
its last, so an episode costs its own frames plus at most one group of pictures.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vla_recover.data.lerobot_format import Feature, LeRobotFormatError, require

__all__ = ["VIDEO_PATH", "decode_frames", "video_file"]

VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"


def video_file(root: Path, info_video_path: str | None, key: str, episode: dict[str, object]) -> Path:
    """Where episode ``episode`` (a row of meta/episodes) keeps video feature ``key``."""
    template = info_video_path or VIDEO_PATH
    try:
        chunk = int(episode[f"videos/{key}/chunk_index"])  # type: ignore[call-overload]
        file = int(episode[f"videos/{key}/file_index"])  # type: ignore[call-overload]
    except KeyError as exc:
        raise LeRobotFormatError(
            f"{root / 'meta/episodes'}: episode {episode.get('episode_index')} has no column {exc.args[0]!r} "
            f"for video feature {key!r}"
        ) from None
    return root / template.format(video_key=key, chunk_index=chunk, file_index=file)


def decode_frames(path: Path, timestamps: np.ndarray, feature: Feature, fps: float) -> np.ndarray:
    """Frames nearest ``timestamps`` (seconds from the file's start) as (T, H, W, C) uint8.

    A timestamp with no decoded frame within half a frame period is an error naming the file and the feature.
    """
    av = require("av")
    if not path.is_file():
        raise LeRobotFormatError(f"{path}: missing (video of feature {feature.name!r})")
    height, width, channels = feature.hwc
    tolerance = 0.5 / fps
    first, last = float(timestamps.min()), float(timestamps.max())
    times: list[float] = []
    frames: list[np.ndarray] = []
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise LeRobotFormatError(f"{path}: no video stream (feature {feature.name!r})")
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            if first > tolerance and stream.time_base:
                container.seek(int(max(0.0, first - tolerance) / stream.time_base), stream=stream, backward=True)
            for frame in container.decode(stream):
                if frame.pts is None or frame.time is None:
                    continue
                moment = float(frame.time)
                if moment < first - tolerance:
                    continue
                if moment > last + tolerance:
                    break
                times.append(moment)
                frames.append(frame.to_ndarray(format="rgb24"))
    except av.FFmpegError as exc:
        raise LeRobotFormatError(f"{path}: cannot decode video of feature {feature.name!r} ({exc})") from None
    if not frames:
        raise LeRobotFormatError(
            f"{path}: no frames between {first:.3f} s and {last:.3f} s for feature {feature.name!r}"
        )
    decoded_times = np.asarray(times)
    nearest = np.abs(decoded_times[None, :] - timestamps[:, None]).argmin(axis=1)
    error = np.abs(decoded_times[nearest] - timestamps)
    worst = int(error.argmax())
    if error[worst] > tolerance:
        raise LeRobotFormatError(
            f"{path}: feature {feature.name!r} has no frame at {float(timestamps[worst]):.4f} s "
            f"(nearest {float(decoded_times[nearest[worst]]):.4f} s)"
        )
    stack = np.stack(frames)[nearest]
    if channels == 1:
        stack = stack[..., :1]
    if stack.shape[1:] != (height, width, channels):
        raise LeRobotFormatError(
            f"{path}: video of feature {feature.name!r} has frames of shape {list(stack.shape[1:])}; "
            f"info.json declares (height, width, channels) {[height, width, channels]}"
        )
    return np.ascontiguousarray(stack)
