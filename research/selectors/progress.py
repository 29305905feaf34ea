"""Progress at a glance: how many agents of a research have ended, and how."""

from dataclasses import dataclass
from decimal import Decimal

from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import Count, Q

from research.models import ACTIVE_STATUSES, Run, Status


@dataclass(frozen=True)
class TreeProgress:
    root_id: int
    status: str
    state: str
    agents: int
    done: int  # agents that ended, done or failed
    failed: int  # of those, the agents that ended without their report (status failed)
    tree_cost_usd: Decimal  # the whole tree's, as the root holds it


def trees_progress(*, owner: AbstractBaseUser, root_ids: list[int]) -> dict[int, TreeProgress]:
    """The progress of the owner's researches among `root_ids` (another's are left out).
    Two queries, however many researches."""
    roots = list(
        Run.objects.filter(owner=owner, pk__in=root_ids, parent__isnull=True).only(
            "pk", "status", "state", "tree_cost_usd"
        )
    )
    counts = {
        row["root_id"]: row
        for row in Run.objects.filter(root_id__in=[root.pk for root in roots])
        .values("root_id")
        .annotate(
            agents=Count("id"),
            done=Count("id", filter=~Q(status__in=ACTIVE_STATUSES)),
            failed=Count("id", filter=Q(status=Status.FAILED)),
        )
        .order_by()
    }
    return {
        root.pk: TreeProgress(
            root_id=root.pk,
            status=root.status,
            state=root.state,
            agents=counts.get(root.pk, {}).get("agents", 1),
            done=counts.get(root.pk, {}).get("done", 0),
            failed=counts.get(root.pk, {}).get("failed", 0),
            tree_cost_usd=root.tree_cost_usd,
        )
        for root in roots
    }


def roots_since(*, owner: AbstractBaseUser, newest: int) -> int:
    """How many researches the owner started after the one numbered `newest`."""
    return Run.objects.filter(owner=owner, parent__isnull=True, pk__gt=newest).count()


def newest_root(*, owner: AbstractBaseUser) -> int:
    """The number of the owner's newest research, 0 before the first."""
    newest = Run.objects.filter(owner=owner, parent__isnull=True).order_by("-pk").first()
    return newest.pk if newest else 0
