"""Training: config and presets, train step, loop, checkpoints and resume, DDP, overfit mode."""
