"""`python -m s3.tracking [BASE]`: print the MLflow UI link that opens s3's experiment on its runs.

BASE is the UI's address (default http://127.0.0.1:5000). The experiment's id is read from the
tracking store (`store.tracking_uri`); a SQLite store that does not exist yet is not created (the
link then names the experiment list). `make mlflow-ui` prints it before starting the UI.
"""

from __future__ import annotations

import sys
from pathlib import Path

from s3.tracking.store import client, experiment_name, tracking_uri, ui_url


def experiment_link(base: str) -> str:
    """ui_url for s3's experiment in the current store, or for the experiment list when it has none."""
    uri = tracking_uri()
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :]).exists():
        return ui_url(base)
    exp = client(uri=uri).get_experiment_by_name(experiment_name())
    return ui_url(base, None if exp is None else exp.experiment_id)


if __name__ == "__main__":
    print(experiment_link(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:5000"))
