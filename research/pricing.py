"""Prices of the models Canopy knows, per million tokens.

A model with no known price is refused at start (seed 001): its spend would land in the usage
ledger as zero and nobody could tell what a run cost.
"""

from decimal import Decimal

from django.conf import settings

MILLION = Decimal(1_000_000)

# The offline demo model (agents.llm.demo): free, and what runs use with no LLM configured.
DEMO_MODEL = "demo"

# USD per million (input, output) tokens.
BUILTIN_PRICES: dict[str, tuple[Decimal, Decimal]] = {
    DEMO_MODEL: (Decimal("0"), Decimal("0")),
    "gpt-4o-mini": (Decimal("0.15"), Decimal("0.60")),
    "gpt-4o": (Decimal("2.50"), Decimal("10.00")),
    "gpt-4.1": (Decimal("2.00"), Decimal("8.00")),
    "gpt-4.1-mini": (Decimal("0.40"), Decimal("1.60")),
    "gpt-4.1-nano": (Decimal("0.10"), Decimal("0.40")),
    "gpt-5": (Decimal("1.25"), Decimal("10.00")),
    "gpt-5-mini": (Decimal("0.25"), Decimal("2.00")),
    "gpt-5-nano": (Decimal("0.05"), Decimal("0.40")),
    "o4-mini": (Decimal("1.10"), Decimal("4.40")),
}


def prices() -> dict[str, tuple[Decimal, Decimal]]:
    """The built-in table with RESEARCH_MODEL_PRICES merged over it."""
    return {**BUILTIN_PRICES, **settings.RESEARCH_MODEL_PRICES}


def known_models() -> list[str]:
    return sorted(prices())


def is_known(model: str) -> bool:
    return model in prices()


def cost(model: str, input_tokens: int, output_tokens: int) -> Decimal:
    input_price, output_price = prices()[model]
    return (input_tokens * input_price + output_tokens * output_price) / MILLION


def endpoint_configured() -> bool:
    """Whether a model other than the demo has somewhere to run. agents.llm sends each one to
    OPENAI_BASE_URL (OpenAI's API when unset) with OPENAI_API_KEY: with neither set, every
    call is refused and the research fails after its retries."""
    return bool(settings.OPENAI_BASE_URL or settings.OPENAI_API_KEY)


def can_run(model: str) -> bool:
    """Whether a research on this model can get an answer here (the demo always can)."""
    return model == DEMO_MODEL or endpoint_configured()
