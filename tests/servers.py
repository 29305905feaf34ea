"""Real server processes that the tests and the bench scripts start: daphne serving the app on
a free port, and a Redis server of their own that they may stop and start again.

Standard library (and the redis client) only, so `bench/` can use it without pytest.
"""

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

PROJECT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def spawn_daphne(
    port: int, *, env: dict[str, str] | None = None, output: IO | int = subprocess.DEVNULL
) -> subprocess.Popen:
    """daphne serving research.asgi on 127.0.0.1:`port`; see `wait_listening`."""
    return subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
        + ["research.asgi:application"],
        cwd=PROJECT,
        env=env,
        stdout=output,
        stderr=subprocess.STDOUT,
    )


def wait_listening(process: subprocess.Popen, port: int, *, timeout: float = 30) -> None:
    """Until the process listens on `port`; RuntimeError if it exits or takes too long."""
    deadline = time.monotonic() + timeout
    while not listening(port):
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with status {process.returncode}")
        if time.monotonic() >= deadline:
            raise RuntimeError(f"the server did not listen on port {port} in {timeout:g} s")
        time.sleep(0.05)


class RedisServer:
    """A Redis server on a free port that keeps nothing on disk, for one test or one bench."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        import redis

        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() >= deadline:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
