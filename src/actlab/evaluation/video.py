"""Rollout videos: camera frames side by side, scaled up, with text drawn on them, written as mp4 by PyAV.

H.264 (libx264) is used when the installed PyAV has it, otherwise the first encoder of
:data:`CODEC_PREFERENCE` that it has. Text is drawn with Pillow (a matplotlib dependency), so no OpenCV
is needed. Files are written atomically (temporary file + rename).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from actlab.errors import ActlabError
from actlab.utils.io import atomic_file

# Encoders tried in order; libx264 plays everywhere, mpeg4 is in every FFmpeg build, AV1 as a last resort.
CODEC_PREFERENCE: tuple[str, ...] = ("libx264", "h264", "mpeg4", "libsvtav1", "libaom-av1")

# A video holds its last frame this long with the outcome on it, so the end can be read before it loops.
VIDEO_HOLD_S = 1.0

GREEN = (60, 220, 90)
RED = (240, 70, 60)
WHITE = (255, 255, 255)


@functools.cache
def pick_codec() -> str:
    """The first encoder of CODEC_PREFERENCE that this PyAV build can open for writing."""
    import av

    for name in CODEC_PREFERENCE:
        try:
            av.codec.Codec(name, "w")
        except Exception:  # PyAV raises UnknownCodecError (or ValueError in older versions)
            continue
        return name
    raise ActlabError(
        "the installed PyAV has none of the video encoders actlab can use",
        field="av",
        expected="one of " + ", ".join(CODEC_PREFERENCE),
        fix="pip install --upgrade av (the PyPI wheels include libx264 and libsvtav1)",
    )


def upscale(image: np.ndarray, factor: int) -> np.ndarray:
    """Nearest-neighbour integer upscaling of an HWC image (keeps pixels crisp, costs no dependency)."""
    if factor <= 1:
        return image
    return np.repeat(np.repeat(image, factor, axis=0), factor, axis=1)


def resize_nearest(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Nearest-neighbour resize of an HWC image to (height, width)."""
    h, w = image.shape[:2]
    if (h, w) == (height, width):
        return image
    rows = (np.arange(height) * h // height).clip(0, h - 1)
    cols = (np.arange(width) * w // width).clip(0, w - 1)
    return image[rows][:, cols]


def side_by_side(images: Sequence[np.ndarray]) -> np.ndarray:
    """Concatenate HWC uint8 images horizontally, resizing each to the height of the first."""
    if not images:
        raise ValueError("no images to compose")
    h = images[0].shape[0]
    parts = [resize_nearest(im, h, max(1, round(im.shape[1] * h / im.shape[0]))) for im in images]
    return np.concatenate(parts, axis=1)


def camera_frame(obs: Mapping[str, np.ndarray], min_height: int = 256) -> np.ndarray:
    """All ``observation.images.*`` of an env observation side by side, upscaled to >= min_height rows."""
    cams = [np.asarray(v) for k, v in sorted(obs.items()) if k.startswith("observation.image")]
    if not cams:
        raise ActlabError("the observation has no camera image to put in a video", found=sorted(obs))
    frame = side_by_side(cams)
    return upscale(frame, max(1, -(-min_height // frame.shape[0])))


def env_frame(env: Any, obs: Mapping[str, np.ndarray], min_height: int = 256) -> np.ndarray:
    """A video frame of the current step: with actlab's sim (``render(camera=, size=)``) each observed
    camera rendered afresh at ``min_height`` pixels (the overhead one when none is observed); otherwise
    the observation's own images, upscaled (:func:`camera_frame`)."""
    render = getattr(env, "render", None)
    if render is None or not hasattr(env, "project"):
        return camera_frame(obs, min_height)
    cams = [k.rsplit(".", 1)[-1] for k in sorted(obs) if k.startswith("observation.images.")]
    if not cams:
        return render(size=min_height)
    return side_by_side([render(camera=c, size=min_height) for c in cams])


@functools.cache
def _font(size: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1 has only the fixed bitmap font
        return ImageFont.load_default()


def _fit(draw, text: str, max_width: int, size: int):
    """The largest font (at most ``size``) in which ``text`` fits ``max_width`` pixels (at least 8 px)."""
    while size > 8 and draw.textlength(text, font=_font(size)) > max_width:
        size -= 1
    return _font(size)


def draw_text(
    frame: np.ndarray,
    top: str | None = None,
    bottom: str | None = None,
    bottom_color: tuple[int, int, int] = WHITE,
    bottom_right: str | None = None,
) -> np.ndarray:
    """Return a copy of ``frame`` with a dark band and text at the top and/or the bottom (``bottom`` left
    in ``bottom_color``, ``bottom_right`` right-aligned in white)."""
    from PIL import Image, ImageDraw

    img = Image.fromarray(np.ascontiguousarray(frame))
    draw = ImageDraw.Draw(img)
    h, w = frame.shape[:2]
    size = max(10, min(h, w) // 18)
    font = _font(size)
    band = size + 8
    if top:
        draw.rectangle([0, 0, w, band], fill=(0, 0, 0))
        draw.text((4, 3), top, fill=WHITE, font=_fit(draw, top, w - 8, size))
    if bottom or bottom_right:
        draw.rectangle([0, h - band, w, h], fill=(0, 0, 0))
    left_width = 0.0
    if bottom:
        draw.text((4, h - band + 3), bottom, fill=bottom_color, font=font)
        left_width = draw.textlength(bottom, font=font) + 12
    if bottom_right:
        small = _fit(draw, bottom_right, int(w - 8 - left_width), max(9, size * 3 // 4))
        width = draw.textlength(bottom_right, font=small)
        draw.text((w - 4 - width, h - band + 3 + size // 6), bottom_right, fill=WHITE, font=small)
    return np.asarray(img)


def outcome_text(outcome: str) -> tuple[str, tuple[int, int, int]]:
    """The text and colour written on a video for an episode outcome."""
    if outcome == "success":
        return "SUCCESS", GREEN
    return f"FAIL: {outcome}", RED


def _even(frame: np.ndarray) -> np.ndarray:
    # yuv420p needs even width and height; pad one edge row/column by repetition.
    h, w = frame.shape[:2]
    if h % 2 or w % 2:
        frame = np.pad(frame, ((0, h % 2), (0, w % 2), (0, 0)), mode="edge")
    return frame


def write_video(path: str | Path, frames: Iterable[np.ndarray], fps: int, codec: str | None = None) -> Path:
    """Encode HWC uint8 RGB frames to an mp4 at ``path`` (atomically); returns the path.

    All frames must have the size of the first.
    """
    import av

    path = Path(path)
    codec = codec or pick_codec()
    with atomic_file(path, "wb") as f, av.open(f, mode="w", format="mp4") as container:
        stream = None
        for count, frame in enumerate(frames):
            frame = _even(np.ascontiguousarray(frame, dtype=np.uint8))
            if stream is None:
                stream = container.add_stream(codec, rate=int(fps))
                stream.height, stream.width = frame.shape[:2]
                stream.pix_fmt = "yuv420p"
                if codec in ("libx264", "h264"):
                    stream.options = {"crf": "20", "preset": "veryfast"}
            elif frame.shape[:2] != (stream.height, stream.width):
                raise ValueError(f"frame {count} has size {frame.shape[:2]}, expected the first frame's size")
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        if stream is None:
            raise ValueError(f"no frames to write to {path}")
        for packet in stream.encode(None):  # flush the encoder
            container.mux(packet)
    return path


def write_last_frame(video: str | Path, png: str | Path) -> Path:
    """Write the last frame of ``video`` as a PNG (atomically): a video's preview image. Why the last: a
    rollout video ends on the outcome (a failure's class written on its final frame), which frame 0, the
    browser's default preview, never shows."""
    import av
    from PIL import Image

    last = None
    with av.open(str(video)) as container:
        for frame in container.decode(video=0):
            last = frame
    if last is None:
        raise ActlabError("the video has no frames", file=video, fix="record the video again")
    with atomic_file(png, "wb") as f:
        Image.fromarray(last.to_ndarray(format="rgb24")).save(f, format="PNG")
    return Path(png)


def read_video(path: str | Path) -> list[np.ndarray]:
    """Decode every frame of a video as HWC uint8 RGB (for tests and inspection)."""
    import av

    with av.open(str(path)) as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]


def annotate_episode(
    frames: Sequence[np.ndarray],
    outcome: str,
    header: str,
    total_steps: int | None = None,
    success: Sequence[bool] | None = None,
    hold: int = 0,
) -> list[np.ndarray]:
    """Write the header and step counter at the top of every frame, and the outcome at the bottom only
    once it is known: ``SUCCESS`` from the first frame at which the env reported success, a failure's
    class after the episode ended. ``success[t]``: the env's ``is_success`` after step ``t`` (shown on
    frame ``t + 1``; frame 0 is the initial observation). The last frame is repeated ``hold`` more times
    (e.g. one second) with the final outcome on it, so that the end can be read before a player loops."""
    n = total_steps or len(frames)
    flags = list(success or ())
    first = next((t + 1 for t, ok in enumerate(flags) if ok), None)  # frame index of the first success
    good_text, good_color = outcome_text("success")
    out = []
    for i, f in enumerate(frames):
        shown = first is not None and i >= first
        out.append(
            draw_text(
                f,
                top=f"{header}  step {i}/{n}",
                bottom=good_text if shown else None,
                bottom_color=good_color,
            )
        )
    if frames:
        text, color = outcome_text(outcome)
        end = draw_text(frames[-1], top=f"{header}  step {n}/{n}, ended", bottom=text, bottom_color=color)
        out[-1:] = [end] * (1 + hold)
    return out
