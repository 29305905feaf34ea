"""Who a request is: its API token, its session. Each looked up by a statement built once.

Every API request reads its token and its user, and every page and viewer's socket its
session: DRF's and Django's lookups build their query through the ORM each time, which for
the token (`select_related("user")`) was about a third of an API read's CPU (issue 25, round
thirty-seven). These are the same lookups, with the same answers and errors, from
statements built once (research.sql.Instances).

- `TokenAuthentication`: DRF's, in REST_FRAMEWORK's authentication classes.
- `SessionStore`: Django's database sessions (the same table and rows), SESSION_ENGINE.
"""

from functools import cache

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.contrib.sessions.backends import db as db_sessions
from django.contrib.sessions.models import Session
from django.db import connection
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from rest_framework import authentication, exceptions
from rest_framework.authtoken.models import Token

from research.sql import Instances, one


class TokenAuthentication(authentication.TokenAuthentication):
    def authenticate_credentials(self, key: str):
        token = _token_with_user(key)
        if token is None:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        return token.user, token


class SessionStore(db_sessions.SessionStore):
    def _get_session_from_db(self) -> Session | None:
        # The session, unless it has expired: None (and no key) otherwise, as Django's.
        sessions, sql = _session_query()
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        session = sessions.first(sql, [self.session_key, now])
        if session is None:
            self._session_key = None
        return session

    async def _aget_session_from_db(self) -> Session | None:
        return await sync_to_async(self._get_session_from_db)()


def _token_with_user(key: str) -> Token | None:
    users, tokens, sql = _token_query()
    row = one(sql, [key])
    if row is None:
        return None
    count = len(users.fields)
    token = tokens.instance(row[count:])
    token.user = users.instance(row[:count])
    return token


@cache
def _token_query() -> tuple[Instances, Instances, str]:
    user_model = get_user_model()
    users, tokens = Instances(user_model, alias="u"), Instances(Token, alias="t")
    quote = connection.ops.quote_name
    user_table, token_table = quote(user_model._meta.db_table), quote(Token._meta.db_table)
    user_pk, token_user = quote(user_model._meta.pk.column), quote(Token.user.field.column)
    sql = (
        f"SELECT {users.columns}, {tokens.columns} FROM {token_table} t "
        f"INNER JOIN {user_table} u ON u.{user_pk} = t.{token_user} "
        f"WHERE t.{quote(Token._meta.pk.column)} = %s"
    )
    return users, tokens, sql


@cache
def _session_query() -> tuple[Instances, str]:
    sessions = Instances(Session)
    quote = connection.ops.quote_name
    key, expires = (
        quote(Session._meta.get_field(name).column) for name in ("session_key", "expire_date")
    )
    sql = (
        f"SELECT {sessions.columns} FROM {quote(Session._meta.db_table)} "
        f"WHERE {key} = %s AND {expires} > %s"
    )
    return sessions, sql
