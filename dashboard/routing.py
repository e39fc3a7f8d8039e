"""Websocket routes. The live run view arrives with the dashboard issue."""

websocket_urlpatterns: list = []
