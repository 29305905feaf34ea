"""The research domain: runs (agents) in trees, their timeline, messages, usage and events.

Nothing here holds business logic: every write goes through `research.services`.
"""

from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db import models
from django.utils import timezone


class Status(models.TextChoices):
    QUEUED = "queued"
    WORKING = "working"
    # A root waiting for the analyst to approve its plan: no thread, no slot, no worker.
    PAUSED = "paused"
    DONE = "done"
    FAILED = "failed"


ACTIVE_STATUSES = (Status.QUEUED, Status.WORKING, Status.PAUSED)


class State(models.TextChoices):
    QUEUED = "queued"
    PLANNING = "planning"
    CLARIFYING = "clarifying"
    REVIEWING = "reviewing"
    THINKING = "thinking"
    SEARCHING = "searching"
    READING = "reading"
    QUERYING = "querying"
    REMEMBERING = "remembering"
    SPAWNING = "spawning"
    WAITING = "waiting"
    MESSAGING = "messaging"
    WRITING = "writing"
    ENDED = "ended"


class Run(models.Model):
    """One research agent: a root a user started, or a sub-agent another agent spawned."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    # A root points at itself; set right after the insert.
    root = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    depth = models.PositiveSmallIntegerField(default=0)
    name = models.CharField(max_length=40, blank=True, default="")
    reason = models.CharField(max_length=300, blank=True, default="")
    # A sub-agent's kind (agents.kinds: researcher, verifier, an admin's) and the model tier
    # its parent picked; "" for a root, and for the tier when no tiers are configured.
    kind = models.CharField(max_length=40, blank=True, default="")
    tier = models.CharField(max_length=40, blank=True, default="")
    topic = models.TextField()
    model = models.CharField(max_length=100)
    # The research tools this agent may use (a child: its kind's that its parent has);
    # null: every tool its run allows (a root).
    tools = models.JSONField(null=True, blank=True)
    # The item of its root's plan a sub-agent covers (its text, so a revision that keeps the
    # item keeps the link); "" when it covers none.
    plan_item = models.CharField(max_length=200, blank=True, default="")
    # A root that follows up this done research (a thread): its lead starts from that report.
    follows = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="followups"
    )
    # A root that pauses after its first plan until the analyst approves it.
    review_plan = models.BooleanField(default=False)
    # A root its analyst starred in the library (the list can show only the starred).
    starred = models.BooleanField(default=False)
    # A root whose lead may ask the analyst up to three questions before it starts; what it
    # asked and was answered (research.services.clarify): null until it asks.
    clarify = models.BooleanField(default=False)
    clarification = models.JSONField(null=True, blank=True)
    # Claims of the final report the verifier could not support (a root, issue 14).
    flagged_claims = models.JSONField(default=list, blank=True)
    # An analyst's note waits for this agent; read by the pool's watch with the cancel flag.
    notes_pending = models.BooleanField(default=False)
    dataset = models.ForeignKey(
        "Dataset", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    state = models.CharField(max_length=12, choices=State.choices, default=State.QUEUED)
    max_steps = models.PositiveSmallIntegerField(default=10)
    steps = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=14, decimal_places=8, default=Decimal(0))
    # Its own cost plus its whole subtree's, kept by services.usage_add on every call.
    tree_cost_usd = models.DecimalField(max_digits=14, decimal_places=8, default=Decimal(0))
    # Its own tokens plus its whole subtree's, kept with tree_cost_usd: a root holds its
    # tree's totals, so no write has to add up the tree.
    tree_input_tokens = models.PositiveBigIntegerField(default=0)
    tree_output_tokens = models.PositiveBigIntegerField(default=0)
    report = models.TextField(blank=True, default="")
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Time a root spent waiting for the analyst (plan review) is not time it worked: paused
    # spans so far, and the start of the one it is in.
    paused_seconds = models.FloatField(default=0)
    paused_at = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    cancel_reason = models.CharField(max_length=200, blank=True, default="")
    # The agent process that runs the tree (see Worker); empty while a root is unclaimed.
    worker = models.ForeignKey(
        "Worker", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    # Per-tree event counter, used on roots only (see research.events.publish).
    event_seq = models.PositiveBigIntegerField(default=0)

    class Meta:
        db_table = "gb_agent_research_runs"
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["parent", "name"], name="run_unique_name_per_parent"),
        ]
        indexes = [
            models.Index(fields=["owner", "-created_at"], name="run_owner_created"),
            # The admin's list: every owner's runs, newest first.
            models.Index(fields=["-created_at", "-id"], name="run_created"),
            models.Index(fields=["root", "id"], name="run_root"),
            models.Index(fields=["status"], name="run_status"),
        ]

    def __str__(self) -> str:
        return f"{self.name or 'root'} (run {self.pk})"

    @property
    def is_root(self) -> bool:
        return self.parent_id is None

    @property
    def may_clarify(self) -> bool:
        """Whether the root may still ask its clarifying questions: started with `clarify`,
        and has not asked yet (research.services.clarify)."""
        return self.parent_id is None and self.clarify and self.clarification is None

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    def worked_seconds(self, now: datetime | None = None) -> float | None:
        """From its start to its end (or now), paused spans left out; None before it starts."""
        if self.started_at is None:
            return None
        end = self.finished_at or self.paused_at or now or timezone.now()
        return max(0.0, (end - self.started_at).total_seconds() - self.paused_seconds)

    @property
    def clock_running(self) -> bool:
        """Whether its worked time grows: it has started, works, and is not paused."""
        return self.started_at is not None and self.status in (Status.QUEUED, Status.WORKING)


class RunState(models.Model):
    """The timeline of a run's states, each with a short detail (query, URL, sibling)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="states")
    state = models.CharField(max_length=12, choices=State.choices)
    detail = models.CharField(max_length=500, blank=True, default="")
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "gb_agent_research_states"
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.state} {self.detail}".strip()


class Message(models.Model):
    """A message between sibling sub-agents: the stored transcript (the inbox is in memory);
    or a note from the analyst (no `from_run`, an `author`), delivered at the agent's next
    round."""

    from_run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.CASCADE, related_name="sent_messages"
    )
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    to_run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="received_messages")
    text = models.TextField()
    sent_at = models.DateTimeField(auto_now_add=True)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["to_run", "id"], name="message_to_run")]

    def __str__(self) -> str:
        return f"message {self.pk}: run {self.from_run_id} to run {self.to_run_id}"


class Plan(models.Model):
    """One version of a root's plan: the items it means to cover. The latest version is the
    plan; earlier ones are its history. The analyst's edits are versions too."""

    class Author(models.TextChoices):
        AGENT = "agent"
        ANALYST = "analyst"

    root = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="plans")
    version = models.PositiveIntegerField()
    items = models.JSONField()
    author = models.CharField(max_length=8, choices=Author.choices, default=Author.AGENT)
    # Set on the version the analyst approved (a reviewed research resumes from it).
    approved_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["root", "version"]
        constraints = [
            models.UniqueConstraint(fields=["root", "version"], name="plan_unique_version"),
        ]

    def __str__(self) -> str:
        return f"plan v{self.version} of run {self.root_id}"


class LLMCall(models.Model):
    """The usage ledger: one row per model call."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="llm_calls")
    parent_run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    depth = models.PositiveSmallIntegerField(default=0)
    model = models.CharField(max_length=100)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=14, decimal_places=8, default=Decimal(0))
    latency_ms = models.PositiveIntegerField(default=0)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.model} call of run {self.run_id}"


class Step(models.Model):
    """The transcript: each model turn and each tool call with its input and result."""

    class Kind(models.TextChoices):
        MODEL = "model"
        TOOL = "tool"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="transcript")
    kind = models.CharField(max_length=5, choices=Kind.choices)
    tool = models.CharField(max_length=64, blank=True, default="")
    input = models.JSONField(default=dict, blank=True)
    # Model turn: its text; tool call: its result, truncated to a setting.
    output = models.TextField(blank=True, default="")
    is_error = models.BooleanField(default=False)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.tool}".strip() + f" of run {self.run_id}"


class Event(models.Model):
    """An append-only row per pushed event, numbered per tree, so a browser misses nothing."""

    root = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveBigIntegerField()
    type = models.CharField(max_length=20)
    payload = models.JSONField()
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["seq"]
        constraints = [
            models.UniqueConstraint(fields=["root", "seq"], name="event_unique_seq_per_tree"),
        ]

    def __str__(self) -> str:
        return f"{self.type} #{self.seq} of tree {self.root_id}"


class Worker(models.Model):
    """A process that runs agents (the web process or a runagents worker), with a heartbeat."""

    hostname = models.CharField(max_length=200)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField(auto_now_add=True)
    heartbeat_at = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)
    # False for a pool that runs only the roots it is given (`research start --wait`, `mcp`
    # over stdio): it does not count as a process that would take a queued research.
    claims_roots = models.BooleanField(default=True)

    def __str__(self) -> str:
        return f"{self.hostname}:{self.pid}"


class Profile(models.Model):
    """Per-user research settings."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="research_profile"
    )
    subagents_enabled = models.BooleanField(
        default=True, help_text="Offer spawn_subagent to this user's research agents."
    )

    def __str__(self) -> str:
        return f"research profile of user {self.user_id}"


class Source(models.Model):
    """Something an agent saw: a page it read, a search result, a knowledge-base chunk."""

    class Kind(models.TextChoices):
        PAGE = "page"
        SEARCH = "search"
        CHUNK = "chunk"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="sources")
    root = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=6, choices=Kind.choices)
    url = models.CharField(max_length=2000)
    final_url = models.CharField(max_length=2000, blank=True, default="")
    title = models.CharField(max_length=500, blank=True, default="")
    snippet = models.TextField(blank=True, default="")
    text = models.TextField(blank=True, default="")
    sha256 = models.CharField(max_length=64, blank=True, default="")
    # Carried from the research this tree follows up: seen there, not fetched again here.
    carried = models.BooleanField(default=False)
    fetched_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["root", "url"], name="source_root_url")]

    def __str__(self) -> str:
        return f"{self.kind} {self.url}"


class Citation(models.Model):
    """A URL a report cites, checked against what the tree actually saw."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="citations")
    url = models.CharField(max_length=2000)
    title = models.CharField(max_length=500, blank=True, default="")
    verified = models.BooleanField(default=False)
    # The source that proves it was seen, and so the agent that found it.
    source = models.ForeignKey(Source, null=True, blank=True, on_delete=models.SET_NULL)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{'verified' if self.verified else 'flagged'} {self.url}"


class Callback(models.Model):
    """A URL that gets a signed POST when its research ends (research/services/callbacks.py)."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="callback")
    url = models.CharField(max_length=2000)
    attempts = models.PositiveSmallIntegerField(default=0)
    # When the sender may try (again); a sender taking it pushes it on, as a lease.
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    gave_up_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                name="callback_pending",
                condition=models.Q(delivered_at__isnull=True, gave_up_at__isnull=True),
            )
        ]

    def __str__(self) -> str:
        return f"callback of run {self.run_id} to {self.url}"


# Models of their own modules, registered with the app here.
from research.models_checkpoints import Checkpoint, Resume  # noqa: E402, F401  (resume)
from research.models_knowledge import Chunk, Dataset, Document  # noqa: E402, F401
from research.models_remote import RemoteServer  # noqa: E402, F401  (remote MCP servers)
