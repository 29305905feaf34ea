"""Websocket routes; research.asgi wraps them in the origin check and the auth middleware."""

from django.urls import path

from frontend.consumers import RunTreeConsumer

websocket_urlpatterns = [
    path("ws/runs/<int:root_id>/", RunTreeConsumer.as_asgi()),
]
