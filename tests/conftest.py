"""Shared fixtures. Tests build their own data; nothing downloads (no network in CI)."""

from __future__ import annotations

import os

# Headless rendering for MuJoCo; set before anything imports mujoco.
os.environ.setdefault("MUJOCO_GL", "egl")

import faulthandler
import itertools
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

import procs

# (Nothing imported above loads torch.) Two cores on CI: keep torch from oversubscribing when tests run
# subprocesses; one thread in each of pytest-xdist's workers (`-n 2`: two workers at two threads each
# spun for each other on 2 cores).
# The controller's default reaches the workers through their environment, so a worker tells it from the
# user's own setting by the marker the controller leaves beside it.
_OMP_DEFAULTED = "ACTLAB_TEST_OMP_DEFAULTED"
if os.environ.get("PYTEST_XDIST_WORKER"):
    if os.environ.get(_OMP_DEFAULTED) or "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = "1"
elif "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = "2"
    os.environ[_OMP_DEFAULTED] = "1"

# Everything this test run starts (also the worker pools that code under test starts in this process)
# inherits the marker, so a process left behind is found by pid even after it left its parent's session.
os.environ[procs.SESSION_ENV] = uuid.uuid4().hex

_dataset_counter = itertools.count()


def _make_dataset(
    tmp_path: Path,
    episodes: int = 3,
    length: int = 40,
    cameras: dict | None = None,
    state_dim: int = 6,
    action_dim: int = 6,
    fps: int = 30,
    seed: int = 0,
    **kwargs,
) -> Path:
    from actlab.datasets.synth import synth_dataset

    cameras = {"top": (32, 32)} if cameras is None else cameras
    out = Path(tmp_path) / f"dataset-{next(_dataset_counter)}"
    return synth_dataset(
        out,
        episodes=episodes,
        length=length,
        cameras=cameras,
        state_dim=state_dim,
        action_dim=action_dim,
        fps=fps,
        seed=seed,
        **kwargs,
    )


@pytest.fixture(scope="session", autouse=True)
def _codec_choice_ignores_the_load():
    """A test's output never depends on how busy the machine running the suite is: `--codec auto` sees
    a quiet CPU (AV1) unless the test says otherwise (tests of the busy choice patch load_1m
    themselves). Commands run as subprocesses still choose by the real load."""
    from actlab.datasets import video

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(video, "load_1m", lambda: 0.0)
        yield


@pytest.fixture(scope="session", autouse=True)
def _actlab_cache(tmp_path_factory):
    """Keep FrameStores and cached stats of the test run out of ~/.cache (ACTLAB_CACHE -> a temp dir)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ACTLAB_CACHE", str(tmp_path_factory.mktemp("actlab-cache")))
        yield


@pytest.fixture(scope="session")
def make_dataset():
    """Factory: ``make_dataset(tmp_path, episodes=3, length=40, cameras={"top": (32, 32)}, state_dim=6,
    action_dim=6, fps=30, seed=0, lengths=None, video="av1")`` -> Path of a real LeRobot v3 dataset written
    by ``DatasetWriter`` (AV1 video). Images show a square at state dims 0/1 and a bar sized by dim 2;
    actions lead the state by 3 frames (``actlab.datasets.synth``)."""
    return _make_dataset


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory) -> Path:
    """A session-wide dataset from ``make_dataset`` with its defaults (3 x 40 frames, top camera 32x32).

    Shared by many tests: do not modify it (copy it with shutil.copytree first)."""
    return _make_dataset(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def small_fs(tmp_path):
    """Factory: ``small_fs(size_bytes, read_only=False) -> Path``: a real tmpfs of that size mounted in
    ``tmp_path``, so a test fills a disk (ENOSPC) or writes to a read-only filesystem (EROFS) for real;
    unmounted when the test ends. Skips the test where mounting is not permitted (it needs root, or
    CAP_SYS_ADMIN). The mount(2) call is made here, not by the mount program: no process to manage."""
    import ctypes

    if not sys.platform.startswith("linux"):
        pytest.skip("a tmpfs of a given size needs Linux")
    libc = ctypes.CDLL(None, use_errno=True)
    mounted: list[Path] = []

    def mount(size: int, read_only: bool = False) -> Path:
        target = tmp_path / f"small-fs-{len(mounted)}"
        target.mkdir()
        flags = 1 if read_only else 0  # MS_RDONLY
        if libc.mount(b"tmpfs", str(target).encode(), b"tmpfs", flags, f"size={size}".encode()) != 0:
            err = ctypes.get_errno()
            pytest.skip(f"cannot mount a tmpfs to fill for real ({os.strerror(err)}): run the tests as root")
        mounted.append(target)
        return target

    yield mount
    for target in reversed(mounted):
        if libc.umount2(str(target).encode(), 0) != 0:
            libc.umount2(str(target).encode(), 2)  # MNT_DETACH: a file still open keeps it busy until closed


# ------------------------------------------------------------------------------------------------------
# No test may hang, and none may leave a process behind.
#
# pytest-timeout (the `timeout` in pyproject.toml) with the signal method fails the test with SIGALRM:
# the test's `finally` blocks and fixtures run (procs.started kills its processes) and the suite goes on.
# A signal handler only runs when the main thread executes Python, so a main thread blocked in C code
# (a codec's pthread_join, a native lock) never sees it. For that case a thread here kills the processes
# the test started once GRACE_S has passed after the timeout, and if the test is still stuck after another
# GRACE_S it ends the run the way pytest-timeout's thread method does (stacks dumped, os._exit). A thread
# needs the GIL; C code that blocks while holding the GIL is ended by faulthandler's watchdog (a C
# thread) after a third GRACE_S, and the watchdog process started below kills what is left.

GRACE_S = 30.0  # after a timeout, before the next, harsher measure
# Tests marked slow (run with -m slow: 100 expert episodes, inductor compiles) without a timeout of their own.
SLOW_TIMEOUT_S = 1200
_BACKSTOP = pytest.StashKey[threading.Event]()
# Helpers started once and kept for the life of the process that uses them (they end with pytest): the
# servers of multiprocessing, and torch inductor's pool of compile workers.
_LIFETIME_HELPERS = (
    "multiprocessing.resource_tracker",
    "multiprocessing.forkserver",
    "torch._inductor.compile_worker",
)


def _is_lifetime_helper(p) -> bool:
    try:
        return any(s in " ".join(p.cmdline()) for s in _LIFETIME_HELPERS)
    except Exception:
        return False


def _session_processes(since: float = 0.0) -> list:
    """Running processes of this test run started at ``since`` (procs.clock) or later, helpers excluded."""
    found = procs.marked(procs.SESSION_ENV, os.environ[procs.SESSION_ENV], since)
    return [p for p in found if not _is_lifetime_helper(p)]


def _backstop(item, settings, done: threading.Event, since: float) -> None:
    import pytest_timeout

    if done.wait(settings.timeout + GRACE_S) or pytest_timeout.SUPPRESS_TIMEOUT:  # finished, or in pdb
        return
    started = _session_processes(since)
    sys.__stderr__.write(
        f"\n{item.nodeid}: still running {GRACE_S:g} s after its {settings.timeout:g} s timeout (the main "
        f"thread is blocked outside Python); killing the {len(started)} process(es) it started:\n"
        f"{procs.describe(started)}\n"
    )
    procs.kill_processes(started)
    if done.wait(GRACE_S):
        return
    procs.kill_processes(_session_processes())
    pytest_timeout.timeout_timer(item, settings)  # dumps every thread's stack, then os._exit(1)


def pytest_collection_modifyitems(items):
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item, settings):
    if settings.method != "signal":
        return None  # `-o timeout_method=thread`: the plugin's own timer alone
    done = threading.Event()
    item.stash[_BACKSTOP] = done
    args = (item, settings, done, procs.clock())
    threading.Thread(target=_backstop, args=args, name="actlab-timeout-backstop", daemon=True).start()
    stderr = item.config.stash[_STDERR_FD]
    faulthandler.dump_traceback_later(settings.timeout + 3 * GRACE_S, exit=True, file=stderr)
    return None  # pytest-timeout installs its SIGALRM timer


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_cancel_timer(item):
    done = item.stash.get(_BACKSTOP, None)
    if done is not None:
        done.set()
        faulthandler.cancel_dump_traceback_later()
    return None


_STDERR_FD = pytest.StashKey[int]()
_WATCHDOG = pytest.StashKey[subprocess.Popen]()

# Runs beside pytest without the marker: once pytest is gone, however it ended (os._exit above,
# faulthandler, SIGKILL from a CI runner), it kills every process that still carries the marker.
_WATCHDOG_CODE = """
import sys, time, psutil
pytest_pid, marker, value = int(sys.argv[1]), sys.argv[2], sys.argv[3]
try:
    pytest = psutil.Process(pytest_pid)
    while pytest.is_running() and pytest.status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.5)
except psutil.Error:
    pass
helpers = sys.argv[4:]
names = []
for p in psutil.process_iter():
    try:
        if p.environ().get(marker) != value:
            continue
        cmd = " ".join(p.cmdline())
        p.kill()
    except psutil.Error:
        continue
    if not any(s in cmd for s in helpers):  # these end with pytest anyway
        names.append(f"  pid {p.pid}: {cmd[:200]}")
if names:
    sys.stderr.write("tests: killed processes the test run left behind:\\n" + "\\n".join(names) + "\\n")
"""


def pytest_configure(config):
    # A test run started in the background from a script (`pytest &`, nohup) ignores SIGINT, and the
    # commands it starts would inherit that (a handler is reset by exec, an ignored signal is not): the
    # tests that press Ctrl-C then wait out their deadline. Start them as a terminal would.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # The terminal's stderr (capture is suspended during configure), for faulthandler's watchdog.
    config.stash[_STDERR_FD] = os.dup(sys.stderr.fileno())
    env = {k: v for k, v in os.environ.items() if k != procs.SESSION_ENV}
    config.stash[_WATCHDOG] = subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG_CODE, str(os.getpid()), procs.SESSION_ENV,
         os.environ[procs.SESSION_ENV], *_LIFETIME_HELPERS],
        env=env,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # outlives a kill of pytest's process group
    )  # fmt: skip


def pytest_unconfigure(config):
    os.close(config.stash[_STDERR_FD])


@pytest.fixture
def one_torch_thread():
    """One torch thread for the test, the count restored after. Tiny models run fastest on one thread;
    with 2 contended cores, 2 threads were up to 7x slower (and runs built with num_threads=0 take the
    count this process has)."""
    import torch  # lazily: nothing this conftest imports at the top loads torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _no_process_left_behind():
    """A test whose processes outlive it fails (they are killed)."""
    since = procs.clock()
    yield
    left = procs.wait_gone(_session_processes(since), 10.0)  # exiting ones finish
    if left:
        listing = procs.describe(left)
        procs.kill_processes(left)
        pytest.fail(f"the test left processes running (now killed):\n{listing}")
