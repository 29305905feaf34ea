"""A chat request's body as bytes, each message serialised once per conversation.

An agent's conversation only grows, and each model call sends all of it: serialising the
whole list again on every call costs more with every step. Each thread (an agent makes its
calls from its own) keeps the bytes of the messages it sent last, and of its tool schemas;
a message is serialised again only when it is not the same object at the same place (a
conversation replaced or cut, another agent in the thread). The body is the same JSON, byte
for byte, as `json.dumps` of the whole request.
"""

import json
import threading
from typing import Any


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


class EncodedRequests:
    def __init__(self) -> None:
        self._local = threading.local()

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
        state = self._local
        if getattr(state, "tools", None) is not tools:
            state.tools, state.tools_bytes = tools, _dumps(tools)
        return state.tools_bytes
