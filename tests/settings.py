"""The test suite runs against the real parts: PostgreSQL and Redis (see `make services`)."""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/canopy")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
# Under pytest-xdist each worker has its own test database (pytest-django adds _gw0, _gw1)
# and its own Redis database, next to the one given: run ids restart in each database, so a
# shared Redis would carry one worker's tree channels and counters to the other.
if _worker := os.environ.get("PYTEST_XDIST_WORKER"):
    _base, _, _db = os.environ["REDIS_URL"].rpartition("/")
    os.environ["REDIS_URL"] = f"{_base}/{int(_db or 0) + int(_worker.removeprefix('gw'))}"
os.environ.setdefault("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # tests start their own
os.environ.setdefault("OPENAI_API_KEY", "test-key")
os.environ.setdefault("RESEARCH_MODEL", "scripted")
os.environ.setdefault("RESEARCH_MODEL_PRICES", '{"scripted": [1.0, 2.0]}')
# Verification adds a verifier sub-agent to every research: the tests of it turn it on.
os.environ.setdefault("RESEARCH_VERIFY_REPORTS", "false")
# Tests start many researches quickly; tests/test_ops_throttles.py sets real rates.
for _scope in ("RESEARCH_START", "UPLOADS", "KNOWLEDGE_QUERIES", "NOTES", "LOGIN"):
    os.environ.setdefault(f"THROTTLE_{_scope}", "10000/minute")
os.environ.setdefault("THROTTLE_EXPORTS", "10000/minute")

from research.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
