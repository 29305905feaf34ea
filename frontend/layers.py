"""The channel layer of a single process (no REDIS_URL): Channels' in-memory layer, without
three costs it pays on every message (issue 25, bench/channel_layer.py):

- `group_send` starts a task for each channel of the group and waits for them with
  `as_completed`; a put on an asyncio queue does not wait, so here it is a plain loop;
- every message is deep-copied for every channel it goes to. The only messages here are a
  tree's events (frontend.delivery), built for the push and only read after it: the
  consumer sends each as JSON, and `frames.fit` copies what it changes. So viewers of one
  tree share one message;
- every group send and every receive sweeps every channel and group for expired messages.
  Here the sweep runs at most once every SWEEP_SECONDS.

Everything else (capacity, expiry, groups, `ChannelFull`) is Channels' own.
"""

import asyncio
import contextlib
import time
from typing import Any

from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer

SWEEP_SECONDS = 1.0


class LocalChannelLayer(InMemoryChannelLayer):
    _swept = 0.0

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        assert isinstance(message, dict), "message is not a dict"
        self.require_valid_channel_name(channel)
        self._put(channel, message)

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        """Put `message` on each channel of `group`; a full channel misses it, as in
        Channels (a viewer that far behind catches up from the stored events)."""
        assert isinstance(message, dict), "message is not a dict"
        self.require_valid_group_name(group)
        self._clean_expired()
        for channel in list(self.groups.get(group, ())):
            with contextlib.suppress(ChannelFull):
                self._put(channel, message)

    def _put(self, channel: str, message: dict[str, Any]) -> None:
        assert "__asgi_channel__" not in message
        queue = self.channels.setdefault(channel, asyncio.Queue(maxsize=self.get_capacity(channel)))
        try:
            queue.put_nowait((time.time() + self.expiry, message))
        except asyncio.QueueFull:
            raise ChannelFull(channel) from None

    def _clean_expired(self) -> None:
        now = time.monotonic()
        if now - self._swept < SWEEP_SECONDS:
            return
        self._swept = now
        super()._clean_expired()
