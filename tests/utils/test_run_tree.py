"""utils.procs.run_tree: a child interpreter run to its end, or ended as a whole tree at its deadline.

The class (the third fault run's HANG rows, docs/faults.md): a deadline that kills only the direct
child leaves a wrapper script's child (conda run, a shell script) or a DataLoader's workers holding the
pipes, and the reader waits for ever. Used by `actlab bench data --lerobot-python` and `actlab bench
train --lerobot-python`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest

from actlab.datasets.bench import bench_lerobot
from actlab.errors import ActlabError
from actlab.utils.procs import run_tree
from procs import clock, hanging_wrapper, marked, wait_gone

MARK = "ACTLAB_TEST_RUN_TREE"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["group", "setsid"])
def test_a_wrapper_whose_child_hangs_is_ended_as_a_tree_at_the_deadline(tmp_path, mode):
    token, since = uuid.uuid4().hex, clock()
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_tree([str(hanging_wrapper(tmp_path, mode))], timeout=1.0, env={**os.environ, MARK: token})
    assert time.monotonic() - t0 < 1.0 + 10  # the deadline plus the tree's kill, not for ever
    assert wait_gone(marked(MARK, token, since), 5.0) == []  # nothing of the tree is left


@pytest.mark.timeout(60)
def test_a_finished_command_gives_its_code_and_output():
    code, out, err = run_tree([sys.executable, "-c", "import sys; print('out'); sys.exit(3)"], timeout=30)
    assert (code, out, err) == (3, "out\n", "")


@pytest.mark.timeout(60)
def test_bench_data_names_a_lerobot_python_that_is_missing_or_fails(tmp_path):
    with pytest.raises(ActlabError, match="cannot start") as e:  # a traceback before
        bench_lerobot(sys.executable + "-missing-x", tmp_path, 8, 10, 1.0, 0)
    assert e.value.field == "--lerobot-python" and "No such file" in e.value.found
    with pytest.raises(ActlabError, match="lerobot benchmark failed") as e:  # not a lerobot python
        bench_lerobot(sys.executable, tmp_path, 8, 10, 1.0, 0)
    assert e.value.field == "--lerobot-python"
