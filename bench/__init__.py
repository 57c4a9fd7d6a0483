"""Side-by-side benchmark of fusionworker and RQ: ``python bench/run.py``."""
