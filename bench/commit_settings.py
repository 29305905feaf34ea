"""research.settings, plus when each tree's events were pushed after their commit, for
bench/served.py's event latency from commit to socket.

Issue 25's goal measures an event's delay from its commit to a viewer's socket. Each event
carries `at`, stamped as its batch is written (research.events.store.publish_all), before
the batch's last statements and its COMMIT: from `at`, a loaded writer's statements count
too (round thirty-eight of issue 25 took the two apart once, by hand). Here each thread
notes when it sends a COMMIT (Django's DatabaseWrapper._commit), and the push that follows
the commit (research.events.store.broadcast, called by the transaction's on-commit
callbacks, the events of one tree in number order) notes its tree, its first number, how
many events and that moment. The delay counted from it takes in the COMMIT's round trip and
the thread's wait for the GIL after it, which the events wait through too. The benchmark
joins each event a viewer received with the note of its tree and number.

bench/served.py starts daphne (and its runagents workers) with DJANGO_SETTINGS_MODULE=
commit_settings (bench/ on the path) and CANOPY_COMMIT_LOG=<prefix>, unless a profiler's
settings were asked for. On SIGUSR1 a process writes its notes since the last ask to
<prefix>-<its pid>.json. The note costs a push a tuple appended.
"""

import json
import os
import signal
import threading
import time

from django.apps import AppConfig

from research.settings import *  # noqa: F403

_LOG = os.environ.get("CANOPY_COMMIT_LOG")
# (root id, first number, count, its COMMIT's time.time()) of each push. No lock: an
# append is whole under the GIL, from whichever thread commits.
_notes: list[tuple[int, int, int, float]] = []


_committing = threading.local()  # when this thread last sent a COMMIT


def _noting(broadcast):
    def noted(root_id: int, payloads: list[dict]) -> None:
        if payloads:
            began = getattr(_committing, "at", None) or time.time()
            _notes.append((root_id, payloads[0]["seq"], len(payloads), began))
        broadcast(root_id, payloads)

    return noted


def _timed(commit):
    def timed(self) -> None:
        _committing.at = time.time()
        try:
            return commit(self)
        except BaseException:
            _committing.at = None  # rolled back: no callbacks follow
            raise

    return timed


def _forgetting(run_hooks):
    """After a commit's callbacks, its moment is forgotten: a push outside a transaction
    (its callback run at once) is noted when it happens."""

    def forgetting(self) -> None:
        try:
            return run_hooks(self)
        finally:
            _committing.at = None

    return forgetting


class CommitNotes(AppConfig):
    """Last among the apps: its ready() wraps the COMMIT and the push, once the project's
    modules can be imported."""

    name = "commit_settings"
    label = "commit_notes"

    def ready(self) -> None:
        from django.db.backends.base.base import BaseDatabaseWrapper

        import research.events.store as store

        wrapper = BaseDatabaseWrapper
        wrapper._commit = _timed(wrapper._commit)
        wrapper.run_and_clear_commit_hooks = _forgetting(wrapper.run_and_clear_commit_hooks)
        store.broadcast = _noting(store.broadcast)


def _write(signum, frame) -> None:
    """The notes since the last ask, which the benchmark makes after each load (a load's
    events are all pushed by then): each dump stays small, whatever the process has run."""
    notes = _notes[:]
    del _notes[: len(notes)]  # a push noted meanwhile stays for the next ask
    path = f"{_LOG}-{os.getpid()}.json"
    with open(f"{path}.part", "w") as file:
        json.dump(notes, file)
    os.replace(f"{path}.part", path)


if _LOG:
    signal.signal(signal.SIGUSR1, _write)
    INSTALLED_APPS = [*INSTALLED_APPS, "commit_settings.CommitNotes"]  # noqa: F405
