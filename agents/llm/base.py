"""The chat interface every model speaks: messages and tool schemas in, one assistant turn out.

Messages are the OpenAI wire format (dicts with role, content, tool_calls, tool_call_id), so
the transcript a loop keeps can be sent as is to any OpenAI-compatible endpoint.
"""

from dataclasses import dataclass, field
from typing import Any, Protocol


class LLMError(Exception):
    """The model could not be reached or answered garbage, after the client's retries.

    Its message is what the run's error shows, e.g. "llm: 503 from api.example.com after 3 tries".
    """


@dataclass
class ToolCall:
    id: str
    name: str
    # The raw JSON text the model wrote: parsing it is the loop's job, so that a malformed
    # call becomes a tool error the model can fix rather than a crash here.
    arguments: str


@dataclass
class ChatResponse:
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0

    def as_message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in self.tool_calls
            ]
        return message


class ChatModel(Protocol):
    def chat(
        self, *, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ChatResponse:
        """One model call. `tools` empty means the model must answer in text."""
        ...
