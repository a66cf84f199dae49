"""Instruments: GPU/CPU monitor around any command, step-time breakdown, benchmarks, batch-size finder.

Nothing here needs a GPU to import; NVML is loaded lazily and its absence is reported, not raised.
"""
