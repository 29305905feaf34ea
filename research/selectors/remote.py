"""Reads of remote MCP servers: the ones an agent may use."""

from functools import cache

from django.db import connection

from research.models import RemoteServer
from research.sql import whole


def remote_servers_for(*, kind: str, is_root: bool) -> list[RemoteServer]:
    """The enabled servers whose tools an agent of `kind` may use; a research's root agent
    may use every enabled server's. Every agent reads them as it starts (mostly none): the
    statement is built once."""
    with connection.cursor() as cursor:
        cursor.execute(_enabled_sql(), [True])
        servers = [whole(RemoteServer).instance(row) for row in cursor.fetchall()]
    return [server for server in servers if server.admits(kind=kind, is_root=is_root)]


@cache
def _enabled_sql() -> str:
    table = RemoteServer._meta.db_table
    return f"SELECT {whole(RemoteServer).columns} FROM {table} WHERE enabled = %s ORDER BY name"


def remote_server_get(*, server_id: int) -> RemoteServer | None:
    """The server if it is still there and enabled (an admin may disable it meanwhile)."""
    return RemoteServer.objects.filter(pk=server_id, enabled=True).first()
