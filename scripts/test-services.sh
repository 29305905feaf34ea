#!/usr/bin/env bash
# Start what the test suite talks to, if it is not running: PostgreSQL, Redis, Chromium.
set -euo pipefail

if ! command -v chromium >/dev/null 2>&1; then
    echo "installing Debian's chromium for the browser tests"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

if ! pg_isready -q -h 127.0.0.1 -p 5432; then
    echo "starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start
    for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
fi

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    echo "starting Redis"
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
    for _ in $(seq 1 30); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 1; done
fi

# The role the tests connect as (trust auth on this machine; CREATEDB for the test database).
if ! psql -h 127.0.0.1 -U postgres -tAc "SELECT 1" postgres >/dev/null 2>&1; then
    su postgres -c "psql -tAc \"CREATE ROLE postgres SUPERUSER LOGIN\"" >/dev/null 2>&1 || true
fi
