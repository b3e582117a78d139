# Two entry points (see README.md): `make demo` and `make test`. Both install first.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
QUESTION ?= How do references and borrowing work in Rust?

.PHONY: install demo test

install: $(STAMP)

# torch first: the CPU build on this machine's disk (a looser spec pulls a CUDA build).
# unstructured-inference only provides modules that partition_pdf imports; its own
# requirements (timm, torchvision, CUDA torch) are not needed for strategy="fast".
$(STAMP): pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps 'unstructured-inference==1.6.14'
	touch $(STAMP)

demo: install
	$(PY) -m flows.ingest data/sample
	$(PY) -m flows.query "$(QUESTION)"

test: install
	$(PY) -m pytest
