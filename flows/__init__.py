"""Prefect flows over the DVC pipeline (the stages themselves are defined only in dvc.yaml)."""
