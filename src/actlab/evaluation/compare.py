"""``actlab eval compare A B``: two evaluations on the same seeds, compared seed by seed.

An evaluation is a directory ``actlab eval --out`` wrote (``results.json`` or a delay sweep's
``sweep.json``) or such a file; ``PATH#NAME`` picks one checkpoint of a results.json that holds several,
or one cell of a sweep (``async@4``, or ``POLICY/async@4`` when the sweep holds several policies).

What is reported, with n the seeds both ran, b the seeds only B solved and c the seeds only A solved:

- agreement: seeds both solved, both failed, only A, only B (and which seeds differ);
- the success difference ``B - A = (b - c) / n`` with a 95% interval: the Agresti-Min adjusted Wald
  interval for matched proportions (Agresti & Min 2005, "Simple improved confidence intervals for
  comparing matched proportions", Statistics in Medicine 24:729-740): add 1/2 to each of the four
  cells of the 2x2 table, then ``d = (b' - c') / n'`` and
  ``se = sqrt((b' + c') / n' - d^2) / sqrt(n')`` with ``n' = n + 2``;
- McNemar's exact test (:func:`actlab.utils.stats.paired_compare`, the one implementation);
- the episodes a difference of this size would need: Connor's sample size for McNemar's test (Connor
  1987, "Sample size for testing differences in proportions for the paired-sample design", Biometrics
  43:207-211), with the discordant rate ``psi = (b + c) / n`` and the difference ``delta = (b - c) / n``
  this comparison measured, two-sided level alpha and power 80%:
  ``n = (z_{1-alpha/2} sqrt(psi) + z_{0.8} sqrt(psi - delta^2))^2 / delta^2``, rounded up; and at least
  ``k_min / psi`` episodes, where ``k_min = ceil(log2(2 / alpha))`` is the fewest discordant seeds with
  which the exact test can reach p < alpha at all (6 at alpha 0.05: 2 / 2^6 = 0.031, 2 / 2^5 = 0.0625),
  since Connor's normal approximation asks for fewer when the difference is large (psi = delta = 1 gives
  3.84). None when b = c (delta = 0: no sample size detects no difference).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

from actlab.errors import ActlabError
from actlab.utils.io import not_a_file
from actlab.utils.stats import paired_compare

POWER = 0.8  # power of the sample size (the usual 80%)
SHOWN_SEEDS = 5  # seeds named in a refusal or a listing, then the count of the rest
FILES = ("results.json", "sweep.json")


@dataclass(frozen=True)
class Outcomes:
    """Per-seed success of one evaluated policy."""

    label: str  # what the user named (PATH or PATH#NAME)
    name: str  # checkpoint name or sweep cell
    success: dict[int, bool]  # seed -> solved
    file: str = ""  # the results.json / sweep.json read (resolved)
    task: str | None = None  # the task the episodes ran (None: not recorded)
    max_steps: int | None = None  # the episode step limit (None: not recorded)


def _seeds_text(seeds: Sequence[int]) -> str:
    seeds = sorted(seeds)
    head = ", ".join(str(s) for s in seeds[:SHOWN_SEEDS])
    more = f" and {len(seeds) - SHOWN_SEEDS} more" if len(seeds) > SHOWN_SEEDS else ""
    return f"{len(seeds)} seed(s): {head}{more}" if seeds else "none"


def _split(spec: str) -> tuple[Path, str | None]:
    """``PATH#NAME`` -> (PATH, NAME); a ``#`` that belongs to an existing path is kept."""
    if "#" in spec and not Path(spec).exists():
        path, name = spec.rsplit("#", 1)
        return Path(path), name or None
    return Path(spec), None


def _refuse_not_a_file(file: Path, kind: str) -> None:
    raise ActlabError(
        f"the evaluation record is {kind}, not a file",
        file=str(file),
        expected="results.json or sweep.json as actlab eval wrote it (a regular file)",
        found=kind,
        fix="re-run actlab eval to write it again, or pass the --out directory of another evaluation",
    )


def _json_file(path: Path, label: str, name: str | None = None) -> Path:
    if path.name in FILES and path.is_dir():  # results.json given, and a directory
        _refuse_not_a_file(path, "a directory")
    if path.is_dir():
        for f in FILES:  # there, but no file: said as what it is (it was "neither" / "not found")
            kind = not_a_file(path / f)
            if kind is not None:
                _refuse_not_a_file(path / f, kind)
        found = [path / f for f in FILES if (path / f).is_file()]
        if not found and (path / "perturb.json").is_file():  # "not an evaluation directory" before
            raise ActlabError(
                "a robustness sweep (actlab eval --perturb) records counts per level, not each seed's "
                "outcome: it cannot be compared seed by seed",
                file=str(path / "perturb.json"),
                expected="results.json (actlab eval --out) or sweep.json (a delay sweep)",
                found="perturb.json",
                fix="evaluate the two settings with actlab eval --out (the same --seed and --episodes) and "
                "compare those",
            )
        if not found:
            # a demo's eval/ holds its records one level down (sweep/, best/, realtime/): name them
            below = sorted(d for d in path.iterdir() if d.is_dir() and any((d / f).is_file() for f in FILES))
            raise ActlabError(
                "not an evaluation directory",
                file=str(path),
                expected="results.json (actlab eval --out) or sweep.json (a delay sweep)",
                found="neither"
                + (
                    f"; evaluations in its subdirectories: {', '.join(d.name for d in below)}"
                    if below
                    else ""
                ),
                fix=f"pass one of {', '.join(str(d) for d in below)}"
                if below
                else "pass the --out directory of an actlab eval run, or its results.json",
            )
        if len(found) > 1 and name is not None:
            # a sweep's cells are named MODE@DELAY (POLICY/MODE@DELAY), a results.json's checkpoints by
            # their directory: DIR#async@4 names a cell of sweep.json, DIR#step_N a checkpoint
            return path / FILES[1] if "@" in name else path / FILES[0]
        if len(found) > 1:  # (results.json was read without a word; no actlab command writes both)
            raise ActlabError(
                "the directory holds two evaluation records: which one to compare cannot be told",
                file=str(path),
                expected="one of results.json (actlab eval --out) and sweep.json (a delay sweep)",
                found="both",
                fix=f"name the file ({path / FILES[0]} or {path / FILES[1]}), or the record by what it "
                f"holds: {path}#CHECKPOINT (a checkpoint of results.json) or {path}#MODE@DELAY (a cell of "
                "sweep.json, e.g. async@4)",
            )
        return found[0]
    kind = not_a_file(path)
    if kind is not None:
        _refuse_not_a_file(path, kind)
    if not path.is_file():
        raise ActlabError(
            "evaluation not found",
            file=str(path),
            expected="an actlab eval --out directory, results.json or sweep.json",
            found="nothing there",
            fix=f"check the path of {label}",
        )
    if path.suffix.lower() != ".json":
        # results.md, a plot, a video of an evaluation: "not valid JSON, fix: re-run actlab eval" blamed the
        # record for the wrong file
        beside = [path.parent / f for f in FILES if (path.parent / f).is_file()]
        raise ActlabError(
            f"{path.name} is not an evaluation record: compare reads the JSON record an evaluation writes",
            file=str(path),
            expected="results.json (actlab eval --out) or sweep.json (a delay sweep), or their directory",
            found=f"a {path.suffix or 'suffix-less'} file",
            fix=f"pass {beside[0]}" + (f" or {path.parent}" if beside else "")
            if beside
            else "pass the --out directory of an actlab eval run, or its results.json",
        )
    return path


def _pick(names: list[str], name: str | None, path: Path, what: str) -> int:
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:  # two entries of one name: the first was compared, whichever the user meant
        i = [k for k, n in enumerate(names) if n == twice[0]][1]
        key = "checkpoints" if what == "checkpoint" else "cells"
        raise _damaged(
            path, f"{key}[{i}]", f"each {what} once (names: {', '.join(names)})", _Said(f"{twice[0]} again")
        )
    if name is None and len(names) == 1:
        return 0
    if name in names:
        return names.index(name)
    ends = [i for i, n in enumerate(names) if name is not None and n.endswith("/" + name)]
    if len(ends) == 1:
        return ends[0]
    raise ActlabError(
        f"{path} holds {len(names)} {what}s; name the one to compare"
        if name is None
        else f"no {what} {name!r} in {path}",
        file=str(path),
        expected=f"PATH#NAME, NAME one of: {', '.join(names)}",
        found=name or "no #NAME",
        fix=f"e.g. {path.parent if path.name in FILES else path}#{names[-1]}",
    )


class _Said(str):
    """A description of what was found (not a value read from the file)."""


def _damaged(file: Path, field: str, expected: str, found: object) -> ActlabError:
    """``found``: the value as read (shown as Python writes it, so "false" is told from false), or a
    description of what is wrong (a str passed through ``_Said``)."""
    return ActlabError(
        "the evaluation record is damaged (edited, or cut short)",
        file=str(file),
        field=field,
        expected=expected,
        found=str(found) if isinstance(found, _Said) else repr(found)[:120],
        fix="re-run actlab eval to write it again (a compare reads every seed's outcome as written)",
    )


def _seed(value: object, file: Path, field: str) -> int:
    """A seed as actlab eval writes it: an integer (a string of one for a sweep's keys); 100000.7, True
    and "abc" were read as 100000, 1 and a traceback."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _damaged(file, field, "a seed: an integer >= 0", value)
    return value


def _per_seed(pairs: list[tuple[object, bool]], file: Path, field: str) -> dict[int, bool]:
    """seed -> solved, refusing an empty list and a seed given twice (a dict kept the last one, and the
    refusal then named a seed of B as missing from A)."""
    if not pairs:
        raise _damaged(file, field, "at least one episode", _Said("none"))
    out: dict[int, bool] = {}
    for i, (seed, solved) in enumerate(pairs):
        s = _seed(seed, file, f"{field}[{i}].seed")
        if s in out:
            raise _damaged(file, f"{field}[{i}].seed", "each seed once", _Said(f"seed {s} again"))
        out[s] = solved
    return out


def check_checkpoint_entries(checkpoints: object, file: Path) -> None:
    """A results.json's ``checkpoints`` as eval writes it: a list of entries, each checkpoint once, each
    named as its path (the name, or ``.../NAME``). ``policy doctor --sweep`` compared a checkpoint with
    its own second entry, and named a best "step_0000003" whose path was step_0000004, without a word;
    a dict there was "TypeError: string indices must be integers"."""
    if not isinstance(checkpoints, list) or not all(isinstance(c, dict) for c in checkpoints):
        raise _damaged(
            file, "checkpoints", "a list of checkpoint entries, as actlab eval writes it", checkpoints
        )
    names = [c.get("name") for c in checkpoints]
    for i, c in enumerate(checkpoints):
        name, path = c.get("name"), c.get("path")
        if not isinstance(name, str) or not isinstance(path, str):
            raise _damaged(
                file, f"checkpoints[{i}].name/path", "the checkpoint's name and path", (name, path)
            )
        base = Path(path).name
        if name != base and not name.endswith("/" + base):
            raise _damaged(file, f"checkpoints[{i}].name", f"{base!r}, the name of its path {path}", name)
        if names.index(name) != i:
            raise _damaged(
                file,
                f"checkpoints[{i}]",
                f"each checkpoint once (names: {', '.join(names)})",
                _Said(f"{name} again"),
            )


def read_checkpoint_outcomes(chosen: dict, i: int, file: Path) -> dict[int, bool]:
    """seed -> solved of entry ``i`` of a results.json's ``checkpoints``, a damaged entry refused naming
    the field (every reader of a checkpoint sweep reads it so: ``policy doctor --sweep`` too)."""
    field = f"checkpoints[{i}].episodes"
    episodes = chosen.get("episodes")
    if not isinstance(episodes, list):
        raise _damaged(file, field, "a list of {seed, success, ...} as actlab eval writes", episodes)
    pairs = []
    for k, e in enumerate(episodes):
        if not isinstance(e, dict) or "seed" not in e:
            raise _damaged(file, f"{field}[{k}]", "{seed, success, outcome, ...}", e)
        solved = e.get("success")
        if not isinstance(solved, bool):  # "false" was read as solved (bool("false") is True), null as not
            raise _damaged(file, f"{field}[{k}].success", "true or false", solved)
        if "outcome" in e and not isinstance(e["outcome"], str):  # 5 or null was not read at all
            raise _damaged(
                file, f"{field}[{k}].outcome", "an outcome name ('success', 'timeout', ...)", e["outcome"]
            )
        if isinstance(e.get("outcome"), str) and (e["outcome"] == "success") != solved:
            raise _damaged(
                file, f"{field}[{k}]", "success true exactly when outcome is 'success'", e["outcome"]
            )
        pairs.append((e["seed"], solved))
    success = _per_seed(pairs, file, field)
    _check_counts(chosen.get("summary"), success, file, f"checkpoints[{i}].summary")
    return success


def _check_counts(summary: object, success: dict[int, bool], file: Path, field: str) -> None:
    """The record's own counts (``episodes``, ``successes``) agree with its per-seed outcomes: a count
    edited by hand (0/2 -> 2/2) was dropped without a word, the compare reading the outcomes."""
    if not isinstance(summary, dict):
        return
    n, k = len(success), sum(success.values())
    for key, mine in (("episodes", n), ("successes", k)):
        if key in summary and summary[key] != mine:
            raise _damaged(
                file,
                f"{field}.{key}",
                f"{mine}, as its episodes' outcomes count ({k} solved of {n})",
                summary[key],
            )
    # the rate and the failure taxonomy beside them (a rate NaN or 1.0 over 0/4, a taxonomy of 3
    # successes were read without a word: every other count of the record was checked)
    rate = summary.get("success_rate")
    if "success_rate" in summary and not (
        isinstance(rate, (int, float)) and not isinstance(rate, bool) and abs(rate - k / n) <= 1e-9
    ):
        raise _damaged(file, f"{field}.success_rate", f"{k / n:g} ({k} solved of {n})", rate)
    taxonomy = summary.get("outcomes")
    if "outcomes" in summary:
        counts = list(taxonomy.values()) if isinstance(taxonomy, dict) else None
        if (
            counts is None
            or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts)
            or sum(counts) != n
            or taxonomy.get("success", 0) != k
        ):
            raise _damaged(
                file,
                f"{field}.outcomes",
                f"counts per outcome summing to {n}, success {k} (as its episodes' outcomes count)",
                taxonomy,
            )


def _check_total(data: dict, success: dict[int, bool], file: Path) -> None:
    """The record's own ``episodes`` (every checkpoint or cell ran that many): an edited 7 or NaN beside
    4 episodes was not read, while the same count of a checkpoint was refused."""
    if "episodes" in data and data["episodes"] != len(success):
        raise _damaged(file, "episodes", f"{len(success)}, the episodes each entry holds", data["episodes"])


def _check_seed(data: dict, chosen: dict, file: Path) -> None:
    """A results.json's ``seed``: episode i ran seed + i (an edited seed disagreed with the episodes)."""
    seed, episodes = data.get("seed"), chosen.get("episodes") or []
    if seed is None:
        return
    want = [seed + k for k in range(len(episodes))] if isinstance(seed, int) else None
    seeds = [e.get("seed") for e in episodes]
    if want != seeds:  # (found named only the top-level seed: an edited episode seed looked like it)
        # repr: an edited seed "200000" (text) was shown as 200000, the very value expected
        shown = ", ".join(map(repr, seeds[:SHOWN_SEEDS])) + (" ..." if len(seeds) > SHOWN_SEEDS else "")
        raise _damaged(
            file,
            "seed, episodes[].seed",
            "episode i runs seed + i (the seed and the episodes' seeds as actlab eval writes them)",
            _Said(f"seed {seed!r}; the episodes' seeds {shown}"),
        )


def _task(data: dict, file: Path) -> str | None:
    """The task the record's episodes ran (``task``, else ``env.task``; None when it records neither); a
    task edited to null or a number was read as "not recorded" and paired with any other task."""
    env = data.get("env")
    if "task" not in data and not (isinstance(env, dict) and "task" in env):
        return None
    task = data.get("task", env.get("task") if isinstance(env, dict) else None)
    if not isinstance(task, str) or not task:
        raise _damaged(file, "task", "the task the episodes ran (a name, e.g. so101_pick_place)", task)
    return task


def _cell_outcomes(cell: dict, i: int, file: Path) -> dict[int, bool]:
    field = f"cells[{i}].outcomes_by_seed"
    by_seed = cell.get("outcomes_by_seed")
    if not isinstance(by_seed, dict):
        raise ActlabError(
            "the sweep's cells hold no per-seed outcomes (written before actlab recorded them)",
            file=str(file),
            field=field,
            expected="{seed: outcome} per cell",
            found="missing" if by_seed is None else type(by_seed).__name__,
            fix="re-run the sweep with this actlab",
        )
    bad = [o for o in by_seed.values() if not isinstance(o, str) or not o]
    if bad:  # true (or any non-name) was read as a failure: only the string "success" counts as solved
        raise _damaged(file, field, "an outcome name per seed ('success', 'timeout', ...)", bad[0])
    success = _per_seed([(s, o == "success") for s, o in by_seed.items()], file, field)
    _check_counts(cell, success, file, f"cells[{i}]")
    return success


def _entries(data: dict, key: str, file: Path) -> list[dict]:
    entries = data[key]
    if not entries:  # an empty list ended in an IndexError traceback
        raise _damaged(file, key, f"at least one entry in {key}", [])
    for i, e in enumerate(entries):
        ok = isinstance(e, dict) and (
            key == "checkpoints"
            or (isinstance(e.get("mode"), str) and isinstance(e.get("latency_steps"), int) and "policy" in e)
        )
        if not ok:  # a cell without its mode was a KeyError traceback, an entry that is no object another
            want = "an object" if key == "checkpoints" else "an object with policy, mode, latency_steps"
            raise _damaged(file, f"{key}[{i}]", want, e)
    return entries


def _max_steps(data: dict, file: Path) -> int | None:
    env = data.get("env")
    steps = env.get("max_steps") if isinstance(env, dict) else None
    if steps is None:
        return None
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:  # "300" dropped the note
        raise _damaged(file, "env.max_steps", "the episode step limit: an integer >= 1, or null", steps)
    return steps


def load_outcomes(spec: str | Path) -> Outcomes:
    """The per-seed successes of one evaluation named as ``PATH`` or ``PATH#NAME``; a record whose
    episodes are damaged (a success that is no boolean, a seed that is no integer or given twice, no
    episode at all) is refused naming the field, never read as values."""
    path, name = _split(str(spec))
    file = _json_file(path, str(spec), name)
    try:
        data = json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise ActlabError(
            "not valid JSON", file=str(file), found=str(e), fix="re-run actlab eval to write it again"
        ) from None
    where = str(file.resolve())
    if isinstance(data, dict) and isinstance(data.get("checkpoints"), list):
        ckpts = _entries(data, "checkpoints", file)
        i = _pick([str(c.get("name")) for c in ckpts], name, file, "checkpoint")
        success = read_checkpoint_outcomes(ckpts[i], i, file)
        _check_total(data, success, file)
        _check_seed(data, ckpts[i], file)
        task, steps = _task(data, file), _max_steps(data, file)
        return Outcomes(str(spec), str(ckpts[i].get("name")), success, where, task, steps)
    if isinstance(data, dict) and isinstance(data.get("cells"), list):
        cells = _entries(data, "cells", file)
        names = [cell_name(c, cells, several_horizons(data)) for c in cells]
        i = _pick(names, name, file, "cell")
        success = _cell_outcomes(cells[i], i, file)
        _check_total(data, success, file)
        return Outcomes(str(spec), names[i], success, where, _task(data, file), _max_steps(data, file))
    raise ActlabError(
        "not an actlab evaluation record",
        file=str(file),
        expected="a results.json ('checkpoints') or a sweep.json ('cells')",
        found=f"keys {sorted(data)[:6]}" if isinstance(data, dict) else type(data).__name__,
        fix="pass what actlab eval --out wrote",
    )


def cell_name(cell: dict, cells: Sequence[dict], by_horizon: bool = False) -> str:
    """``async@4`` (or ``POLICY/async@4`` when the sweep holds several policies; ``async@4/h8`` when it
    measured several horizons, ``by_horizon``: :func:`several_horizons` of its record)."""
    short = f"{cell['mode']}@{cell['latency_steps']}"
    if by_horizon and cell["mode"] != "sync":
        short += f"/h{cell.get('horizon')}"
    many = len({c["policy"] for c in cells}) > 1
    return f"{cell['policy']}/{short}" if many else short


def several_horizons(record: dict) -> bool:
    """A delay sweep's record (sweep.json) that measured more than one horizon (``--horizon 8,10``, its
    ``horizons``): its cells are named and drawn with their horizon. Read from the record, not guessed from
    its cells: two cells of one mode and delay in a sweep of one horizon are a damaged record."""
    horizons = record.get("horizons")
    return isinstance(horizons, list) and len(horizons) > 1


def paired_interval(n: int, gained: int, lost: int, z: float = 1.959964) -> tuple[float, float]:
    """Agresti-Min 95% interval of the paired difference (B - A) (module docstring)."""
    if n <= 0:
        return (-1.0, 1.0)
    n2 = n + 2.0
    b, c = (gained + 0.5) / n2, (lost + 0.5) / n2
    d = b - c
    half = z * math.sqrt(max(0.0, b + c - d * d) / n2)
    return (max(-1.0, d - half), min(1.0, d + half))


def episodes_needed(n: int, gained: int, lost: int, alpha: float = 0.05, power: float = POWER) -> int | None:
    """Connor's (1987) McNemar sample size for the measured discordant rate and difference (docstring)."""
    if n <= 0 or gained == lost:
        return None
    psi, delta = (gained + lost) / n, (gained - lost) / n
    z_a, z_b = NormalDist().inv_cdf(1 - alpha / 2), NormalDist().inv_cdf(power)
    root = z_a * math.sqrt(psi) + z_b * math.sqrt(max(0.0, psi - delta * delta))
    connor = math.ceil(round(root * root / (delta * delta), 9))
    return max(connor, math.ceil(round(_k_min(alpha) / psi, 9)))


def _k_min(alpha: float) -> int:
    """The fewest discordant seeds with which McNemar's exact test can reach p < alpha: 2 / 2^k < alpha."""
    return math.ceil(math.log2(2 / alpha))


def check_same_episodes(a: Outcomes, b: Outcomes) -> None:
    """Refuse a pair that is no comparison: the same evaluation twice (A compared with itself agreed on
    every seed, "no evidence either way"), or two tasks (seed s of so101_push and of so101_pick_place are
    different scenes: the "same seeds" were paired as if they were the same episodes)."""
    if a.file and a.file == b.file and a.name == b.name:
        raise ActlabError(
            "A and B are the same evaluation",
            field="A, B",
            expected="two evaluations (two --out directories, or two cells or checkpoints of one: PATH#NAME)",
            found=f"{a.label} and {b.label}: {a.name} of {a.file} both times",
            fix="pass the other evaluation as B",
        )
    if (a.task is None) != (b.task is None):  # a record whose task was removed paired with any task
        known, other = (a, b) if a.task is not None else (b, a)
        raise ActlabError(
            f"{other.label} does not record the task its episodes ran: it cannot be paired with "
            f"{known.label}'s {known.task} episodes",
            file=other.file,
            field="task",
            expected=f"task: {known.task} (as actlab eval writes it)",
            found="no task (removed from the record, or a demo's delay sweep written before demos recorded "
            "it)",
            fix=f"re-run actlab eval for {other.label} (the same --task, --seed and --episodes as "
            f"{known.label})",
        )
    if a.task is not None and b.task is not None and a.task != b.task:
        raise ActlabError(
            "the two evaluations ran different tasks: the same seed is another scene in each, so their "
            "episodes cannot be paired",
            field="task",
            expected="the same --task in both",
            found=f"A ({a.label}): {a.task}; B ({b.label}): {b.task}",
            fix="evaluate both on the same --task (the same --seed and --episodes)",
        )


def check_same_seeds(a: Outcomes, b: Outcomes) -> list[int]:
    """The seeds both ran, sorted; refused naming the seeds only one of them ran."""
    only_a, only_b = sorted(set(a.success) - set(b.success)), sorted(set(b.success) - set(a.success))
    if only_a or only_b:
        raise ActlabError(
            "the two evaluations ran different seeds; a paired comparison needs the same episodes",
            field="seeds",
            expected=f"the same seeds in both ({len(a.success)} in A, {len(b.success)} in B)",
            found=f"only in A ({a.label}): {_seeds_text(only_a)}; "
            f"only in B ({b.label}): {_seeds_text(only_b)}",
            fix="evaluate both with the same --seed and --episodes",
        )
    return sorted(a.success)


def compare(a: Outcomes, b: Outcomes, alpha: float = 0.05) -> dict:
    """The comparison of B against A (the reference) on their common seeds (module docstring)."""
    if not 0 < alpha < 1:
        raise ActlabError("bad significance level", field="--alpha", expected="0 < alpha < 1", found=alpha)
    check_same_episodes(a, b)
    seeds = check_same_seeds(a, b)
    ra, rb = [a.success[s] for s in seeds], [b.success[s] for s in seeds]
    pc = paired_compare(ra, rb, alpha=alpha)
    n = len(seeds)
    low, high = paired_interval(n, pc.gained, pc.lost)
    return {
        "a": {"label": a.label, "name": a.name, "successes": pc.reference_successes},
        "b": {"label": b.label, "name": b.name, "successes": pc.candidate_successes},
        "n": n,
        "both_solved": sum(1 for x, y in zip(ra, rb) if x and y),
        "both_failed": sum(1 for x, y in zip(ra, rb) if not x and not y),
        "only_a": pc.lost,
        "only_b": pc.gained,
        "seeds_only_a": [s for s, x, y in zip(seeds, ra, rb) if x and not y],
        "seeds_only_b": [s for s, x, y in zip(seeds, ra, rb) if y and not x],
        "agreement": (n - pc.gained - pc.lost) / n if n else None,
        "difference": (pc.gained - pc.lost) / n if n else 0.0,
        "ci_low": low,
        "ci_high": high,
        "p": pc.p,
        "alpha": alpha,
        "verdict": pc.verdict,  # B against A: better / worse / no evidence
        "episodes_needed": episodes_needed(n, pc.gained, pc.lost, alpha),
        "power": POWER,
        "notes": _notes(a, b),
    }


def _notes(a: Outcomes, b: Outcomes) -> list[str]:
    """What differs between the two evaluations' episodes besides the policy or its execution."""
    if a.max_steps is not None and b.max_steps is not None and a.max_steps != b.max_steps:
        return [
            f"A's episodes ran at most {a.max_steps} steps, B's {b.max_steps}: a difference may come from "
            "the step limit (--max-steps), not from what was compared"
        ]
    return []


def compare_text(r: dict) -> str:
    """The comparison for a terminal."""
    n, a, b = r["n"], r["a"], r["b"]
    lines = [
        f"A: {a['label']} ({a['name']}): {a['successes']}/{n} solved",
        f"B: {b['label']} ({b['name']}): {b['successes']}/{n} solved",
        f"same {n} seeds; agree on {n - r['only_a'] - r['only_b']} ({100 * (r['agreement'] or 0):.0f}%): "
        f"{r['both_solved']} both solved, {r['both_failed']} both failed; {r['only_a']} only A, "
        f"{r['only_b']} only B",
    ]
    for who in ("a", "b"):
        seeds = r[f"seeds_only_{who}"]
        if seeds:
            lines.append(f"  solved only by {who.upper()}: {_seeds_text(seeds)}")
    sign = "<" if r["p"] < r["alpha"] else ">="
    verdict = {"better": "B better than A", "worse": "B worse than A"}.get(
        r["verdict"], "no evidence either way"
    )
    lines += [
        f"difference B - A: {100 * r['difference']:+.1f} points, 95% interval "
        f"[{100 * r['ci_low']:+.1f}, {100 * r['ci_high']:+.1f}] (Agresti-Min, paired)",
        f"McNemar exact: p = {r['p']:.3g} {sign} {r['alpha']:g}: {verdict}",
    ]
    lines += [f"note: {note}" for note in r.get("notes", [])]
    need = r["episodes_needed"]
    if need is None:
        lines.append("episodes needed: - (no difference measured: no number of episodes detects it)")
    else:
        lines.append(
            f"episodes needed for a difference of this size (alpha {r['alpha']:g}, power "
            f"{100 * r['power']:.0f}%; Connor 1987, at least the exact test's {_k_min(r['alpha'])} "
            f"discordant seeds): {need}"
            + (f" (this comparison ran {n})" if need > n else f" (ran {n}: enough)")
        )
    return "\n".join(lines)
