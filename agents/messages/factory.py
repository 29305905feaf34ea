"""The process's messenger, chosen by RESEARCH_MESSENGER."""

import threading

from django.conf import settings

from agents.messages.base import Messenger
from agents.messages.memory import MemoryMessenger

_messenger: Messenger | None = None
_messenger_lock = threading.Lock()


def get_messenger() -> Messenger:
    """The process's messenger, chosen by RESEARCH_MESSENGER (memory or redis)."""
    global _messenger
    with _messenger_lock:
        if _messenger is None:
            if settings.RESEARCH_MESSENGER == "redis":
                from agents.messages.redis import RedisMessenger

                _messenger = RedisMessenger.from_url(settings.REDIS_URL)
            else:
                _messenger = MemoryMessenger()
        return _messenger
