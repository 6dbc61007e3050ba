"""`jarvis models`: the models the engine offers."""

from __future__ import annotations

import click

from jarvis.commands._common import echo_json


@click.command()
@click.option("-e", "--engine", help="ollama, vllm, llamacpp, lmstudio, sglang or openai "
              "(default: JARVIS_ENGINE, config, or the first local engine that answers).")
@click.option("--host", help="The engine's address (overrides OLLAMA_HOST etc. and config).")
@click.option("--json", "as_json", is_flag=True, help="Print {engine, models} as JSON.")
@click.pass_context
def models(ctx: click.Context, engine: str | None, host: str | None, as_json: bool) -> None:
    """List the models the engine offers, one per line, in the engine's order."""
    from jarvis.sdk import Jarvis

    config_path = (ctx.obj or {}).get("config_path")
    with Jarvis(config_path=config_path, engine=engine, host=host, default_client="http") as j:
        names = j.list_models()
        engine_id = getattr(j.engine, "engine_id", type(j.engine).__name__)
    if as_json:
        echo_json({"engine": engine_id, "models": names})
        return
    if not names:
        click.echo(f"{engine_id} offers no models", err=True)
    for name in names:
        click.echo(name)
