"""Plots and report pages (matplotlib, Agg backend; nothing here computes metrics)."""
