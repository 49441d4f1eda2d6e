# Two entry points: `make demo` runs the whole system, `make test` the whole suite.
# Both set up everything they need on a fresh Debian machine with Python 3.11.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint browser clean

$(STAMP): requirements-node.txt requirements.txt requirements-dev.txt constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt -c constraints.txt
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m devtools.demo

# Playwright drives Debian's chromium: the browser downloads of `playwright
# install` are not reachable from many clusters.
browser:
	@test -x /usr/bin/chromium || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)

test: $(STAMP) browser
	$(PY) -m pytest

# ruff (pyflakes, pycodestyle, import order, bugbear) and mypy, configured in pyproject.toml.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .demo staticfiles
