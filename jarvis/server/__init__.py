"""`jarvis serve`: jarvis tools as an ORS environment and jarvis agents as an OpenAI-compatible
chat API, in one starlette app served by uvicorn.

    from jarvis.server import ServeSettings, ServerThread, build_app

    with ServerThread(build_app(ServeSettings(tools=["think"]))) as server:
        ...  # server.url, and server.headers carry the owner token every request needs

See docs/serve.md for the endpoints.
"""

from __future__ import annotations

from jarvis.server.app import ServeSettings, build_app, is_loopback
from jarvis.server.owner import owner_token
from jarvis.server.runner import ServerThread, bind, serve_forever, url_of

__all__ = ["ServeSettings", "ServerThread", "bind", "build_app", "is_loopback", "owner_token",
           "serve_forever", "url_of"]
