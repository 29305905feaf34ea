"""Whose researches the command works on: --user, else $CANOPY_USER, else a sole account."""

import os

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.management.base import CommandError


def user_help(user: str) -> str:
    """--user's help: `user` says what the user is for, in the command's terms."""
    return (
        f"{user} (a username). Default: $CANOPY_USER, else the only user of the database, "
        "else the only superuser."
    )


USER_HELP = user_help("the user whose researches to work on")


def resolve_user(
    username: str | None, *, which: str = "whose researches to work on"
) -> AbstractBaseUser:
    """The named user, or the default one; a clear error when there is none or no single one.

    Guessing among several accounts would act on someone else's researches, so the fallback
    only takes an account when there is exactly one candidate. `which` says what --user
    decides, in the command's terms, for the refusal that asks for it.
    """
    User = get_user_model()
    username = username or os.environ.get("CANOPY_USER", "")
    if username:
        user = User.objects.filter(**{User.USERNAME_FIELD: username}).first()
        if user is None:
            raise CommandError(f"no user named {username!r}.")
        return user
    users = list(User.objects.order_by("pk")[:2])
    if len(users) == 1:
        return users[0]
    superusers = list(User.objects.filter(is_superuser=True).order_by("pk")[:2])
    if len(superusers) == 1:
        return superusers[0]
    if not users:
        raise CommandError("the database has no user: create one (manage.py first_user).")
    raise CommandError(f"several users exist: pass --user or set CANOPY_USER to say {which}.")
