"""Websocket routes (glassbox/asgi.py wraps them in origin validation and authentication)."""

from django.urls import path

from .consumers import RunConsumer

websocket_urlpatterns = [
    path("ws/runs/<int:run_id>/", RunConsumer.as_asgi()),
]
