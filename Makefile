# flashscope: `make run` serves the app, `make test` runs every check. Each sets itself up on a
# fresh machine: a virtual environment in .venv/, the project installed into it, and (for tests)
# Debian's chromium for the browser tests, redis-server for the shared-rooms tests and ESLint
# (npm ci, with the machine's Node.js) for the front end.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Loopback unless told on the command line (`make run HOST=0.0.0.0`): an environment variable
# HOST (tcsh exports the machine's name in it) never widens where the server listens.
HOST := 127.0.0.1
PORT ?= 8000
PYTEST_ARGS ?=
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test lint typecheck jslint format bench chromium redis clean screenshots vendor

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# torch is pinned to the CPU build of 2.13.0 (a local wheel here): a looser pin pulls CUDA.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# The tests cover rooms shared through Redis, so they install the redis extra too.
$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e '.[test,redis]'
	touch $@

run: $(VENV)/.installed
	$(BIN)/flashscope serve --host $(HOST) --port $(PORT)

chromium:
	@command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] || { \
		echo "installing Debian's chromium for the browser tests"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium; }

redis:
	@command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] || { \
		echo "installing Debian's redis-server for the shared-rooms tests"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq redis-server; }

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/hadolint Dockerfile
	$(MAKE) --no-print-directory typecheck jslint

# mypy cannot follow the editable install's import hook, so it reads flashscope.* through a
# tree of links in build/ (pyproject.toml's mypy_path points there).
TYPECHECK := build/typecheck/flashscope
typecheck: $(VENV)/.installed-test
	@mkdir -p $(TYPECHECK)
	@for d in app simulator kernels; do ln -sfn ../../../$$d $(TYPECHECK)/$$d; done
	$(BIN)/mypy -p flashscope.app -p flashscope.simulator -p flashscope.kernels

# ESLint at the versions package-lock.json pins; installed again only when the lock changes.
node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

jslint: node_modules/.installed
	npm run --silent lint

# The browser libraries in static/vendor/, copied verbatim from the npm packages that
# package-lock.json pins, each with its version in the file name: Plotly's published cartesian
# partial bundle (heatmap, bar and scatter are the traces the views draw) and Swagger UI for /docs.
# Templates name the files: after a version bump, point _partials/plotly.html and docs.html at them.
vendor: node_modules/.installed
	@set -e; v() { node -p "require('./node_modules/$$1/package.json').version"; }; \
	p=$$(v plotly.js-cartesian-dist-min); s=$$(v swagger-ui-dist); \
	cp node_modules/plotly.js-cartesian-dist-min/plotly-cartesian.min.js static/vendor/plotly-cartesian-$$p.min.js; \
	cp node_modules/swagger-ui-dist/swagger-ui-bundle.js static/vendor/swagger-ui-bundle-$$s.js; \
	cp node_modules/swagger-ui-dist/swagger-ui-bundle.js.LICENSE.txt static/vendor/swagger-ui-bundle-$$s.js.LICENSE.txt; \
	cp node_modules/swagger-ui-dist/swagger-ui.css static/vendor/swagger-ui-$$s.css; \
	ls -l static/vendor

test: $(VENV)/.installed-test chromium redis lint
	$(BIN)/python -m pytest -n 2 $(PYTEST_ARGS)

# Refresh the README's screenshots: the browser tests take them.
screenshots: $(VENV)/.installed-test chromium
	FLASHSCOPE_SCREENSHOTS=docs/screenshots $(BIN)/python -m pytest -m browser -q

format: $(VENV)/.installed-test
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(VENV)/.installed
	$(BIN)/python benchmarks/simulator_speed.py
	$(BIN)/python benchmarks/engine_speed.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .hypothesis build/typecheck node_modules
