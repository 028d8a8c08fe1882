# Two commands for a fresh machine:  `make demo`  (set up, ingest the sample KB, answer a question offline)
#                                     `make test`  (set up, lint, build the docs, run the test suite)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Prebuilt llama-cpp-python wheels, when present (elsewhere pip builds it from source: 20-45 min).
WHEELS ?= ../shared/wheels
FIND_LINKS := $(if $(wildcard $(WHEELS)/*.whl),--find-links $(WHEELS),)
QUESTION ?= How do I insert a table of contents in Writer?
# The local model's llama.cpp: `native` builds its CPU libraries for this CPU after installing (about a minute;
# on AVX-512 CPUs prompts are read twice as fast; kept only when faster), `portable` keeps the wheel's build.
LLAMA_BUILD ?= native

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export OMP_WAIT_POLICY := PASSIVE

.PHONY: install demo test lint docs bench-ingest llama-native llama-portable clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first: the CPU wheel; otherwise pip pulls gigabytes of CUDA packages.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet $(FIND_LINKS) 'llama-cpp-python[server]==0.3.36'
	$(BIN)/pip install --quiet $(FIND_LINKS) -e '.[local,dashboard,server,cohere,postgres,multilingual,ocr,dev]'
	@if [ "$(LLAMA_BUILD)" = native ]; then \
		$(BIN)/ragidx runtime native || echo "make: the portable llama.cpp build stays (see above)"; fi
	touch $@

llama-native: install
	$(BIN)/ragidx runtime native

llama-portable: install
	$(BIN)/ragidx runtime portable

demo: install
	$(BIN)/ragidx ingest ragidx/data/kb/
	$(BIN)/ragidx ask "$(QUESTION)"

test: install
	$(BIN)/ruff check ragidx ingestion tests benchmarks streamlit_app.py
	$(BIN)/mypy
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	$(BIN)/pytest -q

# The docs site (mkdocs.yml, docs/) into site/; --strict: a broken link or API reference fails the build.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

lint: install
	$(BIN)/ruff check ragidx ingestion tests benchmarks streamlit_app.py
	$(BIN)/ruff format --check ragidx ingestion tests
	$(BIN)/mypy

bench-ingest: install
	$(BIN)/python benchmarks/ingest.py --kb ../shared/data/kb/libreoffice_en.jsonl

clean:
	rm -rf $(VENV) .ragidx site
