"""``actlab bench encode``: stress the video writer the way recording does and count hangs and errors.

Worker processes write real LeRobot v3 datasets through :class:`DatasetWriter` (several cameras, short
episodes, the writer's own encoder settings) while busy processes load every core, as a recording on a
shared machine does. A worker that finishes no episode for ``hang_s`` seconds *and* used less than a
second of CPU in that time is hung (a deadlocked encoder idles; a starved one still computes): its Python
stacks are dumped (faulthandler), it is killed and a fresh one takes over its remaining episodes. Writer
errors (an ``ActlabError`` from the encoder watchdog included) are counted per dataset with their message.

Why a benchmark and not a test: the SVT-AV1 deadlock it looks for is rare (a few per thousand encoder
runs at worst), so only thousands of encodes under contention say anything about its rate.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import multiprocessing
import os
import queue
import shutil
import signal
import sys
import time
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import numpy as np

from actlab.datasets.format import make_features
from actlab.datasets.synth import render
from actlab.datasets.video import VideoOptions
from actlab.datasets.writer import DatasetWriter
from actlab.errors import ActlabError
from actlab.profiling.report import make_result
from actlab.utils.io import scratch_dir
from actlab.utils.procs import die_with_parent, own_multiprocessing_names


@dataclasses.dataclass(frozen=True)
class EncodeStressConfig:
    """What ``actlab bench encode`` runs."""

    # Episode-camera encodes in total (each episode is encoded once per camera).
    encodes: int = 2000
    # Writer processes running at once, each writing datasets as the sim recorder's main process does.
    workers: int = 4
    # Busy processes loading the CPU while the writers run (0: none; default: one per core).
    burners: int = -1
    # Cameras per dataset (one encoder thread and one mp4 file per camera, as in a recording).
    cameras: int = 2
    # Frames per episode.
    frames: int = 30
    # Side of the square frames (even: yuv420p).
    image_size: int = 64
    # Episodes per dataset: a new DatasetWriter (new encoders, new files) after this many.
    episodes_per_dataset: int = 10
    # A worker that finishes no episode for this long while idle (< 1 s of CPU) is hung: stacks dumped,
    # killed, replaced.
    hang_s: float = 60.0
    # Encoder settings under test (the writer's defaults unless overridden).
    video: VideoOptions = dataclasses.field(default_factory=VideoOptions)

    def __post_init__(self) -> None:
        for name in ("encodes", "workers", "cameras", "frames", "episodes_per_dataset"):
            if getattr(self, name) < 1:
                raise ActlabError(f"{name} must be >= 1", field=f"--{name.replace('_', '-')}",
                                  expected=">= 1", found=getattr(self, name))  # fmt: skip
        if self.image_size < 16 or self.image_size % 2:
            raise ActlabError(
                "image size must be even and >= 16", field="--image-size", found=self.image_size
            )
        if not self.hang_s > 0:
            raise ActlabError("hang seconds must be > 0", field="--hang-seconds", found=self.hang_s)

    @property
    def episodes(self) -> int:
        """Episodes in total (encodes rounded up to whole episodes)."""
        return -(-self.encodes // self.cameras)


def _episode_frames(rng: np.random.Generator, cfg: EncodeStressConfig) -> dict[str, np.ndarray]:
    # Smooth motion plus sensor-like noise: closer to a camera than a still frame, cheap to make.
    t = np.arange(cfg.frames, dtype=np.float32)[:, None] / 30.0
    state = np.sin(2 * np.pi * rng.uniform(0.2, 0.8, 6) * t + rng.uniform(0, 6, 6)).astype(np.float32)
    frames: dict[str, np.ndarray] = {"observation.state": state, "action": state}
    for c in range(cfg.cameras):
        img = render(state, cfg.image_size, cfg.image_size, camera=c % 2).astype(np.int16)
        img += rng.integers(-6, 7, img.shape, dtype=np.int16)
        frames[f"observation.images.cam{c}"] = np.clip(img, 0, 255).astype(np.uint8)
    return frames


def _worker(wid: int, episodes: int, cfg: EncodeStressConfig, out: Path, report, parent: int) -> None:
    """Write ``episodes`` episodes into fresh datasets under ``out``; report each one on ``report``."""
    die_with_parent(parent)  # dies with the bench (a SIGKILLed bench left its processes running)
    stacks = open(out / f"stacks-{wid}.txt", "w")  # noqa: SIM115 (open for the process's lifetime)
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    rng = np.random.default_rng(wid)
    feats = make_features(6, 6, {f"cam{c}": (cfg.image_size, cfg.image_size) for c in range(cfg.cameras)})
    done = dataset = 0
    while done < episodes:
        n = min(cfg.episodes_per_dataset, episodes - done)
        root = out / f"w{wid}-{dataset}"
        dataset += 1
        try:
            with DatasetWriter(root, fps=30, features=feats, video=cfg.video) as writer:
                for _ in range(n):
                    writer.add_episode(_episode_frames(rng, cfg), task="stress")
                    report.put(("episode", wid))
        except Exception as e:  # counted by the parent; the next dataset starts afresh
            report.put(("error", wid, f"{type(e).__name__}: {e}"))
        else:
            report.put(("reordered", wid, writer.reordered_packets))
        done += n
        shutil.rmtree(root, ignore_errors=True)
    report.put(("done", wid))


def _burn(stop, parent: int) -> None:
    # A burner of a SIGKILLed bench spun at 100% of a core forever (re-parented to init): it dies with it.
    die_with_parent(parent)
    # Elementwise numpy only: one thread per burner (a BLAS matmul would start a thread per core).
    x = np.random.default_rng(0).random(1 << 18)
    while not stop.is_set():
        x = np.sin(x) + 0.5


def _reap(p: Any, timeout: float) -> None:
    """Wait up to ``timeout`` s for process ``p`` to end, then kill it. (``Process.join`` with a timeout
    blocks in ``waitpid`` without one as soon as the child has closed its sentinel, for as long as its exit
    takes.) No deadline covers time the kernel itself spends reaping a child: a suite run on this 2-core
    VM sat 12-17 minutes in wait4 (shrink_dcache_parent) with a burner on the other core."""
    if not wait([p.sentinel], timeout) or p.exitcode is None:  # exitcode polls without blocking
        p.kill()
        deadline = time.monotonic() + 5.0
        wait([p.sentinel], 5.0)
        # The sentinel closes with the child's files, a moment before the kernel lets it be reaped: one
        # poll right after it found the killed child still alive (a fresh-clone suite run). Poll to the
        # deadline; multiprocessing reaps a child still there after it later.
        while p.exitcode is None and time.monotonic() < deadline:
            time.sleep(0.01)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads); 0 once it is gone."""
    import psutil

    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return t.user + t.system


def _hung_frames(stack_file: Path) -> str:
    """The innermost frame of each thread in a faulthandler dump, for the report."""
    lines = stack_file.read_text(errors="replace").splitlines() if stack_file.exists() else []
    tops, take = [], False
    for line in lines:
        if line.startswith(("Thread", "Current thread")):
            take = True
        elif take and line.strip().startswith("File"):
            tops.append(line.strip())
            take = False
    return "; ".join(tops[:6]) or "(no stack dump)"


def run_encode_stress(cfg: EncodeStressConfig, progress: bool = True) -> dict[str, Any]:
    """Run the stress and return the shared bench result dict (hangs, errors, encodes/s)."""
    from tqdm import tqdm

    own_multiprocessing_names()  # the queue's semaphores: named so a later run removes a killed one's
    ctx = multiprocessing.get_context("spawn")
    report = ctx.Queue()
    burners = (os.cpu_count() or 1) if cfg.burners < 0 else cfg.burners
    stop = ctx.Event()
    burn = [ctx.Process(target=_burn, args=(stop, os.getpid()), daemon=True) for _ in range(burners)]
    share = [cfg.episodes // cfg.workers + (i < cfg.episodes % cfg.workers) for i in range(cfg.workers)]
    left = {wid: n for wid, n in enumerate(share) if n}
    procs: dict[int, Any] = {}
    last: dict[int, float] = {}  # when each worker last reported (or was found busy)
    cpu: dict[int, float] = {}  # its CPU seconds then
    hangs: list[str] = []
    errors: list[str] = []
    reordered = 0  # times the encoder returned a packet ahead of an earlier frame's (muxed in order)
    episodes = 0
    start = time.perf_counter()
    # scratch_dir: a SIGKILLed run left its tempfile directory in /tmp for good; the next run removes it
    with scratch_dir("actlab-encode") as tmp:
        out = Path(tmp)

        def launch(wid: int) -> None:
            procs[wid] = ctx.Process(
                target=_worker, args=(wid, left[wid], cfg, out, report, os.getpid()), daemon=True
            )
            procs[wid].start()
            last[wid] = time.monotonic()
            cpu[wid] = _cpu_seconds(procs[wid].pid)

        for p in burn:
            p.start()
        next_id = len(share)
        for wid in list(left):
            launch(wid)
        bar = tqdm(total=cfg.episodes * cfg.cameras, unit="enc", desc="encoding", disable=not progress)
        try:
            while procs:
                with contextlib.suppress(queue.Empty):
                    msg = report.get(timeout=0.5)
                    wid = msg[1]
                    if wid not in procs:  # from a worker already killed as hung: its share was handed on
                        continue
                    last[wid], cpu[wid] = time.monotonic(), _cpu_seconds(procs[wid].pid)
                    if msg[0] == "episode":
                        episodes += 1
                        left[wid] -= 1
                        bar.update(cfg.cameras)
                    elif msg[0] == "error":
                        errors.append(msg[2])
                    elif msg[0] == "reordered":
                        reordered += msg[2]
                    elif msg[0] == "done":
                        _reap(procs.pop(wid), 30.0)
                for wid, p in list(procs.items()):
                    if p.is_alive() and time.monotonic() - last[wid] > cfg.hang_s:
                        used = _cpu_seconds(p.pid) - cpu[wid]
                        if used >= 1.0:  # slow, not stuck: starved by the load; look again later
                            last[wid], cpu[wid] = time.monotonic(), cpu[wid] + used
                            continue
                    if time.monotonic() - last[wid] > cfg.hang_s or not p.is_alive():
                        if p.is_alive():
                            os.kill(p.pid, signal.SIGUSR1)  # stacks of every thread into stacks-<wid>.txt
                            time.sleep(1.0)
                            hangs.append(_hung_frames(out / f"stacks-{wid}.txt"))
                        elif p.exitcode != 0:
                            errors.append(f"worker died with exit code {p.exitcode}")
                        else:
                            continue  # exited cleanly; its "done" message is still in the queue
                        p.kill()
                        _reap(p, 30.0)
                        procs.pop(wid)
                        if left[wid] > 0:  # a fresh worker (new id, new stack file) takes over the rest
                            left[next_id] = left.pop(wid)
                            launch(next_id)
                            next_id += 1
        finally:
            bar.close()
            stop.set()
            # stopped by Ctrl-C or SIGTERM (the writers ignore a terminal's SIGINT: the bench's to handle):
            # they are killed at once, not given the 5 s an ending run gives them
            stopped = sys.exc_info()[0] is not None
            for p in [*procs.values(), *burn]:
                if stopped and p.is_alive():
                    p.kill()
                _reap(p, 5.0)
    seconds = time.perf_counter() - start
    encodes = episodes * cfg.cameras
    v = cfg.video
    notes = [f"hang: {h}" for h in hangs[:5]] + [f"error: {e}" for e in errors[:5]]
    return make_result(
        "encode",
        {
            "encodes": encodes,
            "hangs": len(hangs),
            "errors": len(errors),
            "out_of_order": reordered,  # times the encoder handed a packet out early
            "seconds": round(seconds, 1),
            "encodes_per_s": round(encodes / seconds, 1),
        },
        device="cpu",
        config={
            "workers": cfg.workers,
            "burners": burners,
            "cameras": cfg.cameras,
            "frames": cfg.frames,
            "image_size": cfg.image_size,
            "episodes_per_dataset": cfg.episodes_per_dataset,
            "codec": v.codec,
            "encoder_options": v.encoder_options(),
            "hang_s": cfg.hang_s,
        },
        notes=notes,
    )
