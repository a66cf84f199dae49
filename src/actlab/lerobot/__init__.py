"""LeRobot interop in one place: export actlab ACT bundles to LeRobot 0.6.x, import LeRobot ACT
checkpoints, and evaluate any LeRobot policy through a child process running the user's lerobot python.

- :mod:`actlab.lerobot.export`: actlab ``act`` bundle -> LeRobot pretrained-policy directory;
- :mod:`actlab.lerobot.import_`: LeRobot ACT directory -> actlab bundle;
- :mod:`actlab.lerobot.bridge`: :class:`~actlab.lerobot.bridge.LeRobotBridgePolicy`, a policy object for
  actlab's evaluation harness whose model runs in ``child.py`` under lerobot's own torch;
- ``child.py``: run by the lerobot python; imports only the standard library, numpy, torch and lerobot.

Nothing here imports lerobot (it lives in its own environment; docs/lerobot.md).
"""
