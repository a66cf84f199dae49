"""``actlab data curate``: a new dataset without the episodes (or frames) the doctor found bad.

The input is only read: the output is a new LeRobot v3.0 dataset written by
:class:`~actlab.datasets.writer.DatasetWriter` (a temporary directory renamed into place on success; an
existing ``--out``, or one that is, holds or lies inside the input, is refused before anything is read).
Episodes are re-indexed 0..E-1, videos re-encoded from the decoded frames of the kept range (the
writer's encoder settings), ``meta/stats.json`` and the per-episode stats computed from what was kept,
and ``info.json`` records under :data:`INFO_KEY` the source, and each episode removed or trimmed with
the reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from actlab.datasets import format as fmt
from actlab.datasets import layout, rows
from actlab.datasets.doctor import VIDEO_SAMPLES, examine
from actlab.datasets.records import Layout, Report
from actlab.datasets.video import EncoderStalled, VideoDecoder, VideoOptions, write_video_with_retry
from actlab.datasets.writer import DatasetWriter
from actlab.errors import ActlabError
from actlab.utils.io import check_out_dir

INFO_KEY = "actlab_curation"
KIND = "actlab data curate"


@dataclasses.dataclass(frozen=True)
class CurateSpec:
    """What to remove. Every rule names its reason in the output's metadata."""

    # episode indices to drop (--drop-episodes)
    drop: tuple[int, ...] = ()
    # episode -> (start, stop): keep only frames [start, stop) of that episode (--trim EP:START:END)
    trim: Mapping[int, tuple[int, int]] = dataclasses.field(default_factory=dict)
    # drop episodes whose doctor score is below this (--min-score), None: no score rule
    min_score: float | None = None
    # drop every episode a doctor finding names (--drop-flagged)
    drop_flagged: bool = False
    # frames per episode and camera the doctor decodes for the score rules (0: no video sampling)
    video_samples: int = VIDEO_SAMPLES

    def __post_init__(self) -> None:
        if self.min_score is not None and not 0.0 <= self.min_score <= 1.0:
            raise ActlabError(
                "--min-score is a doctor score", field="--min-score", expected="0..1", found=self.min_score
            )
        for ep, (start, stop) in self.trim.items():
            if not 0 <= start < stop:
                raise ActlabError(
                    f"--trim {ep}:{start}:{stop} keeps no frame",
                    field="--trim",
                    expected="EP:START:END with 0 <= START < END (frames START..END-1 are kept)",
                    found=f"{ep}:{start}:{stop}",
                )

    @property
    def needs_doctor(self) -> bool:
        return self.min_score is not None or self.drop_flagged


def parse_trim(values: Sequence[str]) -> dict[int, tuple[int, int]]:
    """``["3:10:80", ...]`` -> ``{3: (10, 80)}``; an ActlabError naming the bad value."""
    out: dict[int, tuple[int, int]] = {}
    for v in values:
        try:
            ep, start, stop = (int(x) for x in v.split(":"))
        except ValueError:
            raise ActlabError(
                "cannot read --trim", field="--trim", expected="EP:START:END, e.g. 3:0:120", found=v
            ) from None
        if ep in out:
            raise ActlabError(
                "episode trimmed twice", field="--trim", expected="one --trim per episode", found=v
            )
        out[ep] = (start, stop)
    return out


def _plan(lay: Layout, spec: CurateSpec, root: Path) -> tuple[dict[int, str], dict[int, dict[str, Any]]]:
    """(episode -> why it is dropped, episode -> its trim record)."""
    known = {e.index: e for e in lay.episodes}
    for ep in [*spec.drop, *spec.trim]:
        if ep not in known:
            raise ActlabError(
                f"episode {ep} is not in the dataset",
                file=root,
                field="--drop-episodes/--trim",
                expected=f"an episode index 0..{len(known) - 1}",
                found=ep,
            )
    both = sorted(set(spec.drop) & set(spec.trim))
    if both:  # the trim was dropped with its episode without a word
        ep = both[0]
        start, stop = spec.trim[ep]
        raise ActlabError(
            f"--trim {ep}:{start}:{stop} trims episode {ep}, which --drop-episodes drops",
            file=root,
            field="--trim, --drop-episodes",
            expected="each episode either trimmed or dropped",
            found=f"episode {ep} in both",
            fix=f"leave episode {ep} out of --drop-episodes to keep its frames {start}..{stop - 1}, or drop "
            "the --trim",
        )
    dropped = dict.fromkeys(spec.drop, "--drop-episodes")
    if spec.needs_doctor:
        result = examine(root, spec.video_samples)
        for score in result.episodes:
            why = []
            if spec.min_score is not None and score.score < spec.min_score:
                why.append(f"score {score.score:g} < --min-score {spec.min_score:g}")
            if spec.drop_flagged and score.reasons:
                why.append("--drop-flagged")
            if why and score.episode not in dropped:
                dropped[score.episode] = f"{'; '.join(why)} ({', '.join(score.reasons)})"
    trims = {}
    for ep, (start, stop) in spec.trim.items():
        e = known[ep]
        if stop > e.length:
            raise ActlabError(
                f"--trim {ep}:{start}:{stop} reaches past the episode's end",
                file=root,
                field="--trim",
                expected=f"END <= {e.length} (episode {ep} has {e.length} frames)",
                found=stop,
            )
        if ep not in dropped:
            trims[ep] = {"episode": ep, "kept_frames": [start, stop], "of": e.length, "why": "--trim"}
    if len(dropped) == len(known):
        raise ActlabError(
            "curation would drop every episode",
            file=root,
            field="episodes",
            expected="at least one episode kept",
            found=f"{len(dropped)} of {len(known)} dropped",
            fix="drop fewer episodes (a lower --min-score, fewer --drop-episodes)",
        )
    return dropped, trims


# Checks whose errors the copy repairs by how it is written, not by hiding them: the writer numbers the
# global index 0..N-1 and writes each frame's task_index from its episode's task.
_REWRITTEN = ("index", "task_index")


def _refuse_hidden_errors(loose: Report, dropped: Mapping[int, str], root: Path) -> None:
    """Refuse an error of the input in an episode the copy keeps (or of the dataset as a whole): the
    writer renumbers frames and rewrites timestamps, so rows in reverse order, timestamps missing, of
    another clock or text, an unlisted column, a data file changed since it was written were copied into
    a dataset whose doctor said "0 error(s)" (exit 0, not a word of the input's errors)."""
    for p in loose.problems:
        if p.severity != "error" or p.check in _REWRITTEN:
            continue
        kept = [e for e in p.episodes if e not in dropped]
        if p.episodes and not kept:
            continue  # only in episodes the copy drops: the point of dropping them
        drop = ",".join(map(str, kept))
        raise ActlabError(
            f"the input has an error the curated copy would hide (`{p.check}`): {p.problem}",
            file=p.file,
            field=p.field,
            expected=p.expected,
            found=p.found,
            fix=(f"drop the episode (--drop-episodes {drop}, or --drop-flagged), or " if kept else "")
            + f"repair the input: {p.fix} (`actlab data doctor {root}` lists every problem; nothing was "
            "written)",
        )


def curate(
    src: str | Path,
    out: str | Path,
    spec: CurateSpec,
    overwrite: bool = False,
    video: VideoOptions | str = "av1",
) -> dict[str, Any]:
    """Write the curated copy of ``src`` to ``out`` (a new directory; ``overwrite`` replaces only an
    earlier output of this command, never the input); returns a summary with the output's doctor counts.
    ``video``: the settings or a codec name ("auto" chooses for this machine); a stalled encoder curates
    everything once more."""
    root = layout.resolve_root(src)
    check_out_dir(out, KIND, overwrite=overwrite, inputs=[root])
    report = Report(root, strict=True)
    lay = layout.parse(root, report)  # metadata errors raise: nothing can be curated without episodes
    assert lay is not None  # a strict report raises instead
    for key, f in lay.features.items():
        if f.get("dtype") == "image":
            raise ActlabError(
                "curate re-encodes video cameras; this dataset stores PNG images",
                file=root / fmt.INFO_PATH,
                field=f"features.{key}.dtype",
                expected="video",
                found="image",
                fix="convert the images to video first (LeRobot writes video by default)",
            )
    dropped, trims = _plan(lay, spec, root)
    # the rows of kept episodes must be readable; problems of dropped ones are the point of dropping them
    loose = Report(root, strict=False)
    data = rows.read_data(lay, loose)
    if data is None:
        raise ActlabError(
            "the data files cannot be read",
            file=root / "data",
            found="; ".join(p.problem for p in loose.problems[:3]),
            fix=f"`actlab data doctor {root}` names the files",
        )
    user = {k: f for k, f in lay.features.items() if k not in fmt.DEFAULT_FEATURES}
    cams = [k for k, f in user.items() if f.get("dtype") == "video"]
    numeric = [k for k, f in user.items() if fmt.is_numeric(f)]
    unread = [k for k in numeric if k not in data.columns]
    if unread:
        # a column the doctor refused (text, integers where info.json says float, another shape): it was a
        # KeyError traceback of the writer below
        said = [p for p in loose.problems if p.field in (unread[0], f"features.{unread[0]}")]
        raise ActlabError(
            f"column {unread[0]!r} of the data files cannot be read as info.json declares it",
            file=Path(said[0].file) if said else root / "data",
            field=unread[0],
            expected=said[0].expected if said else f"features.{unread[0]} of info.json (dtype, shape)",
            found=said[0].problem if said else "unreadable",
            fix=(said[0].fix if said else "re-export the dataset")
            + f" (`actlab data doctor {root}` lists every problem; nothing was written)",
        )
    _refuse_hidden_errors(loose, dropped, root)
    kept = [e for e in lay.episodes if e.index not in dropped]
    fps = int(lay.info["fps"])

    def write(options: VideoOptions) -> int:
        decoders: dict[Path, VideoDecoder] = {}
        episode_map: list[int] = []
        total = 0
        try:
            with DatasetWriter(
                out,
                fps,
                user,
                robot_type=lay.info.get("robot_type"),
                video=options,
                overwrite=overwrite,
                kind=KIND,
                inputs=[root],
            ) as w:
                for e in kept:
                    start, stop = trims.get(e.index, {}).get("kept_frames", (0, e.length))
                    # one open decoder per video file, opened here: a file that cannot be opened is no
                    # one episode's fault (outside the episode's try below)
                    for k in cams:
                        if root / e.videos[k][0] not in decoders:
                            decoders[root / e.videos[k][0]] = _open_video(root, e.videos[k][0], k, kept)
                    frames: dict[str, np.ndarray] = {}
                    for k in numeric:
                        frames[k] = data.columns[k][e.start + start : e.start + stop]
                    try:
                        # (decoding inside: a video shorter than its episode was said without the
                        # episode, and with "run the doctor" for a fix instead of dropping it)
                        for k in cams:
                            path, lo, _ = e.videos[k]
                            dec = decoders[root / path]  # (opened above)
                            ts = [lo + i / fps for i in range(start, stop)]
                            frames[k] = np.stack(dec.frames_at(ts, fmt.TIMESTAMP_TOLERANCE_S))
                        w.add_episode(frames, task=(e.tasks or ("",))[0] or "task")
                    except EncoderStalled:  # not this episode's fault: the whole write runs again
                        raise
                    except ActlabError as err:
                        if isinstance(err.__cause__, OSError):
                            # a full disk, a read-only one, no permission: not this episode's fault (it was
                            # "episode 1 cannot be written ... fix: drop it (--drop-episodes 1)")
                            raise
                        raise ActlabError(
                            f"episode {e.index} cannot be written: {err.problem}",
                            # the input's video that cannot give a frame, else the episode's data file
                            file=err.file if (err.file or "").startswith(str(root)) else root / e.data_file,
                            field=err.field,
                            expected=err.expected,
                            found=err.found,
                            fix=f"drop it (--drop-episodes {e.index}) or trim the bad frames (--trim)",
                        ) from err
                    episode_map.append(e.index)
                    total += stop - start
                w.add_info(
                    INFO_KEY,
                    {
                        "source": str(root),
                        "source_episodes": len(lay.episodes),
                        "episodes_from_source": episode_map,
                        "removed": [{"episode": ep, "why": why} for ep, why in sorted(dropped.items())],
                        "trimmed": [trims[ep] for ep in sorted(trims)],
                    },
                )
                # the sim recorder's block, for the episodes kept (a trimmed episode starts from the
                # same scene): without it a policy trained on the copy was evaluated on its own training
                # scenes without a word (eval's training-seed check had nothing to check)
                sim = fmt.sim_seeds(lay.info, root / fmt.INFO_PATH)
                if sim is not None:
                    block = {
                        "task": sim["task"],
                        "episode_seeds": [sim["episode_seeds"][i] for i in episode_map],
                    }
                    if sim["units"] != "degrees":
                        block["units"] = sim["units"]
                    w.add_info(fmt.SIM_INFO_KEY, block)
        finally:
            for dec in decoders.values():
                dec.close()
        return total

    total = write_video_with_retry(write, video, what="curating")
    result = examine(out, spec.video_samples)
    return {
        "out": str(Path(out).resolve()),
        "episodes": len(kept),
        "frames": total,
        "removed": {str(k): v for k, v in sorted(dropped.items())},
        "trimmed": [trims[ep] for ep in sorted(trims)],
        "doctor": {s: result.count(s) for s in ("error", "warning", "note")},
    }


def _open_video(root: Path, rel: str, key: str, kept: Sequence[Any]) -> VideoDecoder:
    """The decoder of one video file of the input. A file that is missing, not a file (a directory, a
    FIFO) or not a video was said as "episode 0 cannot be written", fix "drop it (--drop-episodes 0)": the
    next run then failed on episode 1 of the same file. Said now as the file's, with every kept episode
    whose frames it holds."""
    try:
        return VideoDecoder(root / rel)
    except ActlabError as err:
        if isinstance(err.__cause__, OSError) and not isinstance(err.__cause__, FileNotFoundError):
            raise  # a disk or permission error: not the file's content
        held = [e.index for e in kept if key in e.videos and e.videos[key][0] == rel]
        listed = ", ".join(map(str, held))
        raise ActlabError(
            f"a video file of the input cannot be read: {err.problem}",
            file=root / rel,
            field=key,
            expected=err.expected,
            found=err.found,
            fix=f"restore the file from a copy of the dataset (it holds episode(s) {listed}), "
            f"or drop all of them (--drop-episodes {','.join(map(str, held))})",
        ) from err
