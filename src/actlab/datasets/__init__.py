"""Datasets: LeRobot v3 read/write, .npy import, decode-once FrameStore, sampler, stats, doctor."""
