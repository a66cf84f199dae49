"""The real bridge child (actlab/lerobot/child.py, loaded by path) serving a LeRobot policy whose ``reset()``
does nothing: the action queue of the previous episode survives it (the fault the doctor must name). Run by
the bridge in lerobot's python as its child script::

    python sticky_reset_child.py POLICY_DIR --device cpu --child CHILD_PY [child.py's flags ...]
"""

from __future__ import annotations

import importlib.util
import os
import sys

# Run as a script, this file's directory (tests/lerobot) is sys.path[0]: keep it from shadowing anything.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)


def main() -> int:
    argv = sys.argv[1:]
    at = argv.index("--child")
    path = argv[at + 1]
    del argv[at : at + 2]
    spec = importlib.util.spec_from_file_location("bridge_child", path)
    child = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(child)

    class StickyHandler(child.LeRobotHandler):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.policy.reset = lambda: None  # ACT's _action_queue, Diffusion's _queues: never cleared

    child.LeRobotHandler = StickyHandler
    return child.main(argv)


if __name__ == "__main__":
    sys.exit(main())
