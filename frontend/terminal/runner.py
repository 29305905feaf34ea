"""Who runs a tree that `start --wait` started: an agent process, or this command itself.

With RESEARCH_AGENTS_IN_WEB (the embedded default) the agents live in the web process; when
no agent process is up, the command runs the tree in a pool of its own, so `start --wait`
works on a machine where nothing else runs. A pool of its own claims only this one root.
"""

import time

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser

from agents.hosting import LocalAgents
from research import endings, selectors
from research.models import Run, Status

LOCAL_STOPPED = endings.COMMAND_STOPPED


class TreeRunner:
    def __init__(self, run: Run, *, owner: AbstractBaseUser):
        self.run = run
        self.owner = owner
        self.agents = LocalAgents(reason=LOCAL_STOPPED)
        self.may_run_here = settings.RESEARCH_AGENTS_IN_WEB
        self.started = time.monotonic()
        # Another process may heartbeat without claiming roots (a `start --wait` like this
        # one): past this grace an unclaimed root is taken here after all.
        self.grace = max(2.0, 2 * settings.RESEARCH_CLAIM_POLL_SECONDS)
        self.waiting_noted = False
        self.claimed = False  # by some process: nothing left to check

    @property
    def local(self) -> bool:
        """Whether the tree's agents run in this process (and so die with it)."""
        return self.agents.pool is not None

    def begin(self) -> str | None:
        """Run the tree here when no agent process is up; returns a note for the user."""
        if self.may_run_here and not selectors.agent_process_alive():
            return self.run_here()
        return None

    def check(self) -> str | None:
        """Called while the watch is idle: take the root here if nobody claimed it in time."""
        if self.local or self.claimed or time.monotonic() - self.started < self.grace:
            return None
        run = selectors.run_get(owner=self.owner, run_id=self.run.pk)
        if run.status != Status.QUEUED or run.worker_id is not None:
            self.claimed = True
            return None
        if self.may_run_here:
            return self.run_here(note=f"no agent process took research {run.pk}: ")
        if not self.waiting_noted:
            self.waiting_noted = True
            return f"research {run.pk} waits for an agent worker (manage.py runagents)."
        return None

    def run_here(self, *, note: str = "") -> str | None:
        if not self.agents.take(self.run.pk):
            self.agents.shutdown()  # another process took it meanwhile: nothing to run here
            self.agents = LocalAgents(reason=LOCAL_STOPPED)
            return None
        return f"{note}running its agents in this process (they stop if it is interrupted)."

    def shutdown(self, *, reason: str = LOCAL_STOPPED) -> None:
        self.agents.shutdown(reason=reason)
