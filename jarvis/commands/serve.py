"""`jarvis serve`: jarvis tools over ORS and jarvis agents over an OpenAI-compatible API."""

from __future__ import annotations

import click

from jarvis.commands._common import load_cli_config


@click.command()
@click.option("--host", default=None,
              help="Address to listen on (default: [serve] host, 127.0.0.1). Anything but "
                   "loopback needs --api-key; without a key only loopback Host headers, "
                   "same-origin browsers and JSON POSTs are answered.")
@click.option("--port", default=None, type=int,
              help="Port to listen on (default: [serve] port, 8765; 0 picks a free one). The URL "
                   "is printed on stderr.")
@click.option("--api-key", envvar="JARVIS_API_KEY", default=None,
              help="Require this key on every request but /health (X-API-Key header or "
                   "'Authorization: Bearer KEY'). Env: JARVIS_API_KEY.")
@click.option("--env-name", default=None,
              help="The ORS environment name, routes /ENV/tools and /ENV/call (default: "
                   "[serve] env_name, jarvis).")
@click.option("--tools", "tool_names", default=None,
              help="Comma-separated tools to expose over ORS (default: [serve] tools, else "
                   "[tools] enabled, else all).")
@click.option("-y", "--yes", "approve", is_flag=True, default=None,
              help="Run tools that require confirmation (repl, code_interpreter, ...): nobody "
                   "can confirm on a server, so without this flag (or [serve] approve = true) "
                   "their calls are denied.")
@click.option("--max-body-bytes", default=None, type=int,
              help="Largest request body accepted; larger ones get 413 (default 1048576).")
@click.option("--session-idle", default=None, type=float,
              help="Seconds an ORS session may go without calls or pings before it is ended "
                   "(default 900).")
@click.option("--max-sessions", default=None, type=int,
              help="Most ORS sessions alive at once; more get 429 (default 256).")
@click.option("--print-token", is_flag=True,
              help="Print the owner token (made if there is none yet) and exit. Without an "
                   "API key the server answers only requests that carry it, so other users "
                   "of this machine cannot use your tools.")
def serve(host: str | None, port: int | None, api_key: str | None, env_name: str | None,
          tool_names: str | None, approve: bool | None, max_body_bytes: int | None,
          session_idle: float | None, max_sessions: int | None, print_token: bool) -> None:
    """Serve jarvis over HTTP: ORS tool endpoints and an OpenAI-compatible chat API.

    \b
    ORS:    GET /ENV/tools, POST /create_session, /create, /ping, /delete, POST /ENV/call
    OpenAI: GET /v1/models (jarvis agents), POST /v1/chat/completions (stream or not)
    Health: GET /health

    Without --api-key the server answers only its owner: every request but /health carries
    the token kept in $JARVIS_HOME/serve.token (0600), e.g. 'Authorization: Bearer TOKEN'.

    \b
    Example:
      jarvis serve --tools think,calculator,repl --yes
      curl -s -H "Authorization: Bearer $(jarvis serve --print-token)" localhost:8765/jarvis/tools
    """
    if print_token:
        from jarvis.security.owner_token import owner_token

        click.echo(owner_token(create=True))
        return
    from jarvis.server import ServeSettings, bind, build_app, serve_forever, url_of

    config = load_cli_config()
    sc = config.serve
    names = [n.strip() for n in tool_names.split(",") if n.strip()] if tool_names else sc.tools

    def pick(flag: object, configured: object) -> object:
        return configured if flag is None else flag

    settings = ServeSettings(
        host=pick(host, sc.host), port=pick(port, sc.port), api_key=api_key or None,
        env_name=pick(env_name, sc.env_name), tools=names, approve=bool(pick(approve, sc.approve)),
        max_body_bytes=pick(max_body_bytes, sc.max_body_bytes),
        session_idle_seconds=pick(session_idle, sc.session_idle_seconds),
        max_sessions=pick(max_sessions, sc.max_sessions), allowed_origins=sc.allowed_origins,
        header_timeout=sc.header_timeout, body_timeout=sc.body_timeout,
        max_connections=sc.max_connections, send_timeout=sc.send_timeout, access_log=True)
    settings.check()  # before building anything: refuse unsafe settings first
    app = build_app(settings, config=config)
    sock = bind(settings.host, settings.port, listen=False)
    url = url_of(sock)
    tools = ", ".join(app.state.ors.tools) or "(none)"

    def announce() -> None:
        click.echo(f"jarvis serve: listening on {url}", err=True)
        env_name = settings.env_name
        click.echo(f"  ORS environment {env_name!r}: {url}/{env_name}/tools  tools: {tools}",
                   err=True)
        click.echo(f"  OpenAI-compatible API: {url}/v1 (models are jarvis agents)", err=True)
        for name, reason in app.state.ors.unavailable.items():
            click.echo(f"  not serving {name}: {reason}", err=True)
        if api_key:
            click.echo("  API key required (X-API-Key or Authorization: Bearer)", err=True)
        else:
            click.echo("  only you: requests carry your token, Authorization: Bearer "
                       "$(jarvis serve --print-token)", err=True)

    serve_forever(app, sock, announce=announce)
