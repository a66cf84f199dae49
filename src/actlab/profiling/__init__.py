"""Instruments: GPU/CPU monitor around any command (NVML), timers, FLOPs and MFU, kernel tables, the
benchmark result format.

Nothing here needs a GPU to import; NVML is loaded lazily and its absence is reported, not raised. The
package imports only actlab.utils and actlab.errors (tests/test_layers.py): the training code uses these
instruments, never the other way round (the batch-size finder, which drives the trainer, is
actlab.training.batch_probe).
"""
