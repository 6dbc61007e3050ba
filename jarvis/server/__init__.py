"""`jarvis serve`: jarvis tools as an ORS environment and jarvis agents as an OpenAI-compatible
chat API, in one starlette app served by uvicorn; and `jarvis mcp serve` (`mcp_serve`), jarvis
tools over MCP behind the same guard and limits.

    from jarvis.server import ServeSettings, ServerThread, build_app

    with ServerThread(build_app(ServeSettings(tools=["think"]))) as server:
        ...  # server.url, and server.headers carry the owner token every request needs

See docs/serve.md for the endpoints. Names are imported on first use, so serving over MCP
does not load the HTTP app.
"""

from __future__ import annotations

from jarvis._lazy import lazy_getattr

_LAZY = {
    "ServeSettings": "jarvis.server.app",
    "build_app": "jarvis.server.app",
    "is_loopback": "jarvis.server.app",
    "owner_token": "jarvis.security.owner_token",
    "ServerThread": "jarvis.server.runner",
    "bind": "jarvis.server.runner",
    "serve_forever": "jarvis.server.runner",
    "url_of": "jarvis.server.runner",
}

__getattr__ = lazy_getattr("jarvis.server", _LAZY, globals())

__all__ = ["ServeSettings", "ServerThread", "bind", "build_app", "is_loopback", "owner_token",
           "serve_forever", "url_of"]
