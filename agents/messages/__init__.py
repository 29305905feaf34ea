"""The message system between agents (seed 000): an interface (`base`), an in-memory
implementation for one process (`memory`), a Redis one for a tree spread over processes
(`redis`), and the factory that picks one by settings (`factory`)."""

from agents.messages.base import InboxFull, InboxMessage, Messenger, NoInbox, send_message
from agents.messages.factory import get_messenger
from agents.messages.memory import MemoryMessenger

__all__ = [
    "InboxFull",
    "InboxMessage",
    "MemoryMessenger",
    "Messenger",
    "NoInbox",
    "get_messenger",
    "send_message",
]
