"""``actlab data doctor``: find what is wrong with a dataset, each problem with its fix.

Every finding is a record (check, file, field, expected, found, fix, severity, episodes). The cheap
checks are the reader's own (:mod:`actlab.datasets.layout` and :mod:`actlab.datasets.rows`, run here with
a collecting report): readable metadata (info.json types included), the tasks table, episode indices
0..E-1, missing files and columns, columns info.json does not list, text where numbers belong, length
mismatches (episodes vs data rows vs info totals), rows out of their episode's range, NaN/inf,
non-monotonic or off-grid timestamps. The doctor adds the recording checks
(:mod:`actlab.datasets.recording`: frozen or pinned actions, dead state joints, short and repeated
episodes, actions equal to or lagging the state), the checks that read video files (frame count vs
episode length, size and codec vs info.json, sampled frames that are black, frozen or do not decode) and
those of stats.json. Severities: "error" (the data is wrong), "warning" (likely a recording fault),
"note" (worth a look); each episode gets a score from the findings that name it.
A check that cannot run because the dataset is too broken becomes a problem too; the doctor itself
never raises on a broken dataset.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from actlab.datasets import checksums, layout, rows
from actlab.datasets import format as fmt
from actlab.datasets.recording import check_recording
from actlab.datasets.records import REEXPORT, SEVERITIES, EpisodeInfo, Problem, Report
from actlab.datasets.video import VideoDecoder, packet_times, video_info
from actlab.errors import ActlabError
from actlab.utils.io import not_a_file, read_json

__all__ = ["DoctorResult", "EpisodeScore", "Problem", "diagnose", "examine"]

# Image std below this (in [0, 1] units) normalizes ordinary pixels to hundreds of standard deviations.
IMAGE_STD_MIN = 0.01

RESTATS = "recompute with `actlab data stats PATH --write-meta`"


class _Doctor:
    """The checks only the doctor runs (video files, stats.json), on a parsed layout."""

    def __init__(self, lay: layout.Layout, report: Report) -> None:
        self.root = lay.root
        self.layout = lay
        self.info = lay.info
        self.report = report
        self.add = report.add
        # feature -> (N, ...) array of the data files, when they could be read (the stats are checked
        # against them)
        self.columns: dict[str, np.ndarray] = {}
        # (caption, (S, H, W, 3) uint8 sampled frames) of episodes a camera check flagged, for the report
        self.frames: list[tuple[str, np.ndarray]] = []

    def check_names(self) -> None:
        """A vector feature's ``names`` list one name per value: a list of another length (5 names for 6
        action values) passed the doctor and training without a word, and mislabels every value after the
        gap in whatever reads the names (LeRobot maps them to the robot's motors)."""
        for key, spec in self.info["features"].items():
            names, shape = spec.get("names"), spec.get("shape")
            if spec.get("dtype") in ("video", "image") or not isinstance(names, list):
                continue
            if not (isinstance(shape, list) and len(shape) == 1) or len(names) == shape[0]:
                continue
            self.add(
                "names",
                f"feature {key!r} has {len(names)} names for {shape[0]} values",
                self.root / "meta" / "info.json",
                f"features.{key}.names",
                f"{shape[0]} names (one per value of shape {shape})",
                f"{len(names)}: {names[:8]}" + (" ..." if len(names) > 8 else ""),
                "list one name per value in meta/info.json (or re-export the dataset)",
                severity="warning",
            )

    def check_videos(self) -> None:
        fps = float(self.info["fps"])
        tol = fmt.TIMESTAMP_TOLERANCE_S
        for key, spec in self.info["features"].items():
            if spec.get("dtype") != "video":
                continue
            by_file: dict[Path, list[EpisodeInfo]] = {}
            for e in self.layout.episodes:
                if key in e.videos:  # a missing location is reported by the layout checks
                    by_file.setdefault(self.root / e.videos[key][0], []).append(e)
            for path, eps in by_file.items():
                if not path.is_file():
                    # (a FIFO or a directory there was said as "missing", as the reader says what it is)
                    what = not_a_file(path)
                    self.add(
                        "missing_file",
                        f"video file is {what}, not a file" if what else "video file missing",
                        path,
                        key,
                        "an mp4 file",
                        what or "missing",
                        REEXPORT,
                    )
                    continue
                vi = video_info(path)
                self._check_codec(path, key, spec, vi)
                h, w = spec["shape"][0], spec["shape"][1]
                if (vi["height"], vi["width"]) != (h, w):
                    self.add(
                        "video_size",
                        "video frame size differs from info.json",
                        path,
                        f"features.{key}.shape",
                        f"{h}x{w}",
                        f"{vi['height']}x{vi['width']}",
                        "fix the shape in info.json or re-encode the video",
                    )
                times = packet_times(path)
                self._check_unclaimed_frames(path, key, eps, times)
                for e in eps:
                    _, lo, hi = e.videos[key]
                    count = int(np.count_nonzero((times >= lo - tol) & (times < hi - tol)))
                    if count != e.length:
                        self.add(
                            "video_frames",
                            f"episode {e.index}: video frames differ from episode length",
                            path,
                            f"{key} episode {e.index} [{lo:.4f}, {hi:.4f}) s",
                            f"{e.length} frames",
                            count,
                            "re-encode the episode's video from its source frames or re-record it",
                        )
                    elif abs((hi - lo) - e.length / fps) > tol:
                        self.add(
                            "video_frames",
                            f"episode {e.index}: to_timestamp - from_timestamp != length / fps",
                            self.layout.episodes_file,
                            f"videos/{key}/to_timestamp",
                            f"{lo + e.length / fps:.6f}",
                            f"{hi:.6f}",
                            REEXPORT,
                        )

    def _check_codec(self, path: Path, key: str, spec: dict, vi: dict) -> None:
        """The codec of the file against info.json's ``video.codec``: readers pick their decoder and
        encoder settings from it, and a file re-encoded or copied in from another recording is the
        usual cause of a mismatch."""
        declared = (spec.get("info") or {}).get("video.codec")
        found = vi.get("codec_id")
        if declared and found and str(declared).lower() != found:
            self.add(
                "video_codec",
                f"the video's codec is not the one info.json declares for {key}",
                path,
                f"features.{key}.info.video.codec",
                declared,
                f"{found} (decoded by {vi['codec']})",
                "the file was re-encoded or copied in from another recording: re-encode it from the "
                f"episodes' source frames as {declared} (or correct info.json if every file is {found})",
                "warning",
                sorted(
                    {
                        e.index
                        for e in self.layout.episodes
                        if key in e.videos and self.root / e.videos[key][0] == path
                    }
                ),
            )

    def _check_unclaimed_frames(
        self, path: Path, key: str, eps: list[EpisodeInfo], times: np.ndarray
    ) -> None:
        """Frames of the file that belong to no episode: the file is longer than the metadata says (a
        video replaced by another recording, or appended to), so its frame count and duration differ
        from the episodes'. The per-episode counts cannot see frames past the last episode's range."""
        tol = fmt.TIMESTAMP_TOLERANCE_S
        claimed = np.zeros(len(times), dtype=bool)
        for e in eps:
            _, lo, hi = e.videos[key]
            claimed |= (times >= lo - tol) & (times < hi - tol)
        extra = int((~claimed).sum())
        if extra:
            want = sum(e.length for e in eps)
            span = float(times.max() - times.min()) + 1 / float(self.info["fps"]) if len(times) else 0.0
            self.add(
                "video_frames",
                f"{extra} frame(s) of the video belong to no episode",
                path,
                key,
                f"{want} frames ({want / float(self.info['fps']):.3f} s) for episodes "
                f"{', '.join(str(e.index) for e in eps[:5])}{' ...' if len(eps) > 5 else ''}",
                f"{len(times)} frames ({span:.3f} s), first unclaimed at {float(times[~claimed][0]):.4f} s",
                "the video is not the one the episodes were written with: restore it from a copy or "
                "re-encode it from the episodes' frames",
            )

    def sample_cameras(self, samples: int) -> None:
        """Decode ``samples`` frames of every episode of every video camera (one seek each: with the
        writers' keyframe every 2 frames a sample decodes at most 2 frames, 8 of a 160-frame episode's
        for 4 samples; with the seeks, about a seventh of the CPU of decoding it once, measured in
        docs/benchmarks.md) and look for a black picture, a frozen one and frames that do not decode.
        Thresholds are relative to the camera's typical episode."""
        fps = float(self.info["fps"])
        for key, spec in self.info["features"].items():
            if spec.get("dtype") != "video":
                continue
            seen: dict[int, tuple[float, float, float]] = {}  # episode -> (mean, std, diff)
            stacks: dict[int, np.ndarray] = {}  # episode -> its sampled frames
            broken: list[tuple[EpisodeInfo, str]] = []
            by_file: dict[Path, list[EpisodeInfo]] = {}
            for e in self.layout.episodes:
                if key in e.videos:
                    by_file.setdefault(self.root / e.videos[key][0], []).append(e)
            for path, eps in by_file.items():
                if not path.is_file():
                    continue  # reported by check_videos
                dec = VideoDecoder(path)
                try:
                    for e in eps:
                        lo = e.videos[key][1]
                        # interior frames (the arm rests alike at both ends of an episode)
                        pick = np.unique(((np.arange(samples) + 0.5) / samples * e.length).astype(int))
                        try:
                            frames = [
                                dec.frames_at([lo + k / fps], fmt.TIMESTAMP_TOLERANCE_S)[0] for k in pick
                            ]
                        except Exception as err:  # any decoder failure is the finding
                            broken.append((e, f"{type(err).__name__}: {err}"[:200]))
                            continue
                        stack = np.stack(frames).astype(np.float32)  # (S, H, W, 3)
                        diff = float(np.abs(np.diff(stack, axis=0)).mean()) if len(stack) > 1 else np.nan
                        seen[e.index] = (float(stack.mean()), float(stack.std(axis=(1, 2, 3)).max()), diff)
                        stacks[e.index] = np.stack(frames)
                finally:
                    dec.close()
            flagged = self._report_cameras(key, seen, broken)
            for check, ep in flagged[:FRAMES_SHOWN]:
                self.frames.append((f"{check}: {key}, episode {ep} (sampled frames)", stacks[ep]))

    def _report_cameras(
        self, key: str, seen: dict[int, tuple[float, float, float]], broken: list[tuple[EpisodeInfo, str]]
    ) -> list[tuple[str, int]]:
        """The camera findings of one camera; returns (check, episode) of each flagged episode."""
        where = {e.index: e for e in self.layout.episodes}

        def file(ep: int) -> Path:
            return self.root / where[ep].videos[key][0]

        if broken:
            eps = [e.index for e, _ in broken]
            self.add(
                "video_decode",
                f"frames of {key} do not decode in {len(eps)} episode(s)",
                file(eps[0]),
                key,
                "frames that decode",
                f"episode {eps[0]}: {broken[0][1]}",
                "re-encode the episodes' video from their source frames, or drop them "
                f"(`actlab data curate DATASET --out NEW --drop-episodes {','.join(map(str, eps[:8]))}`)",
                "error",
                eps,
            )
        if not seen:
            return []
        means = np.array([v[0] for v in seen.values()])
        diffs = np.array([v[2] for v in seen.values() if np.isfinite(v[2])])
        typical_mean = float(np.median(means))
        typical_diff = float(np.median(diffs)) if len(diffs) else 0.0
        black = [ep for ep, (m, sd, _) in seen.items() if m < BLACK_MEAN and sd < BLACK_STD]
        if black and typical_mean >= BRIGHT:
            self.add(
                "black_camera",
                f"camera {key} is black in {len(black)} episode(s)",
                file(black[0]),
                key,
                f"a picture like the camera's typical episode (mean brightness {typical_mean:.0f} of 255)",
                "; ".join(f"episode {ep}: mean {seen[ep][0]:.1f}" for ep in black[:8]),
                "the camera was covered, unplugged or not started: drop the episodes (`actlab data curate "
                f"DATASET --out NEW --drop-episodes {','.join(map(str, black[:8]))}`) or re-record them",
                "warning",
                black,
            )
        limit = min(FROZEN_DIFF, FROZEN_FRACTION * typical_diff)
        frozen = [ep for ep, (_, _, df) in seen.items() if np.isfinite(df) and df < limit and ep not in black]
        if frozen:
            self.add(
                "frozen_camera",
                f"camera {key} shows one still picture in {len(frozen)} episode(s)",
                file(frozen[0]),
                key,
                f"samples that change over the episode (typically by {typical_diff:.1f} of 255)",
                "; ".join(f"episode {ep}: {seen[ep][2]:.2f}" for ep in frozen[:8]),
                "the camera stopped delivering new frames (a frozen driver repeats the last one): "
                f"drop the episodes (`actlab data curate DATASET --out NEW --drop-episodes "
                f"{','.join(map(str, frozen[:8]))}`) or re-record them",
                "warning",
                frozen,
            )
        shown = [("black_camera", ep) for ep in black] if typical_mean >= BRIGHT else []
        return shown + [("frozen_camera", ep) for ep in frozen]

    def check_checksums(self) -> None:
        """Files whose content differs from the sha256 the writer recorded (bytes damaged on disk or in a
        copy: an mp4 mostly still decodes, into wrong pixels)."""
        files, why = checksums.load(self.root, self.info)
        if files is None:
            if "stale" in (why or "") or "unreadable" in (why or ""):
                file = self.root / checksums.CHECKSUMS_PATH
                fix = "nothing to do if the dataset was edited on purpose; delete the record to silence this"
                self.add(
                    "checksum",
                    "content checksums not checked",
                    file,
                    "(file)",
                    "a current record",
                    why,
                    fix,
                    "note" if "stale" in (why or "") else "warning",  # edited on purpose vs damaged
                )
            return
        for rel, expected, found in checksums.damaged(self.root, self.info, "videos/"):  # data: read_data
            self.add(
                "checksum",
                "file content differs from what the dataset was written with",
                self.root / rel,
                f"{checksums.CHECKSUMS_PATH} files.{rel}",
                expected,
                found,
                checksums.REPAIR,
            )

    def check_stats(self) -> None:
        path = self.root / fmt.STATS_PATH
        if not path.is_file():
            self.add(
                "missing_stats", "meta/stats.json missing", path, "stats", "a stats file", "missing", RESTATS
            )
            return
        try:
            stats = read_json(path, "stats file")
        except ActlabError as e:
            self.add("unreadable", e.problem, path, "(file)", "valid JSON", "a syntax error", RESTATS)
            return
        if not isinstance(stats, dict):
            self.add(
                "degenerate_stats",
                "stats.json is not an object",
                path,
                "(top level)",
                "{feature: {mean, std, min, max, ...}}",
                type(stats).__name__,
                RESTATS,
            )
            return
        for key, spec in self.info["features"].items():
            if key in fmt.DEFAULT_FEATURES or spec.get("dtype") == "string":
                continue
            if key not in stats:
                check = "missing_image_stats" if fmt.is_camera(spec) else "missing_stats"
                self.add(check, f"no stats for {key!r}", path, key, "mean/std/min/max", "missing", RESTATS)
                continue
            st = stats[key]
            if not isinstance(st, dict):
                self.add(
                    "degenerate_stats",
                    f"stats of {key!r} are not an object",
                    path,
                    key,
                    "{mean, std, min, max, ...}",
                    type(st).__name__,
                    RESTATS,
                )
                continue
            missing = [s for s in ("mean", "std", "min", "max") if s not in st]
            if missing:
                self.add(
                    "missing_stats",
                    f"stats of {key!r} lack {missing}",
                    path,
                    key,
                    "mean, std, min, max",
                    sorted(st),
                    RESTATS,
                )
                continue
            try:
                mean, std = np.asarray(st["mean"], float), np.asarray(st["std"], float)
            except (TypeError, ValueError):
                self.add(
                    "degenerate_stats",
                    f"stats of {key!r} are not numbers",
                    path,
                    f"{key}.mean/std",
                    "numbers or nested lists of numbers",
                    f"{st['mean']!r}, {st['std']!r}"[:120],
                    RESTATS,
                )
                continue
            if not (np.isfinite(mean).all() and np.isfinite(std).all()):
                self.add(
                    "degenerate_stats",
                    f"stats of {key!r} hold NaN or inf",
                    path,
                    f"{key}.mean/std",
                    "finite values",
                    f"mean {mean.ravel().tolist()}, std {std.ravel().tolist()}",
                    RESTATS,
                )
                continue
            if fmt.is_camera(spec):
                self._check_image_stats(path, key, mean, std)
            else:
                self._check_vector_stats(path, key, spec, mean, std)

    def _check_image_stats(self, path: Path, key: str, mean: np.ndarray, std: np.ndarray) -> None:
        if mean.size != 3 or std.size != 3:
            self.add(
                "degenerate_stats",
                f"image stats of {key!r} are not per channel",
                path,
                f"{key}.std",
                "shape (3, 1, 1)",
                list(std.shape),
                RESTATS,
            )
            return
        if mean.max() > 1.5:
            self.add(
                "degenerate_stats",
                f"image stats of {key!r} look like 0-255 units",
                path,
                f"{key}.mean",
                "per-channel values in [0, 1]",
                mean.ravel().round(3).tolist(),
                RESTATS,
            )
            return
        low = std.ravel() < IMAGE_STD_MIN
        if low.any():
            worst = float(std.ravel().min())
            span = 0.5 / max(worst, 1e-12)
            self.add(
                "degenerate_stats",
                f"image std of {key!r} is near zero",
                path,
                f"{key}.std",
                f">= {IMAGE_STD_MIN} per channel",
                f"{std.ravel().round(4).tolist()} (normalizes pixels to about ±{span:.0f})",
                RESTATS,
            )

    def _check_vector_stats(
        self, path: Path, key: str, spec: dict, mean: np.ndarray, std: np.ndarray
    ) -> None:
        want = int(np.prod(spec["shape"]))
        if std.size != want:
            self.add(
                "degenerate_stats",
                f"stats of {key!r} have the wrong size",
                path,
                f"{key}.std",
                f"{want} values",
                std.size,
                RESTATS,
            )
            return
        self._check_against_data(path, key, mean, std)
        zero = np.flatnonzero(std.ravel() < 1e-8)
        if zero.size:
            self.add(
                "degenerate_stats",
                f"{key!r} dims {zero.tolist()} never change (std 0)",
                path,
                f"{key}.std",
                "> 0",
                std.ravel()[zero].tolist(),
                "fine if those joints are unused; otherwise check the recording",
                "note",
            )

    def _check_against_data(self, path: Path, key: str, mean: np.ndarray, std: np.ndarray) -> None:
        """stats.json's mean/std against the data's own: LeRobot normalizes with stats.json, so numbers
        changed there (edited, damaged, or left from before episodes were removed) train a LeRobot policy
        on wrongly scaled inputs without a word. Tolerance: a mean off by more than 5% of the std, or a
        std off by more than 5%, far above float32 accumulation error (about 1e-6)."""
        col = self.columns.get(key)
        if col is None or not len(col) or not np.isfinite(col).all():
            return  # unreadable or non-finite data are reported by the data checks
        flat = col.reshape(len(col), -1).astype(np.float64)
        m, s = flat.mean(axis=0), flat.std(axis=0)
        # A dim that never changes has std 0 in the data; a writer that aggregates E[x^2] - E[x]^2 in
        # float32 (lerobot 0.6.1) stores a few 1e-3 of the value instead (0.088 for a joint held at 40.1):
        # a rounding residue, harmless (the dim normalizes to 0 either way), not an edit.
        # So such a dim's std may be up to 1% of its value (4x the 0.22% measured), and every mean may
        # differ by float32 rounding of the value (1e-5 relative: ~80 float32 steps).
        scale = np.maximum(s, 1e-6)
        std_ok = np.where(s < 1e-6, 0.01 * np.abs(m) + 1e-6, 0.05 * scale)
        mean_ok = 0.05 * scale + 1e-5 * np.abs(m)
        off = (np.abs(mean.ravel() - m) > mean_ok) | (np.abs(std.ravel() - s) > std_ok)
        if off.any():
            d = int(np.flatnonzero(off)[0])
            self.add(
                "stats_mismatch",
                f"stats.json of {key!r} disagree with the data ({int(off.sum())} dim(s))",
                path,
                f"{key}.mean/std",
                f"dim {d}: mean {m[d]:.6g}, std {s[d]:.6g} (computed from the data files)",
                f"dim {d}: mean {mean.ravel()[d]:.6g}, std {std.ravel()[d]:.6g}",
                RESTATS,
            )


# Samples per episode and camera decoded by the content checks (black, frozen, undecodable frames).
VIDEO_SAMPLES = 4
# A sampled frame darker than this mean (0-255) with less spread than BLACK_STD is black, when the
# camera's typical episode is at least BRIGHT (a dark scene is not a black camera).
BLACK_MEAN, BLACK_STD, BRIGHT = 10.0, 5.0, 30.0
# An episode whose samples differ by less than FROZEN_DIFF (mean |difference|, 0-255) and by less than
# FROZEN_FRACTION of the camera's typical difference between samples is a frozen picture.
FROZEN_DIFF, FROZEN_FRACTION = 1.0, 0.1
# Flagged episodes per camera whose sampled frames the report shows.
FRAMES_SHOWN = 4
# Score lost per finding of each severity (an episode starts at 1.0; the score never goes below 0).
PENALTY = {"error": 1.0, "warning": 0.4, "note": 0.1}


@dataclasses.dataclass(frozen=True)
class EpisodeScore:
    """One episode's quality: 1.0 with no finding, less per finding that names it."""

    # episode index
    episode: int
    # frames of the episode
    length: int
    # 1.0 - the sum of PENALTY over the findings naming it, at least 0
    score: float
    # "severity check" of each finding naming it
    reasons: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "reasons": list(self.reasons)}


@dataclasses.dataclass(frozen=True)
class DoctorResult:
    """Everything the doctor found: the findings and a score per episode."""

    # the dataset (absolute, as resolved)
    root: Path
    # every finding, in the order the checks ran
    problems: list[Problem]
    # one per episode of the metadata (empty when the metadata could not be read)
    episodes: list[EpisodeScore]
    # frames decoded per episode and camera by the content checks (0: not sampled)
    video_samples: int
    # (caption, (S, H, W, 3) uint8) sampled frames of the episodes a camera check flagged (not in as_dict)
    frames: list[tuple[str, np.ndarray]] = dataclasses.field(default_factory=list)

    def count(self, severity: str) -> int:
        return sum(p.severity == severity for p in self.problems)

    def exit_code(self, fail_on: str = "error") -> int:
        """1 when a finding is at least as grave as ``fail_on`` ("error" or "warning"), else 0."""
        worst = SEVERITIES[: SEVERITIES.index(fail_on) + 1]
        return int(any(p.severity in worst for p in self.problems))

    def summary(self) -> str:
        return ", ".join(f"{self.count(s)} {s}(s)" for s in SEVERITIES)

    def as_dict(self) -> dict[str, Any]:
        return {
            "root": str(self.root),
            "counts": {s: self.count(s) for s in SEVERITIES},
            "video_samples": self.video_samples,
            "problems": [p.as_dict() for p in self.problems],
            "episodes": [e.as_dict() for e in self.episodes],
        }


def score_episodes(episodes: list[EpisodeInfo], problems: list[Problem]) -> list[EpisodeScore]:
    """Each episode's score and the findings behind it."""
    reasons: dict[int, list[str]] = {e.index: [] for e in episodes}
    lost: dict[int, float] = dict.fromkeys(reasons, 0.0)
    for p in problems:
        for ep in dict.fromkeys(p.episodes):
            if ep in reasons:
                reasons[ep].append(f"{p.severity} {p.check}")
                lost[ep] += PENALTY.get(p.severity, 0.0)
    return [
        EpisodeScore(e.index, e.length, round(max(0.0, 1.0 - lost[e.index]), 3), tuple(reasons[e.index]))
        for e in episodes
    ]


def examine(path: str | Path, video_samples: int = VIDEO_SAMPLES) -> DoctorResult:
    """Every finding about the dataset at ``path`` and a score per episode.

    The same parse and cheap checks as :func:`actlab.datasets.open_dataset` (which raises the first
    error), every problem collected, then the recording checks (:mod:`actlab.datasets.recording`), the
    video files, ``video_samples`` decoded frames per episode and camera (0: none) and the stats.
    """
    report = Report(Path(path), strict=False)
    lay = layout.parse(path, report)
    if lay is None:
        return DoctorResult(report.root, report.problems, [], video_samples)
    data = report.stage("data", lambda: rows.read_data(lay, report))
    d = _Doctor(lay, report)
    d.columns = data.columns if data is not None else {}
    if data is not None:
        report.stage("recording", lambda: check_recording(lay, data.columns, report))
    report.stage("names", d.check_names)
    report.stage("videos", d.check_videos)
    if video_samples > 0:
        report.stage("video_content", lambda: d.sample_cameras(video_samples))
    report.stage("stats", d.check_stats)
    report.stage("checksums", d.check_checksums)
    return DoctorResult(
        lay.root, report.problems, score_episodes(lay.episodes, report.problems), video_samples, d.frames
    )


def diagnose(path: str | Path, video_samples: int = VIDEO_SAMPLES) -> list[Problem]:
    """All problems found in the dataset at ``path`` (an empty list for a clean dataset); see
    :func:`examine`."""
    return examine(path, video_samples).problems


def warnings_line(path: str | Path) -> str | None:
    """One line naming the recording warnings of the dataset at ``path`` (the doctor's checks that read no
    video: about 3 s of CPU on the demo's 300 episodes), or None when it has none; what ``actlab train``
    prints before it trains on a dataset whose errors it already refused."""
    found = [p for p in examine(path, video_samples=0).problems if p.severity == "warning"]
    if not found:
        return None
    by_check: dict[str, set[int]] = {}
    for p in found:
        by_check.setdefault(p.check, set()).update(p.episodes)
    parts = []
    for check, eps in sorted(by_check.items()):
        shown = ", ".join(str(e) for e in sorted(eps)[:5]) + (", ..." if len(eps) > 5 else "")
        parts.append(f"{check} (episodes {shown})" if eps else check)
    return (
        f"dataset doctor: {len(found)} warning(s): {'; '.join(parts)}; "
        f"see `actlab data doctor {path}`, `actlab data curate` drops or trims episodes"
    )
