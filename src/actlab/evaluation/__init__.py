"""Evaluation: rollouts with failure taxonomy, checkpoint sweeps, rollout videos, whiskers."""
