"""The life of a training run, below every trainer (``actlab train``, ``actlab rl train``).

- :mod:`actlab.lifecycle.rundir`: a new run or a resume (refusals of a used or foreign directory), the resume
  check that names the changed keys of flattened configs, the config hash;
- :mod:`actlab.lifecycle.checkpoints`: atomic checkpoint directories, sha256 digests verified at load, the
  ``last.json`` / ``best.json`` pointers, retention;
- :mod:`actlab.lifecycle.stop`: SIGTERM -> a checkpoint at the next safe point -> exit 143, the time limit;
- :mod:`actlab.lifecycle.metrics_log`: ``metrics.jsonl``, the progress bar, TensorBoard and W&B.

The run directory lock is :class:`actlab.utils.lock.DirLock`. This package imports only ``errors`` and
``utils`` (torch lazily, where a checkpoint's state is saved or read).
"""
