# Two entry points (see README.md): `make demo` and `make test`. Both install first.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
QUESTION ?= How do references and borrowing work in Rust?

.PHONY: install demo test test-fast lint

install: $(STAMP)

# torch first: the CPU build on this machine's disk (a looser spec pulls a CUDA build).
# unstructured-inference only provides modules that partition_pdf imports; its own
# requirements (timm, torchvision, CUDA torch) are not needed for strategy="fast".
# tasks.embed.prepare exports and quantises the embedding model once (offline, seconds);
# tasks.text.lexicon makes the bilingual lexicons from the dictionaries' wheels (~20 s).
$(STAMP): pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps 'unstructured-inference==1.6.14'
	$(PY) -m tasks.embed.prepare
	$(PY) -m tasks.text.lexicon
	touch $(STAMP)

demo: install
	$(PY) -m flows.ingest data/sample
	$(PY) -m flows.query "$(QUESTION)"

# The linter with the rules the code's noqa comments name, the formatter's check, the types.
lint: install
	$(PY) -m ruff check tasks flows deployments tests benchmarks
	$(PY) -m ruff format --check tasks flows deployments tests benchmarks
	$(PY) -m mypy

# The whole suite: lint, then every test (real model, real Prefect, real LanceDB).
# Two workers, a test file each (module fixtures built once): 16 minutes on one, 11 on two
# (2-core machine; benchmarks/RESULTS.md, "The test suite").
test: lint
	$(PY) -m pytest -n 2 --dist loadfile --durations=30

# The quick loop while changing code: no model, no Prefect engine, nothing that waits out a
# lease or loads torch (the markers in pyproject.toml). Two workers, each collecting the
# whole set (about 8 s): under a minute on the 2-core machine (benchmarks/RESULTS.md).
test-fast: install
	$(PY) -m pytest -m "not integration and not model and not slow" -q -n 2
