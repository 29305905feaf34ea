"""A Messenger on Redis lists, for trees whose agents run in several processes.

Same contract as MemoryMessenger: send never blocks and fails with NoInbox or InboxFull;
receive takes every message, waiting for the first one. An inbox is a list plus a marker key
that says it is open; a Lua script checks both and pushes in one step, so no message lands in
a closed or full inbox.

An agent closes its inbox when it ends, but one killed with its process (kill -9, a lost
machine) cannot: its keys expire instead. Only sub-agents have inboxes, and a sub-agent lives
at most RESEARCH_SUBAGENT_TIMEOUT_SECONDS, so keys kept an hour longer than that outlive every
live inbox.
"""

import json
import math
import threading
import time
from collections.abc import Callable
from datetime import datetime

import redis
from django.conf import settings

from agents.messages.base import InboxFull, InboxMessage, NoInbox

_PUSH = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('LLEN', KEYS[2]) >= tonumber(ARGV[2]) then return -2 end
local length = redis.call('RPUSH', KEYS[2], ARGV[1])
if ARGV[3] ~= '0' then redis.call('EXPIRE', KEYS[2], ARGV[3]) end
return length
"""
KEEP_AFTER_TIMEOUT_SECONDS = 3600
# An inbox this process opened this recently is not opened again (RedisMessenger.open).
REOPEN_AFTER_SECONDS = 60


class RedisMessenger:
    def __init__(
        self,
        client: redis.Redis,
        *,
        size: int,
        prefix: str = "canopy:inbox",
        ttl_seconds: int | None = None,
    ):
        self.client = client
        self.size = size
        self.prefix = prefix
        # None: keys never expire.
        self.ttl_seconds = (ttl_seconds if ttl_seconds is not None else _default_ttl()) or None
        self._push = client.register_script(_PUSH)
        # The inboxes this process opened and has not closed, by when (monotonic).
        self._opened: dict[int, float] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, **kwargs) -> "RedisMessenger":
        return cls(redis.Redis.from_url(url), size=settings.RESEARCH_INBOX_SIZE, **kwargs)

    def _keys(self, run_id: int) -> tuple[str, str]:
        return f"{self.prefix}:{run_id}:open", f"{self.prefix}:{run_id}"

    def open(self, *run_ids: int) -> None:
        """Open the inboxes in one round trip, or keep them open: what was sent since the
        first open stays. A sub-agent reopens its inbox as it starts, in case Redis was down
        at its spawn or its start came long after; an inbox this process opened in the last
        REOPEN_AFTER_SECONDS is not opened again, which keeps that round trip off the way to
        the sub-agent's first model call."""
        # Recently: within REOPEN_AFTER_SECONDS, or half the keys' time to live if shorter.
        recently = min(REOPEN_AFTER_SECONDS, (self.ttl_seconds or math.inf) / 2)
        now = time.monotonic()
        with self._lock:
            due = [run for run in run_ids if now - self._opened.get(run, -math.inf) > recently]
        if not due:
            return
        with self.client.pipeline(transaction=False) as pipe:
            for run_id in due:
                pipe.set(self._keys(run_id)[0], 1, ex=self.ttl_seconds)
            pipe.execute()
        with self._lock:
            self._opened.update(dict.fromkeys(due, now))

    def close(self, run_id: int) -> None:
        with self._lock:
            self._opened.pop(run_id, None)
        self.client.delete(*self._keys(run_id))

    def send(self, message: InboxMessage) -> None:
        data = json.dumps(
            {
                "from_id": message.from_id,
                "from_name": message.from_name,
                "to_id": message.to_id,
                "text": message.text,
                "sent_at": message.sent_at.isoformat() if message.sent_at else None,
                "record_id": message.record_id,
            }
        )
        result = self._push(
            keys=list(self._keys(message.to_id)),
            args=[data, self.size, self.ttl_seconds or 0],
        )
        if result == -1:
            raise NoInbox(message.to_id)
        if result == -2:
            raise InboxFull(message.to_id)

    def receive(
        self, run_id: int, wait: float = 0, cancelled: Callable[[], bool] | None = None
    ) -> list[InboxMessage]:
        marker, inbox = self._keys(run_id)
        opened, messages = self._drain(marker, inbox)
        if not opened:
            return []  # as MemoryMessenger: no inbox, nothing to wait for
        deadline = time.monotonic() + wait
        while not messages and (left := deadline - time.monotonic()) > 0:
            if cancelled is not None and cancelled():
                break
            # BLPOP takes whole seconds on old servers; short slices keep cancel responsive.
            item = self.client.blpop([inbox], timeout=max(0.1, min(left, 0.5)))
            if item is not None:
                messages = [_decode(item[1]), *self._drain(marker, inbox)[1]]
        return messages

    def _drain(self, marker: str, inbox: str) -> tuple[bool, list[InboxMessage]]:
        """Whether the inbox is open, and every message it held. One MULTI/EXEC: a message
        pushed meanwhile is either taken here or left for the next receive, never lost."""
        with self.client.pipeline() as pipe:
            pipe.exists(marker)
            pipe.lrange(inbox, 0, -1)
            pipe.delete(inbox)
            opened, items, _ = pipe.execute()
        return bool(opened), [_decode(item) for item in items]


def _default_ttl() -> int | None:
    """An hour past the longest a sub-agent may live; no expiry when sub-agents have no
    time limit (RESEARCH_SUBAGENT_TIMEOUT_SECONDS = 0)."""
    timeout = settings.RESEARCH_SUBAGENT_TIMEOUT_SECONDS
    return int(timeout) + KEEP_AFTER_TIMEOUT_SECONDS if timeout > 0 else None


def _decode(raw: bytes) -> InboxMessage:
    data = json.loads(raw)
    sent_at = datetime.fromisoformat(data["sent_at"]) if data["sent_at"] else None
    return InboxMessage(
        from_id=data["from_id"],
        from_name=data["from_name"],
        to_id=data["to_id"],
        text=data["text"],
        sent_at=sent_at,
        record_id=data["record_id"],
    )
