"""The experiment platform around the stages: MLflow tracking, regression checks, workspaces."""
