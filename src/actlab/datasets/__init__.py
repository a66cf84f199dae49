"""Datasets: LeRobot v3 read/write, .npy import, decode-once FrameStore, sampler, stats, doctor.

Importing this package does not import torch; :class:`DeviceData` imports it when constructed.
"""

from actlab.datasets.format import camera_feature, make_features, vector_feature
from actlab.datasets.framestore import FrameStore, cache_root
from actlab.datasets.reader import EpisodeInfo, LeRobotV3Dataset, open_dataset
from actlab.datasets.sampler import (
    EpisodeSampler,
    delta_timestamps_to_indices,
    parse_episodes,
    select_ranges,
    window_indices,
)
from actlab.datasets.stats import compute_stats, load_stats, save_stats
from actlab.datasets.video import VideoOptions
from actlab.datasets.writer import DatasetWriter


def __getattr__(name: str):
    if name == "DeviceData":
        # lazy: DeviceData pulls in torch; keep `import actlab.datasets` light
        from actlab.datasets.device import DeviceData

        return DeviceData
    raise AttributeError(name)


__all__ = [
    "DatasetWriter",
    "DeviceData",
    "EpisodeInfo",
    "EpisodeSampler",
    "FrameStore",
    "LeRobotV3Dataset",
    "VideoOptions",
    "cache_root",
    "camera_feature",
    "compute_stats",
    "delta_timestamps_to_indices",
    "load_stats",
    "make_features",
    "open_dataset",
    "parse_episodes",
    "save_stats",
    "select_ranges",
    "vector_feature",
    "window_indices",
]
