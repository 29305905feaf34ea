"""Real server processes that the tests and the bench scripts start: daphne serving the app on
a free port, and a Redis server of their own that they may stop and start again.

Standard library (and the redis client) only, so `bench/` can use it without pytest.
"""

import ctypes
import signal
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


def _die_with_parent() -> None:
    """Run in the child before it starts: the kernel sends it SIGTERM when the thread that
    started it ends (PR_SET_PDEATHSIG follows the thread, so start servers from a thread that
    lives as long as they should), however that ends (an exception, Ctrl-C, SIGKILL), so no
    server of a test or a bench outlives it."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


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
        preexec_fn=_die_with_parent,
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
    """A Redis server on a free port of 127.0.0.1 that keeps nothing on disk, for one test or
    one bench; it may be stopped and started again. Use it as a context manager, or stop it in
    a `finally`: either way it is gone when its owner ends (see _die_with_parent)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> "RedisServer":
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        import redis

        self.stop()  # a server started earlier is never left behind
        self.process = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port)]
            + ["--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        try:
            while True:
                try:
                    client.ping()
                    return
                except redis.ConnectionError:
                    if time.monotonic() >= deadline:
                        raise RuntimeError("redis-server did not start") from None
                    time.sleep(0.05)
        except BaseException:
            self.stop()
            raise
        finally:
            client.close()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
