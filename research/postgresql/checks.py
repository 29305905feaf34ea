"""The check PostgreSQL's connection pool runs on a connection it hands out.

psycopg_pool's own check (`ConnectionPool.check_connection`) sends an empty query and waits
for the answer on every `getconn`. Agent threads give their connection back whenever they
wait and take one again after, so that round trip ran thousands of times a research (about
7% of a research's CPU, issue 25). A connection idle in the pool receives nothing from the
server, except when the server ends it: a terminated backend (a restart,
`pg_terminate_backend`, `idle_in_transaction_session_timeout`) sends its FATAL error and
closes the socket. So the check asks the socket first, without waiting: nothing to read
means the connection is as the pool left it, and it is handed out with no round trip;
anything to read (the server's goodbye, or a notice) gets the full round-trip check, which
fails for a connection the server ended, so that the pool replaces it.

A server that ended one idle connection (a restart) has usually ended them all, and the pool
sleeps its reconnection backoff (1 s, then twice as long each time) after every failed check
of one getconn: with seven dead connections idle, a thread waited about 30 s. So a failed check
has the pool check its other idle connections at once (`ConnectionPool.check`, a round trip
each, only then), and the getconn pays one backoff, not one per dead connection.
"""

import select
from typing import Any

from psycopg import OperationalError
from psycopg_pool import ConnectionPool


class IdleConnectionCheck:
    """The pool's `check`: raise when `conn` is unusable, else return. `pool` is set once the
    pool it checks for is built (the pool takes its check as an argument)."""

    def __init__(self) -> None:
        self.pool: ConnectionPool | None = None

    def __call__(self, conn: Any) -> None:
        try:
            if conn.closed or conn.broken:
                raise OperationalError("the connection is closed")
            if _readable(conn.fileno()):
                ConnectionPool.check_connection(conn)
        except OperationalError:
            if self.pool is not None:
                self.pool.check()  # the others the same restart ended go too
            raise


def _readable(fd: int) -> bool:
    """Whether the socket has bytes (or its end) to read, without waiting."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))
