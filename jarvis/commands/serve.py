"""`jarvis serve`: jarvis tools over ORS and jarvis agents over an OpenAI-compatible API."""

from __future__ import annotations

import click

from jarvis.commands._common import load_cli_config


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Anything but loopback needs --api-key.")
@click.option("--port", default=8080, show_default=True, type=int,
              help="Port to listen on (0 picks a free one; the URL is printed on stderr).")
@click.option("--api-key", envvar="JARVIS_API_KEY", default=None,
              help="Require this key on every request but /health (X-API-Key header or "
                   "'Authorization: Bearer KEY'). Env: JARVIS_API_KEY.")
@click.option("--env-name", default="jarvis", show_default=True,
              help="The ORS environment name (routes /ENV/tools, /ENV/call).")
@click.option("--tools", "tool_names", default=None,
              help="Comma-separated tools to expose over ORS (default: [tools] enabled, else all).")
@click.option("-y", "--yes", "approve", is_flag=True,
              help="Run tools that require confirmation (repl, code_interpreter, ...): nobody "
                   "can confirm on a server, so without this flag their calls are denied.")
@click.option("--max-body-bytes", default=1_048_576, show_default=True, type=int,
              help="Largest request body accepted (larger ones get 413).")
@click.option("--session-idle", default=900.0, show_default=True, type=float,
              help="Seconds an ORS session may go without calls or pings before it is ended.")
@click.option("--max-sessions", default=256, show_default=True, type=int,
              help="Most ORS sessions alive at once (more get 429).")
def serve(host: str, port: int, api_key: str | None, env_name: str, tool_names: str | None,
          approve: bool, max_body_bytes: int, session_idle: float, max_sessions: int) -> None:
    """Serve jarvis over HTTP: ORS tool endpoints and an OpenAI-compatible chat API.

    \b
    ORS:    GET /ENV/tools, POST /create_session, /create, /ping, /delete, POST /ENV/call
    OpenAI: GET /v1/models (jarvis agents), POST /v1/chat/completions (stream or not)
    Health: GET /health

    \b
    Example:
      jarvis serve --tools think,calculator,repl --yes
      curl -s localhost:8080/jarvis/tools
    """
    from jarvis.server import ServeSettings, bind, build_app, serve_forever, url_of

    names = [n.strip() for n in tool_names.split(",") if n.strip()] if tool_names else None
    settings = ServeSettings(host=host, port=port, api_key=api_key or None, env_name=env_name,
                             tools=names, approve=approve, max_body_bytes=max_body_bytes,
                             session_idle_seconds=session_idle, max_sessions=max_sessions)
    settings.check()  # before loading anything: refuse unsafe settings first
    config = load_cli_config()
    app = build_app(settings, config=config)
    sock = bind(host, port)
    url = url_of(sock)
    tools = ", ".join(app.state.ors.tools) or "(none)"
    click.echo(f"jarvis serve: listening on {url}", err=True)
    click.echo(f"  ORS environment {env_name!r}: {url}/{env_name}/tools  tools: {tools}", err=True)
    click.echo(f"  OpenAI-compatible API: {url}/v1 (models are jarvis agents)", err=True)
    if api_key:
        click.echo("  API key required (X-API-Key or Authorization: Bearer)", err=True)
    serve_forever(app, sock)
