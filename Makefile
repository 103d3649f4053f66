# make test  : create .venv if missing, install, run the test suite (README's test command)
# make bench : run every benchmark's --quick mode (or one: make bench BENCH=speed)
# make docs  : build the site (strict) into site/; make docs-check: the built site in headless Chromium
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
BENCH  ?=

.PHONY: test bench lint docs docs-check clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned: the CPU build on this machine's disk; an unpinned torch pulls a CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[all]'
	# MovieLens-100k ships inside the recbole wheel; only its data file is read, recbole is never imported.
	$(PY) -m pip install --quiet --no-deps recbole==1.2.1
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m ruff check pe_toolkit domains benchmarks tests docs/scripts
	$(PY) -m pytest -q -n auto --dist worksteal tests
	$(PY) -m pytest -q -n auto --dist worksteal --markdown-docs -p no:cacheprovider --ignore=docs/scripts README.md docs

bench: $(STAMP)
	$(PY) -m pe_toolkit.bench all --preset quick $(if $(BENCH),--only $(BENCH),)

lint: $(STAMP)
	$(PY) -m ruff check pe_toolkit domains benchmarks tests docs/scripts

# The two variables silence the notices that mkdocs-material (NO_MKDOCS_2_WARNING) and properdocs
# (DISABLE_MKDOCS_2_WARNING) print on every build. Figures are committed: python docs/scripts/gallery.py
# and python docs/scripts/tutorial_figures.py redraw them (the build fails when a tutorial figure is stale).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(VENV)/bin/mkdocs build --strict

# the built site in headless Chromium (Debian's chromium package; skipped with a message without it);
# screenshots in results/docs-shots/
docs-check: docs
	$(PY) docs/scripts/browser_check.py --site site

clean:
	rm -rf $(VENV) results lightning_logs .pytest_cache
