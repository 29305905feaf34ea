"""ASGI entry point: HTTP through Django, websockets through Channels, and the agent pool.

`daphne research.asgi:application` serves pages, the API and the live tree; with
RESEARCH_AGENTS_IN_WEB (the embedded default) this process also runs the agents.
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "research.settings")
django.setup(set_prefix=False)  # as django.core.asgi.get_asgi_application does

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402

from frontend.delivery import serve_on_server_loop  # noqa: E402
from frontend.routing import auth_stack, websocket_urlpatterns  # noqa: E402  (needs Django set up)
from research.mcp_server.http import McpEndpoint  # noqa: E402
from research.ops.http import DjangoHttp  # noqa: E402
from research.ops.logs import route_daphne_access_log  # noqa: E402

route_daphne_access_log()

application = serve_on_server_loop(
    ProtocolTypeRouter(
        {
            # Static files by ServeStatic's middleware (research/ops/static.py): no separate
            # web server is needed; a large deployment may put a CDN in front.
            # /mcp: the MCP tools over streamable HTTP (research.mcp_server); the rest: Django,
            # each request in one hop to its sync thread (research/ops/http.py).
            "http": McpEndpoint(DjangoHttp()),
            "websocket": AllowedHostsOriginValidator(auth_stack(URLRouter(websocket_urlpatterns))),
        }
    )
)

from research.ops import callbacks  # noqa: E402

callbacks.start_in_web_process()

if settings.RESEARCH_AGENTS_IN_WEB:
    from agents import hosting  # noqa: E402

    hosting.serve_in_web_process()

from django.urls import get_resolver  # noqa: E402

from research.ops import heap  # noqa: E402

# The URLconf and its views (the API, the pages, their exports) load on the first request
# otherwise: loaded now, they are frozen with the rest of startup.
get_resolver().url_patterns  # noqa: B018
heap.freeze_startup_heap()
