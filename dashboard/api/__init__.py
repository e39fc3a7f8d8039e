"""The JSON API (django-ninja), mounted at /api/: schema at /api/openapi.json, docs at /api/docs."""

from .main import api

__all__ = ["api"]
