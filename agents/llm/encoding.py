"""A chat request's body as bytes, each message serialised once per conversation.

An agent's conversation only grows, and each model call sends all of it: serialising the
whole list again on every call costs more with every step. Each thread (an agent makes its
calls from its own) keeps the bytes of the messages it sent last; a message is serialised
again only when it is not the same object at the same place (a conversation replaced or cut,
another agent in the thread). A list of tool schemas is serialised once for the process: the
agents offered the same tools send the same list (agents.tools.tool.schemas), and a new
agent's first call no longer pays for it (issue 25). The body is the same JSON, byte for
byte, as `json.dumps` of the whole request.
"""

import json
import threading
from typing import Any


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


# Lists of tool schemas kept serialised; past this many (settings changed under tests), the
# process starts over.
TOOL_LISTS_KEPT = 256


class EncodedRequests:
    def __init__(self) -> None:
        self._local = threading.local()
        # id of a list of tool schemas -> (the list, kept so that its id stays its own; bytes)
        self._tool_lists: dict[int, tuple[list[dict[str, Any]], bytes]] = {}

    def body(
        self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> bytes:
        parts = [b'{"model":', _dumps(model), b',"messages":', self._messages(messages)]
        if tools:
            parts += [b',"tools":', self._tools(tools)]
        parts.append(b"}")
        return b"".join(parts)

    def _messages(self, messages: list[dict[str, Any]]) -> bytes:
        state = self._local
        sent: list[dict[str, Any]] = getattr(state, "sent", [])
        chunks: list[bytes] = getattr(state, "chunks", [])
        same = 0
        for before, now in zip(sent, messages, strict=False):  # the shorter decides
            if before is not now:
                break
            same += 1
        del sent[same:], chunks[same:]
        for message in messages[same:]:
            sent.append(message)
            chunks.append(_dumps(message))
        state.sent, state.chunks = sent, chunks
        return b"[" + b",".join(chunks) + b"]"

    def _tools(self, tools: list[dict[str, Any]]) -> bytes:
        known = self._tool_lists.get(id(tools))
        if known is None or known[0] is not tools:
            if len(self._tool_lists) >= TOOL_LISTS_KEPT:
                self._tool_lists.clear()
            known = self._tool_lists[id(tools)] = (tools, _dumps(tools))
        return known[1]
