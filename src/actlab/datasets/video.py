"""Video encode and decode with PyAV (AV1 via libsvtav1/libdav1d, h264 via libx264), no system ffmpeg.

Frames are HWC uint8 RGB here; the reader and the FrameStore turn them into CHW.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fractions
import heapq
import itertools
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from actlab.errors import ActlabError
from actlab.utils.io import require_file
from actlab.utils.threads import cpu_busy, format_load, load_1m, usable_cpus

# SVT-AV1 prints a banner of ~20 lines per encoder on stderr unless told otherwise (1 = errors only).
os.environ.setdefault("SVT_LOG", "1")

import av
from av.video.reformatter import VideoReformatter

_CODEC_NAMES = {"libsvtav1": "av1", "libaom-av1": "av1", "libx264": "h264", "h264": "h264"}
# VideoOptions.preset when none is given: SVT-AV1's fastest; libx264's "veryfast" (its presets are names).
_DEFAULT_PRESET = {"libsvtav1": "12", "libx264": "veryfast"}


@dataclasses.dataclass(frozen=True)
class VideoOptions:
    """How the writer encodes camera streams (LeRobot's: libsvtav1, yuv420p, gop 2, crf 30, preset 12)."""

    # FFmpeg encoder name: libsvtav1 (AV1, LeRobot's default) or libx264 (h264).
    codec: str = "libsvtav1"
    # Pixel format of the stream; yuv420p needs even frame sizes.
    pix_fmt: str = "yuv420p"
    # Keyframe interval in frames; 2 makes random access cheap (at most one extra frame to decode).
    gop: int = 2
    # Constant rate factor: quality (lower = better, bigger files).
    crf: int = 30
    # Encoder speed preset; "" is the codec's own default here: 12 (SVT-AV1's fastest) for AV1,
    # "veryfast" for libx264 (which takes names, not numbers).
    preset: str = ""
    # Let recording overlap encoding (up to 4 episodes queued per camera); False waits for each episode.
    # Either way the encoder runs on a watched thread (see EncoderThread).
    threaded: bool = True
    # Seconds without a frame encoded after which the encoder counts as hung (an ActlabError).
    stall_s: float = 120.0

    def __post_init__(self) -> None:
        if self.codec not in _CODEC_NAMES:
            raise ActlabError(
                "unsupported video codec", field="codec", expected=", ".join(_CODEC_NAMES), found=self.codec
            )
        if not self.preset:
            object.__setattr__(self, "preset", _DEFAULT_PRESET.get(self.codec, ""))
        if self.gop < 1:
            raise ActlabError("gop must be >= 1", field="gop", expected=">= 1", found=self.gop)
        if not 0 <= self.crf <= 63:
            raise ActlabError("crf out of range", field="crf", expected="0..63", found=self.crf)
        if not self.stall_s > 0:
            raise ActlabError(
                "stall_s must be > 0", field="stall_s", expected="seconds, e.g. 120", found=self.stall_s
            )

    @property
    def codec_name(self) -> str:
        """Codec family as LeRobot records it in ``video.codec`` (``av1``, ``h264``)."""
        return _CODEC_NAMES[self.codec]

    def encoder_options(self) -> dict[str, str]:
        options = {"g": str(self.gop), "crf": str(self.crf)}
        if self.preset:
            options["preset"] = str(self.preset)
        return options


class EncoderStalled(ActlabError):
    """The encoder watchdog's error: the video encoder made no progress for ``VideoOptions.stall_s``.

    Its own class so that a caller that can redo its work from the start (the sim recorder, whose
    episodes are a pure function of their seeds) can tell it from other errors and try once more."""


# The codecs a command that writes video takes (``--codec``): "auto" chooses per machine
# (:func:`auto_video_options`), "av1" and "h264" are kept whatever the machine.
CODEC_CHOICES = ("auto", "av1", "h264")
# The first PyAV whose bundled SVT-AV1 (4.x) "auto" trusts with AV1. av 15-16 (what lerobot 0.6.1's
# `av<16` pin installs: av 15.1.0 bundles SVT-AV1 3.0) carry the SVT-AV1 3.x that deadlocks inside
# svt_av1_enc_send_picture now and then under CPU contention (6 hangs in 2,000 recorder-sized encodes
# with av 16.1.0, `actlab bench encode`); with them "auto" writes h264 (libx264, bundled by every PyAV
# wheel), which LeRobot reads as well.
AV1_MIN_AV = (17,)
# A write whose encoder stalled is run once more from the start (write_video_with_retry).
VIDEO_ATTEMPTS = 2
# The watchdog's period for the commands that write video (write_video_with_retry's default): a frame
# takes milliseconds to encode, so two minutes without one is a stall, however loaded the machine.
STALL_S = 120.0

T = TypeVar("T")


def av_version() -> tuple[int, ...]:
    """The installed PyAV's version as integers (``(15, 1, 0)``); unparsable parts end it."""
    parts: list[int] = []
    for part in av.__version__.split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def codec_video_options(codec: str, stall_s: float = STALL_S) -> VideoOptions:
    """The settings for ``codec``: "av1" is LeRobot's (libsvtav1, crf 30, preset 12, gop 2); "h264" is
    libx264 with the same keyframe interval and quality scale."""
    if codec not in CODEC_CHOICES[1:]:
        raise ActlabError(
            "unknown video codec", field="--codec", expected=" or ".join(CODEC_CHOICES), found=codec
        )
    if codec == "av1":
        return VideoOptions(stall_s=stall_s)
    return VideoOptions(codec="libx264", stall_s=stall_s)


def cpu_busy_now() -> bool:
    """Other work wants more CPUs than this machine has (the caller's own workers not counted yet)."""
    return cpu_busy(load_1m(), usable_cpus(), 0)


def auto_video_options(
    version: tuple[int, ...] | None = None, *, busy: bool = False, stall_s: float = STALL_S
) -> VideoOptions:
    """What "auto" writes: LeRobot's AV1 settings where the PyAV ``version`` (default: the installed one)
    bundles SVT-AV1 4.x and the CPU is not ``busy`` with other work, else h264.

    Why not AV1 on a busy CPU: SVT-AV1 4.x (av 18.1.0) stalls there too: at a load average of 8 on 2
    cores (a test suite and a training run beside a 300-episode recording: no frame for 30 s, twice in a
    row), and once in a CI run of the test suite on 2 cores (64 px noise frames: no frame for 120 s);
    libx264 never stalled (300 recorder-sized encodes under stress, 0 hangs)."""
    trusted = (version or av_version()) >= AV1_MIN_AV
    return codec_video_options("av1" if trusted and not busy else "h264", stall_s)


def write_video_with_retry(
    write: Callable[[VideoOptions], T],
    codec: str | VideoOptions = "auto",
    *,
    stall_s: float | None = None,
    what: str = "writing",
) -> T:
    """Run ``write(video)``, a whole atomic write of a dataset (nothing is left of it when it raises),
    with the ``codec`` chosen ("auto": :func:`auto_video_options` for this machine now; settings given
    as VideoOptions are used as they are).

    A stalled encoder (the watchdog's :class:`EncoderStalled`: rare, seen under CPU contention) leaves
    nothing written, so the write runs once more from the start, in h264 for "auto" (the encoder that
    has never stalled; a chosen codec is kept), and a second stall is the error. Where "auto" chose h264
    the user is told why, after the write (a note never comes before an error). ``stall_s``: the
    watchdog's period (default :data:`STALL_S`)."""
    stall_s = STALL_S if stall_s is None else stall_s
    if codec == "auto":
        video = auto_video_options(busy=cpu_busy_now(), stall_s=stall_s)
        note = None
        if video.codec != VideoOptions().codec:
            why = (
                f"PyAV {av.__version__} bundles SVT-AV1 3.x, which can deadlock"
                if av_version() < AV1_MIN_AV
                else f"the CPUs are busy ({format_load(load_1m(), usable_cpus())}), where SVT-AV1 stalls"
            )
            note = f"note: {why}; the videos are h264 instead of AV1 (LeRobot reads both)"
    elif isinstance(codec, VideoOptions):
        video, note = codec, None
    else:
        video, note = codec_video_options(codec, stall_s), None
    for attempt in range(1, VIDEO_ATTEMPTS + 1):
        try:
            result = write(video)
        except EncoderStalled as e:
            if attempt == VIDEO_ATTEMPTS:
                raise
            if codec == "auto":
                video, note = codec_video_options("h264", stall_s), None
            print(
                f"warning: {e.problem} ({e.file}); nothing was written, {what} again from the start "
                f"with {video.codec} (attempt {attempt + 1} of {VIDEO_ATTEMPTS})",
                file=sys.stderr,
            )
            continue
        if note is not None:
            print(note, file=sys.stderr)
        return result
    raise AssertionError("unreachable")  # pragma: no cover


# The smallest frame side each encoder opens for: SVT-AV1 refuses below 4 px ("Source Width must be at
# least 4"), which reached the user as "a video file cannot be read: it is damaged" (data synth
# --image-size 2).
_MIN_SIDE = {"libsvtav1": 4}


def check_even(height: int, width: int, pix_fmt: str, where: str, codec: str = "libsvtav1") -> None:
    """yuv420p stores chroma at half resolution, so both sides must be even; and each side must be at
    least what the encoder takes (:data:`_MIN_SIDE`)."""
    least = _MIN_SIDE.get(codec, 1)
    if min(height, width) < least:
        raise ActlabError(
            f"{codec} cannot encode frames this small",
            field=where,
            expected=f"height and width of at least {least} px",
            found=f"{height}x{width}",
            fix=f"record or resize to at least {least} px (nothing was written)",
        )
    if pix_fmt == "yuv420p" and (height % 2 or width % 2):
        raise ActlabError(
            "yuv420p video needs an even frame size",
            field=where,
            expected="even height and width",
            found=f"{height}x{width}",
            fix="crop or pad the images by one pixel, or record at an even size",
        )


class VideoEncoder:
    """Encodes RGB frames into one mp4; frame ``i`` of the file gets timestamp ``i / fps`` exactly.

    Packets are muxed in frame order even when the encoder hands them out of order. SVT-AV1 now and then
    returns one GOP's packet ahead of an earlier one under CPU contention (4.1.0, bundled with av 18.1.0:
    3 of 2,000 encodes of 16 px frames in ``actlab bench encode --image-size 16``), e.g. the packets of
    frames 15, 16, 42, 18: the mp4 muxer then refuses the early one ("non monotonically increasing
    dts", PyAV's ``ArgumentError ... returned 22``) and the recording failed. With LeRobot's settings
    (``g=2``) every packet is a whole frame with ``pts == dts`` and every other frame is a key frame, so
    holding an early packet back until the frames before it are muxed gives exactly the stream an
    in-order encoder writes.
    Packets with ``pts != dts`` (an encoder that reorders frames itself, e.g. B-frames) are muxed as they
    come, in the encoder's decode order.
    """

    def __init__(self, path: str | Path, height: int, width: int, fps: int, options: VideoOptions) -> None:
        check_even(height, width, options.pix_fmt, str(path), options.codec)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.height, self.width, self.fps = height, width, fps
        self.frames = 0
        # times a packet came ahead of an earlier frame's, opening a gap (counted by `actlab bench encode`)
        self.reordered = 0
        self._held: list[tuple[int, int, Any]] = []  # (pts, arrival, packet): a heap, earliest frame first
        self._arrival = itertools.count()
        self._next_pts = 0  # the frame whose packet is muxed next
        self._decode_order = False  # a packet with pts != dts came: mux in the encoder's order from then on
        self._tb = fractions.Fraction(1, fps)
        self._container = av.open(str(self.path), "w")
        try:
            self._stream = self._container.add_stream(
                options.codec, rate=fps, options=options.encoder_options()
            )
            self._stream.width, self._stream.height = width, height
            self._stream.pix_fmt = options.pix_fmt
            self._stream.codec_context.time_base = self._tb
        except Exception:
            self._container.close()
            raise

    def encode(self, frames: np.ndarray) -> None:
        """Append ``frames`` (T, H, W, 3) uint8."""
        for img in frames:
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            frame.pts = self.frames
            frame.time_base = self._tb
            self._mux(self._stream.encode(frame))
            self.frames += 1

    def _mux(self, packets: Sequence[Any]) -> None:
        """Mux ``packets`` in frame order (see the class docstring)."""
        for packet in packets:
            if packet.pts is None or packet.pts != packet.dts:
                self._decode_order = True
                self._release(everything=True)
                self._container.mux(packet)
                continue
            if packet.pts > self._next_pts and not self._held:  # a gap opens: an earlier frame is late
                self.reordered += 1
            heapq.heappush(self._held, (packet.pts, next(self._arrival), packet))
            self._release()

    def _release(self, everything: bool = False) -> None:
        """Mux the held packets that are next in frame order (``everything``: all of them, in order)."""
        while self._held and (everything or self._held[0][0] <= self._next_pts):
            pts, _, packet = heapq.heappop(self._held)
            self._container.mux(packet)
            self._next_pts = max(self._next_pts, pts + 1)

    def close(self) -> None:
        """Flush the encoder and finish the file."""
        self._mux(self._stream.encode())
        # A frame's packet never came (a gap before held packets, or none at the end): the file would hold
        # fewer frames than were sent, and the episodes' timestamps would point past its frames.
        if self._held or (not self._decode_order and self._next_pts != self.frames):
            missing = self._next_pts
            self._held.clear()
            self._container.close()
            raise ActlabError(
                "the video encoder returned no packet for a frame",
                file=self.path,
                field="video encoder",
                expected=f"one packet for each of the {self.frames} frames sent",
                found=f"none for frame {missing}",
                fix="run the command again; if it recurs, write h264 (VideoOptions(codec='libx264'))",
            )
        self._container.close()

    def abort(self) -> None:
        """Stop without finishing the file (it is deleted with the temp dir anyway).

        The encoder is still drained first: SVT-AV1 freed without end-of-stream prints "deinit called
        without sending EOS" and can block forever inside its deinit (seen as a hung process).
        """
        with contextlib.suppress(Exception):
            for _packet in self._stream.encode():  # send EOS; the packets are dropped
                pass
        with contextlib.suppress(Exception):
            self._container.close()


class EncoderThread:
    """Runs a sequence of :class:`VideoEncoder` on one background thread, fed through a bounded queue,
    with a watchdog.

    Why a thread: AV1 encoding releases the GIL, so a recorder (or the sim) keeps producing the next
    episode while this thread encodes the previous one (``max_pending`` items may wait; 0 makes every
    call wait until its item is encoded). Errors surface at the next call or at ``finish``.

    Why a watchdog: SVT-AV1 can deadlock inside ``svt_av1_enc_send_picture`` (every encoder thread
    waiting on a semaphore, CPU at 0; public reports against 3.1.x, and seen here with 4.1.0 as bundled by
    PyAV 18.1: a recording on a loaded 2-core machine stopped at episode 13, gdb showing one camera's
    encoder in send_picture, the other's drain in ``svt_av1_enc_get_packet`` and all 80 SVT threads in
    ``sem_wait``). The
    encoding thread records a heartbeat after every frame; a caller that waits on it (a full queue,
    ``finish``) raises :class:`ActlabError` naming the file once the current item has made no progress
    for ``stall_s`` seconds. A thread stuck in C cannot be stopped: it is abandoned (a daemon thread,
    which never touches the files again) and everything after that call fails at once.
    """

    # How often a waiting caller wakes to look at the heartbeat.
    _POLL_S = 0.25
    # The heartbeat's clock (a class attribute so that a test can drive it frame by frame).
    _clock = staticmethod(time.monotonic)

    def __init__(self, max_pending: int = 4, stall_s: float = 120.0) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, max_pending))
        self._sync = max_pending == 0
        self._stall_s = stall_s
        self._error: BaseException | None = None
        self._stalled: EncoderStalled | None = None
        self._encoder: VideoEncoder | None = None
        self._file: Path | None = None  # the file the current item writes (for the error message)
        self.reordered = 0  # times the encoder returned a packet early, in the finished files (VideoEncoder)
        self._busy = False  # an item is being processed
        self._beat = self._clock()  # last sign of progress of the current item
        self._submitted = 0  # items put on the queue (by the one caller thread)
        self._done = 0  # items processed (finished, failed or skipped)
        self._changed = threading.Condition()  # notified after every item
        self._thread = threading.Thread(target=self._run, name="actlab-encoder", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is not None:
                self._beat, self._busy = self._clock(), True
                try:
                    if self._error is None:  # after a failure the rest is skipped
                        self._process(*item)
                except BaseException as e:
                    self._error = e
            if item is None and self._encoder is not None:  # aborted with a file open: drain, drop it
                # The drain calls into the encoder too, and a deadlocked SVT-AV1 blocks there as well
                # (seen: one camera's encoder stuck in send_picture, the other's abort stuck in
                # svt_av1_enc_get_packet, every SVT thread waiting on a semaphore): watched like an item,
                # so abort() gives up on it after stall_s instead of waiting forever.
                self._beat, self._busy = self._clock(), True
                self._encoder.abort()
                self._encoder = None
            with self._changed:
                self._busy = False
                self._done += 1
                self._changed.notify_all()
            if item is None:
                return

    def _process(self, kind: str, payload: Any) -> None:
        if kind == "open":
            self._file = Path(payload[0])
            self._encoder = VideoEncoder(*payload)
        elif kind == "frames":
            assert self._encoder is not None
            for i in range(len(payload)):  # one frame at a time: a heartbeat per frame
                self._encoder.encode(payload[i : i + 1])
                self._beat = self._clock()
        elif kind == "close":
            assert self._encoder is not None
            self._encoder.close()
            self.reordered += self._encoder.reordered
            self._encoder = None

    def _check_stall(self) -> None:
        """Raise the watchdog's error if the current item has stopped making progress."""
        if self._stalled is None and self._busy and self._clock() - self._beat > self._stall_s:
            self._stalled = EncoderStalled(
                f"the video encoder made no progress for {self._stall_s:g} s",
                file=self._file,
                field="video encoder",
                expected="a frame encoded every few milliseconds",
                found=f"no frame for {self._stall_s:g} s inside the encoder library (SVT-AV1 3.x deadlocks, "
                "and 4.x stalled on a CPU at a load average of 8); nothing was written",
                fix="run the command again (the output was left as it was before); if it recurs, write h264 "
                "(--codec h264, or VideoOptions(codec='libx264'); with --codec auto the commands that write "
                "video do so themselves on a busy CPU and after a stall) or run it when the machine is less "
                "busy",
            )
        if self._stalled is not None:
            raise self._stalled

    def raise_error(self) -> None:
        """Raise the encoding error or the watchdog's, if any."""
        self._check_stall()
        if self._error is not None:
            raise self._error

    def _wait_for(self, items: int) -> None:
        """Block until ``items`` items are processed, waking every _POLL_S to run the watchdog."""
        with self._changed:
            while self._done < items and self._thread.is_alive():
                self._check_stall()
                self._changed.wait(self._POLL_S)

    def _put(self, item: Any) -> None:
        while True:
            self._check_stall()
            try:
                self._queue.put(item, timeout=self._POLL_S)
                break
            except queue.Full:
                continue
        self._submitted += 1
        if self._sync:
            self._wait_for(self._submitted)

    def _submit(self, item: Any) -> None:
        self.raise_error()
        self._put(item)
        self.raise_error()

    def open(self, path: Path, height: int, width: int, fps: int, options: VideoOptions) -> None:
        self._submit(("open", (path, height, width, fps, options)))

    def encode(self, frames: np.ndarray) -> None:
        self._submit(("frames", frames))

    def close_file(self) -> None:
        self._submit(("close", None))

    def finish(self) -> None:
        """Wait for all queued work; re-raise an encoding error or the watchdog's."""
        self._put(None)
        self._wait_for(self._submitted)
        self._thread.join()  # it has returned (or is returning) after processing the None
        self.raise_error()

    def abort(self) -> None:
        """Stop without finishing the current file; never waits on a stalled encoder."""
        self._error = self._error or RuntimeError("aborted")
        if not self._thread.is_alive():  # finished (or aborted) already
            return
        try:
            self._put(None)  # the queue drains fast: every item after an error is skipped
            self._wait_for(self._submitted)
        except ActlabError:  # the watchdog fired: abandon the stuck thread; if it ever wakes, it stops
            with contextlib.suppress(queue.Full):
                self._queue.put_nowait(None)


def fit_size(height: int, width: int, image_size: int | None) -> tuple[int, int, int, int]:
    """Resize target for square caching: ``(new_h, new_w, pad_top, pad_left)``.

    The longer side becomes ``image_size`` (aspect ratio kept); the shorter side is padded with black,
    centred, to a square. ``None`` keeps the frame as it is.
    """
    if image_size is None:
        return height, width, 0, 0
    scale = image_size / max(height, width)
    new_h = max(1, round(height * scale))
    new_w = max(1, round(width * scale))
    return new_h, new_w, (image_size - new_h) // 2, (image_size - new_w) // 2


def _open_input(path: Path):
    require_file(
        path,
        "video file missing or not a file",
        field="(file)",
        expected="an mp4 file",
        fix="restore the file or re-record the dataset",
    )
    try:
        container = av.open(str(path))
    except av.error.FFmpegError as e:
        raise ActlabError(
            "cannot open video",
            file=path,
            field="(file)",
            expected="a readable mp4",
            found=str(e),
            fix="restore the file, re-encode it or re-record the dataset",
        ) from e
    if not container.streams.video:
        container.close()
        raise ActlabError(
            "no video stream in file",
            file=path,
            field="(file)",
            expected="one video stream",
            found="none",
            fix="restore the file, re-encode it or re-record the dataset",
        )
    return container


def iter_decode(path: str | Path, image_size: int | None = None) -> Iterator[tuple[float, np.ndarray]]:
    """Decode a whole file in order: ``(timestamp_s, HWC uint8)``, optionally resized and square-padded."""
    container = _open_input(Path(path))
    try:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"  # frame threads in dav1d: sequential decode is the fast path
        reformatter = VideoReformatter()
        for frame in container.decode(stream):
            if frame.pts is None:
                continue
            yield float(frame.time), to_rgb(frame, image_size, reformatter)
    finally:
        container.close()


def to_rgb(frame: Any, image_size: int | None = None, reformatter: Any = None) -> np.ndarray:
    """An ``av.VideoFrame`` as HWC uint8 RGB; resized by swscale (area filter) and padded with numpy.

    ``reformatter``: an ``av.video.reformatter.VideoReformatter`` kept across the frames of a file. It
    keeps its swscale context; ``frame.to_ndarray(format="rgb24")`` sets one up for every frame, which
    at the CPU demo's 80 px made the conversion 5x slower than the AV1 decode itself (1,200 instead of
    4,100-6,000 frames/s with PyAV 18.1, the pixels identical)."""
    if reformatter is None:
        reformatter = VideoReformatter()
    if image_size is None:
        return reformatter.reformat(frame, format="rgb24").to_ndarray()
    new_h, new_w, top, left = fit_size(frame.height, frame.width, image_size)
    small = reformatter.reformat(
        frame, width=new_w, height=new_h, format="rgb24", interpolation="AREA"
    ).to_ndarray()
    if new_h == image_size and new_w == image_size:
        return small
    out = np.zeros((image_size, image_size, 3), dtype=np.uint8)
    out[top : top + new_h, left : left + new_w] = small
    return out


class VideoDecoder:
    """Random access by timestamp into one file; keeps the container open between calls."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._container = _open_input(self.path)
        self._stream = self._container.streams.video[0]
        self._tb = self._stream.time_base
        self._reformatter = VideoReformatter()  # one swscale context for every frame (see to_rgb)

    def frames_at(self, timestamps: Sequence[float], tolerance_s: float) -> list[np.ndarray]:
        """Frames (HWC uint8) whose timestamps match ``timestamps`` within ``tolerance_s``.

        Seeks to the keyframe before the earliest timestamp and decodes forward, as LeRobot's pyav
        backend does; with gop 2 that is at most one extra frame.
        """
        wanted = sorted(set(float(t) for t in timestamps))
        found: dict[float, np.ndarray] = {}
        target = int((wanted[0] - tolerance_s) / self._tb) if wanted[0] > tolerance_s else 0
        self._container.seek(max(target, 0), stream=self._stream, backward=True, any_frame=False)
        pending = list(wanted)
        for frame in self._container.decode(self._stream):
            if frame.pts is None:
                continue
            t = float(frame.time)
            img = None
            while pending and abs(t - pending[0]) <= tolerance_s:
                img = to_rgb(frame, None, self._reformatter) if img is None else img
                found[pending.pop(0)] = img
            if not pending or t > pending[0] + tolerance_s:
                break  # done, or the next wanted timestamp was skipped over: it does not exist
        if pending:
            raise ActlabError(
                "video frame not found at the requested timestamp",
                file=self.path,
                field="timestamp",
                expected=f"a frame within {tolerance_s} s of {pending[0]:.6f} s",
                found="no such frame (the video is shorter or its timestamps are off-grid)",
                fix="run `actlab data doctor` on the dataset",
            )
        return [found[float(t)] for t in timestamps]

    def close(self) -> None:
        self._container.close()


def packet_times(path: str | Path) -> np.ndarray:
    """Presentation times (s) of every video packet, sorted, without decoding: a cheap frame count."""
    container = _open_input(Path(path))
    try:
        stream = container.streams.video[0]
        tb = float(stream.time_base)
        pts = [p.pts for p in container.demux(stream) if p.pts is not None and p.size > 0]
    finally:
        container.close()
    return np.sort(np.asarray(pts, dtype=np.float64) * tb)


def video_info(path: str | Path) -> dict[str, Any]:
    """Height, width, codec and pixel format of the first video stream: ``codec`` the decoder's name
    (libdav1d), ``codec_id`` the format's (av1, h264, hevc: what info.json's ``video.codec`` names)."""
    container = _open_input(Path(path))
    try:
        cc = container.streams.video[0].codec_context
        return {
            "height": cc.height,
            "width": cc.width,
            "codec": cc.name,
            "codec_id": cc.codec.canonical_name,
            "pix_fmt": cc.pix_fmt,
        }
    finally:
        container.close()
