"""Checkpoints: what an agent needs to go on from its last completed step after its process
is gone, and the record of each resume of a research.

A `Checkpoint` is written in the same transaction as the step it follows (research.services
.steps), so a crash leaves the step and its checkpoint, or neither. It holds the messages the
step added to the agent's conversation, exactly as the model was sent them and answered (tool
results whole, never cut like `Step.output`), and the agent's small state after it (the
sub-agents it spawned and whose reports it read, the answers refused). The conversation is the
concatenation of a run's checkpoints in order: each row stays small, whatever the length of
the conversation, and a large one is compressed.
"""

import json
import zlib
from decimal import Decimal
from typing import Any

from django.db import models

# Bodies above this many bytes of JSON are stored compressed (zlib); small ones as they are,
# so a row stays readable in psql for the common short step.
COMPRESS_ABOVE_BYTES = 2048


def pack(messages: list[dict[str, Any]]) -> tuple[bytes, bool]:
    """A step's messages as stored: JSON, compressed when large; (body, compressed)."""
    raw = json.dumps(messages, ensure_ascii=False, separators=(",", ":")).encode()
    if len(raw) > COMPRESS_ABOVE_BYTES:
        return zlib.compress(raw, 6), True
    return raw, False


def unpack(body: bytes, compressed: bool) -> list[dict[str, Any]]:
    raw = zlib.decompress(bytes(body)) if compressed else bytes(body)
    return json.loads(raw)


class Checkpoint(models.Model):
    """One completed step of an agent: the messages it added and the agent's state after it."""

    run = models.ForeignKey("research.Run", on_delete=models.CASCADE, related_name="checkpoints")
    # 1, 2, ... per run: the order the conversation is rebuilt in.
    number = models.PositiveIntegerField()
    body = models.BinaryField()
    compressed = models.BooleanField(default=False)
    # {"spawned": [ids], "collected": [ids], "answers_refused": n}
    state = models.JSONField(default=dict)
    at = models.DateTimeField()

    class Meta:
        db_table = "gb_agent_research_checkpoints"
        ordering = ["run", "number"]
        constraints = [
            models.UniqueConstraint(fields=["run", "number"], name="checkpoint_unique_number"),
        ]

    def __str__(self) -> str:
        return f"checkpoint {self.number} of run {self.run_id}"

    def messages(self) -> list[dict[str, Any]]:
        return unpack(self.body, self.compressed)


class Resume(models.Model):
    """A research resumed: when, by whom, which runs went on, and what the tree had spent
    before it (the ledger splits its calls at these times: first attempt, then each resume)."""

    class By(models.TextChoices):
        ANALYST = "analyst"
        AUTOMATIC = "automatic"  # RESEARCH_RESUME_INTERRUPTED: the worker handed its runs back

    root = models.ForeignKey("research.Run", on_delete=models.CASCADE, related_name="resumes")
    by = models.CharField(max_length=10, choices=By.choices, default=By.ANALYST)
    # The root's error when it was resumed: why the earlier attempt ended.
    ended_with = models.TextField(blank=True, default="")
    run_ids = models.JSONField(default=list)
    cost_before_usd = models.DecimalField(max_digits=14, decimal_places=8, default=Decimal(0))
    seq_before = models.PositiveBigIntegerField(default=0)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "gb_agent_research_resumes"
        ordering = ["root", "id"]

    def __str__(self) -> str:
        return f"resume of research {self.root_id} at {self.at:%H:%M:%S}"
