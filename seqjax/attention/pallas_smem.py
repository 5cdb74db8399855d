"""Placeholder until experiments/accelerator/smem_table.py runs."""

T5_DKDV_PER_ELEMENT = 0
TABLE = {}
