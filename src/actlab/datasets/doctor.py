"""``actlab data doctor``: find what is wrong with a dataset, each problem with its fix.

Every problem is a record (check, file, field, expected, found, fix). The cheap checks are the reader's
own (:mod:`actlab.datasets.layout`, run here with a collecting report): readable metadata (info.json
types included), the tasks table, episode indices 0..E-1, missing files and columns, columns info.json
does not list, text where numbers belong, length mismatches (episodes vs data rows vs info totals), rows
out of their episode's range, NaN/inf, non-monotonic or off-grid timestamps. The doctor adds the checks
that read video files or stats.json: video frame count vs episode length, video size vs info.json,
missing or degenerate stats.
A check that cannot run because the dataset is too broken becomes a problem too; the doctor itself
never raises on a broken dataset.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from actlab.datasets import checksums, layout, rows
from actlab.datasets import format as fmt
from actlab.datasets.records import REEXPORT, Problem, Report
from actlab.datasets.video import packet_times, video_info
from actlab.errors import ActlabError
from actlab.utils.io import read_json

__all__ = ["Problem", "diagnose"]

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

    def check_videos(self) -> None:
        fps = float(self.info["fps"])
        tol = fmt.TIMESTAMP_TOLERANCE_S
        for key, spec in self.info["features"].items():
            if spec.get("dtype") != "video":
                continue
            by_file: dict[Path, list[layout.EpisodeInfo]] = {}
            for e in self.layout.episodes:
                if key in e.videos:  # a missing location is reported by the layout checks
                    by_file.setdefault(self.root / e.videos[key][0], []).append(e)
            for path, eps in by_file.items():
                if not path.is_file():
                    self.add(
                        "missing_file", "video file missing", path, key, "an mp4 file", "missing", REEXPORT
                    )
                    continue
                vi = video_info(path)
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

    def _check_unclaimed_frames(
        self, path: Path, key: str, eps: list[layout.EpisodeInfo], times: np.ndarray
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

    def check_checksums(self) -> None:
        """Files whose content differs from the sha256 the writer recorded (bytes damaged on disk or in a
        copy: an mp4 mostly still decodes, into wrong pixels)."""
        files, why = checksums.load(self.root, self.info)
        if files is None:
            if "stale" in (why or "") or "unreadable" in (why or ""):
                file = self.root / checksums.CHECKSUMS_PATH
                fix = "nothing to do if the dataset was edited on purpose; delete the record to silence this"
                self.add("checksum", "content checksums not checked", file, "(file)", "a current record", why,
                         fix, "warning")  # fmt: skip
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
                "warning",
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
        scale = np.maximum(s, 1e-6)
        off = (np.abs(mean.ravel() - m) > 0.05 * scale) | (np.abs(std.ravel() - s) > 0.05 * scale)
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


def diagnose(path: str | Path) -> list[Problem]:
    """All problems found in the dataset at ``path`` (an empty list for a clean dataset).

    The same parse and cheap checks as :func:`actlab.datasets.open_dataset` (which raises the first
    error), every problem collected, then the video and stats checks.
    """
    report = Report(Path(path), strict=False)
    lay = layout.parse(path, report)
    if lay is None:
        return report.problems
    data = report.stage("data", lambda: rows.read_data(lay, report))
    d = _Doctor(lay, report)
    d.columns = data.columns if data is not None else {}
    report.stage("videos", d.check_videos)
    report.stage("stats", d.check_stats)
    report.stage("checksums", d.check_checksums)
    return report.problems
