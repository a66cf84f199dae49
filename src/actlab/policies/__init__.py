"""Policies: ACT and ACT-relative (relative actions, state deltas, RTC prefix), checkpoint bundles."""
