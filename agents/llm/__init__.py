"""The model behind a run's name: the offline demo policy, or the configured endpoint."""

import threading

from django.conf import settings

from agents.llm.base import ChatModel, ChatResponse, LLMError, ToolCall
from research.pricing import DEMO_MODEL

__all__ = ["ChatModel", "ChatResponse", "LLMError", "ToolCall", "chat_model_for", "reset_clients"]


_lock = threading.Lock()
_client: ChatModel | None = None


def chat_model_for(model: str) -> ChatModel:
    """The ChatModel that answers for `model`; one shared endpoint client for every real model."""
    if model == DEMO_MODEL:
        # Imported here: the demo pulls in the knowledge base, which real runs never need.
        from agents.llm.demo import DemoModel

        return DemoModel()
    return _endpoint_client()


def reset_clients() -> None:
    """Forget the endpoint client, so the next call reads the settings again (tests)."""
    global _client
    with _lock:
        _client = None


def _endpoint_client() -> ChatModel:
    global _client
    client = _client
    if client is not None:
        return client
    # Agent threads start together: the lock makes them share one client (and its
    # connection pool) instead of each building their own.
    with _lock:
        if _client is None:
            from agents.llm.openai_client import OpenAIChat

            _client = OpenAIChat(
                base_url=settings.OPENAI_BASE_URL or None,
                api_key=settings.OPENAI_API_KEY or None,
                timeout=settings.LLM_TIMEOUT_SECONDS,
                max_retries=settings.LLM_MAX_RETRIES,
            )
        return _client
