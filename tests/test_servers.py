"""The servers tests and benches start (tests/servers.py) are theirs alone and never outlive
them: `make test` once left a redis-server of its own running, listening on every interface."""

import signal
import subprocess
import sys

import pytest
import redis

from tests.conftest import PROJECT, wait_for
from tests.servers import RedisServer


def alive(pid: int) -> bool:
    # A child that ended but was not reaped yet is a zombie: it serves nothing.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(") ", 1)[-1][0] != "Z"
    except FileNotFoundError:
        return False


def test_a_redis_server_of_a_test_listens_on_loopback_only():
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url)
        assert client.config_get("bind") == {"bind": "127.0.0.1"}
        client.close()


def test_a_redis_server_is_stopped_when_the_block_that_started_it_raises():
    with pytest.raises(RuntimeError), RedisServer() as server:
        pid = server.process.pid
        raise RuntimeError("the test failed")
    assert not alive(pid)


def test_starting_a_redis_server_again_leaves_no_earlier_one_running():
    with RedisServer() as server:
        first = server.process.pid
        server.start()
        assert not alive(first) and alive(server.process.pid)


def test_a_redis_server_is_gone_when_the_process_that_started_it_is_killed():
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; from tests.servers import RedisServer\n"
            "server = RedisServer(); server.start(); print(server.process.pid, flush=True)\n"
            "time.sleep(60)",
        ],
        cwd=PROJECT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pid = int(owner.stdout.readline())
        assert alive(pid)
        owner.send_signal(signal.SIGKILL)  # no finally, no atexit: only the kernel is left
        owner.wait(10)
        wait_for(lambda: not alive(pid), timeout=10, message="redis-server outlived its owner")
    finally:
        owner.kill()
        owner.wait()
        owner.stdout.close()
