"""Launchers: local multi-process runs, TPU VM pods, SLURM clusters, and config sweeps."""
