# The two commands: `make run` and `make test`. Everything they need is installed from here.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test lint install lock services screenshot bench soak clean

# The exact versions of requirements.lock, then the project itself on top of them.
$(STAMP): pyproject.toml requirements.lock
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

run: install
	$(PY) manage.py migrate --noinput
	$(PY) manage.py first_user
	$(PY) manage.py load_starter_dataset
	$(PY) manage.py collectstatic --noinput -v0
	$(VENV)/bin/daphne -b $(HOST) -p $(PORT) research.asgi:application

# Re-resolve requirements.lock from pyproject.toml (after changing a dependency): every
# package at the newest version the ranges allow, for every platform and Python >= 3.11.
lock:
	test -x $(PY) || python3 -m venv $(VENV)
	test -x $(VENV)/bin/uv || $(PY) -m pip install -q uv
	$(VENV)/bin/uv pip compile pyproject.toml --extra dev --universal --python-version 3.11 \
		--custom-compile-command "make lock" -q -o requirements.lock

services:
	scripts/test-services.sh

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

# Two pytest-xdist workers, whole files each (a file's module fixtures start once): each has
# its own test database and Redis database (tests/settings.py). TEST_WORKERS=0 runs in one.
TEST_WORKERS ?= 2
test: install services lint
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile

# Canopy's own cost, measured against its ideal on this machine; writes the plots of
# docs/performance.md. About ten minutes.
bench: install services
	$(PY) bench/research_cpu.py
	$(PY) bench/step_cost.py --database sqlite
	$(PY) bench/step_cost.py --database postgres
	$(PY) bench/start_cost.py
	$(PY) bench/spawn_cost.py
	$(PY) bench/agent_lifecycle.py --database postgres
	$(PY) bench/tree_timeline.py
	$(PY) bench/loop_agents.py
	$(PY) bench/outbound_cost.py
	$(PY) bench/channel_layer.py
	$(PY) bench/writer_batch.py
	$(PY) bench/served.py --json bench-results.json
	$(PY) bench/plots.py bench-results.json docs

# Hostile conditions (docs/reliability.md): 50 trees, 20 viewers that drop and resume, Redis
# restarted and PostgreSQL backends terminated meanwhile; checks nothing was lost or leaked.
# A few minutes; not part of `make test`.
soak: install services
	$(PY) bench/soak.py --json soak-results.json

screenshot: install services
	$(PY) scripts/screenshot.py docs/run-page.png
	$(PY) scripts/screenshot_followup.py docs/follow-up.png

clean:
	rm -rf $(VENV) staticfiles .pytest_cache
