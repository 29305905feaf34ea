"""Where committed events go: the domain publishes (events.store numbers and stores them and,
after commit, hands them here), delivery delivers. The delivery itself (the ordered sender
to the channel layer) belongs to the consumer side of the house, `frontend/delivery.py`,
which installs itself when the frontend app is ready (frontend/apps.py), in every process
that loads the project's apps (daphne, runagents, the CLI, MCP). The domain never imports
it; without one installed, events are stored and nobody is told (browsers catch up from
the stored rows when they reconnect).
"""

from typing import Any, Protocol


class Delivery(Protocol):
    def expect(self, root_id: int, first: int, count: int) -> None: ...

    def broadcast(self, root_id: int, payloads: list[dict[str, Any]]) -> None: ...

    def flush(self, timeout: float = 5.0) -> None: ...


_installed: Delivery | None = None


def install(delivery: Delivery) -> None:
    global _installed
    _installed = delivery


def expect(root_id: int, first: int, count: int) -> None:
    """Numbers `first`.. of a tree were reserved in this process: later ones wait for them."""
    if _installed is not None:
        _installed.expect(root_id, first, count)


def broadcast(root_id: int, payloads: list[dict[str, Any]]) -> None:
    """Committed events of a tree, to be delivered in number order (from any thread)."""
    if _installed is not None:
        _installed.broadcast(root_id, payloads)


def flush(timeout: float = 5.0) -> None:
    """Wait until this process's pending deliveries are sent (a worker about to exit)."""
    if _installed is not None:
        _installed.flush(timeout)
