# The two commands of the README: `make run` (install + the pipeline) and `make test` (install + tests).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test test-all lint bench clean pipeline quick ui flow mlflow-ui nightly ablation graded ice-levers study

# torch first, pinned to the CPU build: letting a later package pull torch would fetch CUDA.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# First the stages to run and an estimate of how long they take here (s3.platform.estimate; it never
# stops the run); each stage then shows its progress on stderr (s3.progress).
run: install  ## the main job: the whole pipeline on default params (dvc repro; re-runs only what changed)
	-PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m s3.platform.estimate
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/dvc repro

# Two pytest workers (one per core), a test file to a worker; the end-to-end pipeline is scheduled first
# (tests/conftest.py; --no-loadscope-reorder keeps that order), so it runs beside the rest instead of after it.
test: install  ## everything but the `slow` tests, plus one end-to-end quick pipeline (tests/test_pipeline.py)
	$(BIN)/pytest -q -m "not slow" -n 2 --dist loadfile --no-loadscope-reorder

test-all: install  ## every test, the slow ones too (the nightly flow runs them; run before resolving an issue)
	$(BIN)/pytest -q

lint: install  ## ruff: lint and format check (CI runs it before the tests)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: install
	$(BIN)/s3 bench sim --json

# --- platform (see README "Platform") ---
export PREFECT_SERVER_ANALYTICS_ENABLED := false
# The Prefect server's SQLite and the flows' results: in the project, not in ~/.prefect.
export PREFECT_HOME ?= $(CURDIR)/.prefect
PREFECT_PORT ?= 4200
MLFLOW_PORT ?= 5000
QUICK_DIR ?= /tmp/s3-quick

pipeline: run  ## the same as `make run`

quick: install  ## smoke run: the pipeline on params_quick.yaml in a scratch workspace
	$(BIN)/python -m s3.platform.workspace params_quick.yaml $(QUICK_DIR)
	cd $(QUICK_DIR) && PATH=$(CURDIR)/$(BIN):$$PATH $(CURDIR)/$(BIN)/dvc repro

# The study's experiment sets (docs/study.md): each variant in its own workspace under $(STUDY_DIR),
# results in records/experiments/<set>/; a finished variant is skipped, a killed one resumes.
STUDY_DIR ?= /tmp/s3-study

ablation: install  ## claim 4: friction diversity x surface labels, ddm, K = 2 (about an hour on 2 cores)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/s3 study run ablation --root $(STUDY_DIR)

ice-levers: install  ## the ice levers one at a time and the best combinations (studies/ice.yaml), ddm (and the oracle for the grip pace), K = 3, and DAgger rounds (about 3.4 h on the faster 2-core machine)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/s3 study run ice --root $(STUDY_DIR)

graded: install  ## claim 3: ddm and transformer of graded accuracy (fewer epochs), K = 2 (about an hour on 2 cores)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/s3 study run graded --root $(STUDY_DIR)

# The study of issue #39 (docs/study.md, "make study"): the pipeline on params_study.yaml (K = 5 in every arm)
# in its own workspace, then the graded-accuracy and friction sets and two ice variants on the same file, then
# the report that reads them all. Every step resumes: DVC stages, and a finished variant is skipped. Hours on 2 cores.
STUDY_RUN ?= /tmp/s3-study-run

study: install  ## the study: params_study.yaml, K = 5 everywhere, one workspace, every claim, the ice rows (about 8 h on 2 cores)
	$(BIN)/python -m s3.platform.workspace params_study.yaml $(STUDY_RUN)
	cd $(STUDY_RUN) && PATH=$(CURDIR)/$(BIN):$$PATH $(CURDIR)/$(BIN)/dvc repro
	cd $(STUDY_RUN) && PATH=$(CURDIR)/$(BIN):$$PATH $(CURDIR)/$(BIN)/s3 study run graded --base params.yaml --root $(STUDY_RUN)-sets
	cd $(STUDY_RUN) && PATH=$(CURDIR)/$(BIN):$$PATH $(CURDIR)/$(BIN)/s3 study run ablation --base params.yaml --root $(STUDY_RUN)-sets
	cd $(STUDY_RUN) && PATH=$(CURDIR)/$(BIN):$$PATH $(CURDIR)/$(BIN)/s3 study run ice --base params.yaml --root $(STUDY_RUN)-sets --variant plain --variant pace_7_constraint_lateral
	cd $(STUDY_RUN) && PATH=$(CURDIR)/$(BIN):$$PATH $(CURDIR)/$(BIN)/dvc repro report

ui: install  ## Prefect server + dashboard on http://127.0.0.1:$(PREFECT_PORT) (SQLite in $$PREFECT_HOME)
	$(BIN)/prefect server start --host 127.0.0.1 --port $(PREFECT_PORT)

flow: install  ## the pipeline as a Prefect flow against the `make ui` server (no server: one line says so)
	PREFECT_API_URL=http://127.0.0.1:$(PREFECT_PORT)/api $(BIN)/python -m flows.pipeline

nightly: install  ## long-lived: serves the scheduled `nightly-regression` deployment
	PREFECT_API_URL=http://127.0.0.1:$(PREFECT_PORT)/api $(BIN)/python -m flows.nightly --serve

# MLflow 3 opens an experiment on its GenAI view unless the UI's own switch says Model training:
# the printed link (python -m s3.tracking) opens s3's experiment on its runs.
mlflow-ui: install  ## MLflow UI on http://127.0.0.1:$(MLFLOW_PORT) over mlflow.db
	-@MLFLOW_TRACKING_URI=$${MLFLOW_TRACKING_URI:-sqlite:///$(CURDIR)/mlflow.db} $(BIN)/python -m s3.tracking http://127.0.0.1:$(MLFLOW_PORT)
	$(BIN)/mlflow ui --host 127.0.0.1 --port $(MLFLOW_PORT) --backend-store-uri $${MLFLOW_TRACKING_URI:-sqlite:///$(CURDIR)/mlflow.db}

clean:
	rm -rf $(VENV) .pytest_cache
