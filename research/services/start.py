"""Starting a research: the one service every edge calls (the API, the page and its
follow-ups and re-runs, MCP, the CLI), with its options: the start throttle, the review of
the plan, the clarifying questions, a callback, a research it follows up."""

from functools import cache

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from research import pricing
from research.errors import InvalidInput
from research.events import RunCreated
from research.events.store import first_seqs, publish_all
from research.models import Dataset, Run, State
from research.ops.throttles import ResearchStartThrottle, throttle_check
from research.pricing import DEMO_MODEL
from research.services.announce import roots_queued
from research.services.callbacks import callback_register, callback_url_check
from research.services.followups import followed_research, followup_sources_carry
from research.services.locks import claim_new_root
from research.services.runs import (
    claimed_payload,
    runs_create,
    validate_max_steps,
    validate_topic,
    working_roots_check,
)
from research.services.seats import root_seats
from research.services.starter import starter_dataset_load
from research.services.steps import step_inserts
from research.sql import Update, inserts_deferred


def validate_model(model: str | None) -> str:
    model = model or settings.RESEARCH_MODEL
    if not pricing.is_known(model):
        raise InvalidInput(
            f"unknown model {model!r}: a model needs a known price "
            f"(set RESEARCH_MODEL_PRICES). Known models: {', '.join(pricing.known_models())}.",
            field="model",
        )
    if not pricing.can_run(model):
        raise InvalidInput(
            f"model {model!r} cannot run here: no LLM endpoint is configured (set "
            "OPENAI_API_KEY, or OPENAI_BASE_URL for a compatible server); the demo model runs "
            "offline.",
            field="model",
        )
    return model


def run_start(
    *,
    owner: AbstractBaseUser,
    topic: str,
    max_steps: int | None = None,
    model: str | None = None,
    dataset_id: int | None = None,
    review_plan: bool = False,
    clarify: bool = False,
    callback_url: str = "",
    follows_id: int | None = None,
    throttle: bool = True,
) -> Run:
    """Create a root run: claimed for this process's agent pool when it has a slot free
    (research.services.seats), its agent starting after commit; queued otherwise, for a pool
    to claim. With `review_plan`, it pauses after its first plan until the analyst approves
    it; with `clarify`, its lead may first ask the analyst questions (research.services.
    clarify); with a `callback_url`, its end is posted there (research.services.callbacks);
    with `follows_id`, it follows up that done research (research.services.followups), on its
    dataset by default.

    Every edge starts a research here: the checks, the working limit and the callback are one
    transaction, so a research is queued or claimed (its agents may start) only with
    everything it was started with. Each start is counted against the owner's
    THROTTLE_RESEARCH_START first, valid or not, as DRF counted a POST before reading it: over
    the rate it raises Throttled and nothing is checked or stored. `throttle=False` is for the
    operator's own tools on the machine (the CLI, benches), which the rate never bound. The
    count is a cache round trip, made before the transaction opens so that a slow or absent
    Redis holds no connection."""
    if throttle:
        throttle_check(ResearchStartThrottle, owner)
    # A root this process's agent pool can run now is claimed here (research.services.seats).
    with root_seats.seat() as seat, transaction.atomic():
        topic = validate_topic(topic)
        if callback_url:
            callback_url = callback_url_check(callback_url)
        max_steps = validate_max_steps(max_steps)
        model = validate_model(model)
        follows = followed_research(owner=owner, run_id=follows_id)
        if follows is not None and dataset_id is None:
            dataset_id = follows.dataset_id
        dataset = _dataset_of(owner=owner, dataset_id=dataset_id, model=model)
        seated = seat.take() is not None  # last: a first demo run loads its starter dataset
        run = Run(
            owner=owner,
            topic=topic,
            model=model,
            max_steps=max_steps,
            dataset=dataset,
            review_plan=bool(review_plan),
            clarify=bool(clarify),
            follows=follows,
            # Its events, the tree's first (created; claimed when seated), are numbered with
            # its insert: first_seqs below.
            event_seq=1 + seated,
        )
        # Every start runs these: statements built once, not the ORM's, and its first state
        # and its events in one round trip (inserts_deferred).
        runs_create([run])
        run.root = run
        events = [(run.pk, RunCreated.of(run))]
        states = [(run.pk, State.QUEUED, "", run.created_at)]
        claimed = None
        if not seated:
            _root_update().row(run.pk, run.pk)
        else:  # claimed as its root id is set, thinking: its agent's first act is a call
            claimed = claim_new_root(
                run_id=run.pk, worker_id=seat.worker_id, now=timezone.now(), state=State.THINKING
            )
            run.status, run.state = claimed.status, claimed.state
            run.worker_id, run.started_at = claimed.worker_id, claimed.started_at
            events.append((run.pk, claimed_payload(claimed)))
            states.append((run.pk, claimed.state, "", claimed.started_at))
        with inserts_deferred():
            step_inserts()["state"].rows(states)
            followup_sources_carry(run=run, follows=follows)
            if callback_url:
                callback_register(run_id=run.pk, url=callback_url)
            if len(events) != run.event_seq:
                raise RuntimeError(f"a start numbered {run.event_seq} events, not {len(events)}")
            first = first_seqs(root_id=run.pk, count=len(events))
            publish_all(root_id=run.pk, events=events, first_seq=first)
        # Last: the owner's row stays locked until the commit (see working_roots_check).
        working_roots_check(owner=owner, starting=run.pk)
        if claimed is None:
            roots_queued.announce(run.pk)
        else:
            seat.taken(claimed)  # the agent's own row, as the claim returned it
    return run


@cache
def _root_update() -> Update:
    return Update(Run, ["root"])


def _dataset_of(*, owner: AbstractBaseUser, dataset_id: int | None, model: str) -> Dataset | None:
    if dataset_id is not None:
        # Locked until the start commits: a delete of the dataset meanwhile waits, then
        # finds this research (services.datasets.dataset_delete), or goes first, and this
        # start then finds no dataset (a 400, not a foreign key's error at commit).
        dataset = Dataset.objects.select_for_update(no_key=True).filter(owner=owner, pk=dataset_id)
        dataset = dataset.first()
        if dataset is None:
            raise InvalidInput(f"no dataset with id {dataset_id}.", field="dataset")
        return dataset
    if model == DEMO_MODEL:
        # The offline demo model can only quote a knowledge base: give it the owner's starter
        # one, loaded on their first demo run (a second or two, once).
        dataset, _, _ = starter_dataset_load(owner=owner)
        return dataset
    return None
