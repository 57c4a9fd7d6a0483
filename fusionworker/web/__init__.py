"""The web dashboard and JSON admin API (``fusionworker web``; extra ``[web]``).

``create_app(settings)`` builds the Starlette application; see ``app.py`` for the
routes (the endpoints are in ``api.py``, ``views.py``, ``pages.py`` and
``live.py``), ``auth.py`` for authentication and CSRF, ``service.py`` for what
each route reads and does.
"""

from __future__ import annotations

from .app import create_app

__all__ = ["create_app"]
