"""`jarvis config`: show the effective configuration and where each value came from."""

from __future__ import annotations

import json
import re
from typing import Any

import click

from jarvis.commands._common import Group, echo_json


def _flatten(data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            rows.extend(_flatten(value, dotted + "."))
        else:
            rows.append((dotted, value))
    return rows


def _masked(dotted: str, value: Any) -> Any:
    """The value as `config show` prints it: secrets hidden by name (any key: MCP env and
    headers, tool settings...), passwords and tokens in URLs, secret options in MCP args;
    channel URLs (tokens in their path) masked as a whole."""
    parts = dotted.split(".")
    if len(parts) == 3 and parts[0] == "channels" and parts[2] == "url" and value:
        from jarvis.channels.channels import mask_url  # channel URLs carry tokens and passwords

        return mask_url(value)
    from jarvis.security.redact import redact_value

    return redact_value(dotted.rsplit(".", 1)[-1], value)


def config_rows(config: Any) -> list[dict[str, Any]]:
    """Every effective value as {key, value, source}, source being "default", the config
    file's path, or the environment variable that set it."""
    rows = []
    for dotted, value in _flatten(config.model_dump()):
        rows.append({"key": dotted, "value": _masked(dotted, value),
                     "source": config.source_of(dotted)})
    return rows


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(name: str) -> str:
    return name if _BARE_KEY.match(name) else json.dumps(name, ensure_ascii=False)


def toml_text(rows: list[dict[str, Any]]) -> str:
    """The rows as a valid TOML document: each table once, its values before its subtables,
    an unset value as a comment (`# max_tokens = ... (not set)`), each value's source as a
    comment. Strings, numbers, booleans, lists and empty tables are TOML as JSON writes them
    (a JSON string is a TOML basic string)."""
    tree: dict[str, Any] = {}
    for row in rows:
        *tables, key = row["key"].split(".")
        node = tree
        for name in tables:
            node = node.setdefault(name, {})
        node[key] = row

    lines: list[str] = []

    def emit(node: dict[str, Any], path: list[str]) -> None:
        leaves = [(k, v) for k, v in node.items() if "key" in v and "source" in v]
        tables = [(k, v) for k, v in node.items() if not ("key" in v and "source" in v)]
        if path and (leaves or not tables):
            lines.append("")
            lines.append("[" + ".".join(_key(p) for p in path) + "]")
        for name, row in leaves:
            if row["value"] is None:
                lines.append(f"# {_key(name)} =  (not set)  # {row['source']}")
            else:
                lines.append(f"{_key(name)} = {json.dumps(row['value'], ensure_ascii=False)}"
                             f"  # {row['source']}")
        for name, sub in tables:
            emit(sub, [*path, name])

    emit(tree, [])
    return "\n".join(lines)


@click.group(cls=Group)
def config() -> None:
    """Show the effective configuration and where it comes from."""


@config.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print the values as JSON.")
def show(as_json: bool) -> None:
    """Print every setting, its effective value and where it came from: "default", the
    config file, or the environment variable that overrides it.

    Secrets are shown as ***: values whose name says key, token, secret, password, pass,
    passphrase, pat, auth, credential, cookie or session (MCP env and headers included),
    passwords and tokens inside URLs (user:***@host, ?api_key=***), keys in URL paths and
    token-looking query values (https://actions.zapier.com/mcp/***/sse), webhook URL paths
    (https://hooks.slack.com/***), secret options in MCP args (--token ***,
    --api-key=***), and channel URLs.
    """
    from jarvis.commands._common import load_cli_config

    cfg = load_cli_config()
    rows = config_rows(cfg)
    if as_json:
        echo_json({"config_file": str(cfg.source) if cfg.source else None,
                   "values": {r["key"]: {"value": r["value"], "source": r["source"]}
                              for r in rows}})
        return
    click.echo(f"# config file: {cfg.source or '(none: defaults and environment only)'}")
    click.echo(toml_text(rows))


@config.command("path")
def path() -> None:
    """Print the config file jarvis uses (exit 1 if none is found)."""
    from jarvis.core.config import find_config

    found = find_config()
    if found is None:
        click.echo("no config file found (looked for --config/$JARVIS_CONFIG, ./config.toml, a "
                   "workspace's config.toml in the folders above, $JARVIS_HOME/config.toml); run "
                   "`jarvis init` to create one", err=True)
        raise SystemExit(1)
    click.echo(str(found.resolve()))
