"""Reads of remote MCP servers: the ones an agent may use."""

from research.models import RemoteServer


def remote_servers_for(*, kind: str, is_root: bool) -> list[RemoteServer]:
    """The enabled servers whose tools an agent of `kind` may use; a research's root agent
    may use every enabled server's."""
    servers = RemoteServer.objects.filter(enabled=True).order_by("name")
    return [server for server in servers if server.admits(kind=kind, is_root=is_root)]


def remote_server_get(*, server_id: int) -> RemoteServer | None:
    """The server if it is still there and enabled (an admin may disable it meanwhile)."""
    return RemoteServer.objects.filter(pk=server_id, enabled=True).first()
