"""Channels: look one up in the config, send to it through Apprise, say how it stands.

A channel is `[channels.NAME]` in config.toml:

    [channels.phone]
    url = "ntfy://ntfy.sh/${NTFY_TOPIC}"   # any Apprise URL; ${ENV} comes from the environment
    confirm = true                          # channel_send asks a person first (default)
    retries = 3                             # scheduled deliveries: attempts after the first
    retry_backoff = 2.0                     # seconds before the first retry; doubles

Channel URLs are written by the user, never by a model (a model only picks a channel by
name), so they are not subject to the SSRF policy of the web tools.
"""

from __future__ import annotations

import logging
import re
import socket
import time
from dataclasses import dataclass
from typing import Any

from jarvis.errors import ConfigError, DependencyError, JarvisError

INSTALL = "pip install 'jarvis[channels]'"
MAX_MESSAGE_CHARS = 20_000
MAX_TITLE_CHARS = 250
# Schemes whose URL host is the receiving server itself, so a TCP connect says something.
_SELF_HOSTED = {"json": 80, "jsons": 443, "xml": 80, "xmls": 443, "form": 80, "forms": 443,
                "ntfy": 80, "ntfys": 443, "mailto": 25, "mailtos": 587, "gotify": 80,
                "gotifys": 443, "apprise": 80, "apprises": 443, "mmost": 8065,
                "mmosts": 443}


class ChannelError(JarvisError):
    """Sending to a channel failed or the channel is unusable; the message says why."""


@dataclass(slots=True)
class SendOutcome:
    channel: str
    ok: bool
    service: str = ""
    error: str = ""
    seconds: float = 0.0


def channel_names(config: Any) -> list[str]:
    return sorted(getattr(config, "channels", None) or {})


def get_channel(config: Any, name: Any) -> Any:
    """The [channels.NAME] table, or ChannelError listing the configured names."""
    channels = getattr(config, "channels", None) or {}
    if not isinstance(name, str) or name not in channels:
        listed = ", ".join(sorted(channels)) or "(none: add a [channels.NAME] table with a url)"
        raise ChannelError(f"unknown channel {str(name)[:64]!r}; configured channels: {listed}")
    return channels[name]


def channel_url(name: str, channel: Any) -> str:
    """The channel's Apprise URL with ${ENV} expanded (ConfigError for an unset variable)."""
    from jarvis.core.envvars import expand_env

    return expand_env(channel.url, f"[channels.{name}] url")


def mask_url(url: str) -> str:
    """A channel URL safe to print without apprise: the scheme, the host when the URL names a
    self-hosted server, `${ENV}` references as written, everything else `***`."""
    scheme, sep, rest = str(url).partition("://")
    if not sep:
        return "***"
    if re.fullmatch(r"(\$\{[A-Za-z_][A-Za-z0-9_]*\}|[^@:/?#]*)?([/?].*)?", rest) and "${" in rest:
        return url  # only variable references: nothing secret is written in it
    if scheme.lower() in _SELF_HOSTED:
        netloc = rest.split("/", 1)[0].split("?", 1)[0]
        if scheme.lower() in ("ntfy", "ntfys") and "/" not in rest.split("?", 1)[0]:
            return f"{scheme}://***"  # `ntfy://TOPIC`: no host, and the topic is the secret
        host = netloc.rsplit("@", 1)[-1]
        return f"{scheme}://{'***@' if '@' in netloc else ''}{host}/***"
    return f"{scheme}://***"


def _apprise() -> Any:
    from jarvis._lazy import load_module

    try:
        apprise = load_module("apprise")
    except ImportError:
        raise DependencyError(f"channels need the apprise package, which is not installed: "
                              f"{INSTALL}") from None
    return apprise


def _load(name: str, channel: Any) -> tuple[Any, Any]:
    """(Apprise object, its one plugin) for a channel; ChannelError when the URL is bad."""
    apprise = _apprise()
    try:
        url = channel_url(name, channel)
    except ConfigError as exc:
        raise ChannelError(str(exc)) from None
    instance = apprise.Apprise()
    with apprise.LogCapture(level=logging.WARNING) as log:
        added = instance.add(url)
    if not added or len(instance) != 1:
        detail = _scrub(_last_line(log.getvalue()), url)
        raise ChannelError(f"[channels.{name}] url is not a URL Apprise understands"
                           + (f": {detail}" if detail else "")
                           + " (see https://github.com/caronc/apprise/wiki for the formats)")
    return instance, instance[0]


_LOG_PREFIX = re.compile(r"^\S+ \S+ - [A-Z]+ - ")  # Apprise's "date time - LEVEL - "


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return _LOG_PREFIX.sub("", lines[-1])[:300] if lines else ""


def _scrub(text: str, url: str) -> str:
    """`text` (a plugin's error) without the parts of the channel's URL that mask_url hides:
    Apprise names an ntfy topic or a webhook path in its errors, and those are the secret
    of such services (often from ${ENV})."""
    shown = mask_url(url)
    rest = url.partition("://")[2]
    parts = {p for p in re.split(r"[/:@?&=#,;]+", rest) if len(p) >= 6 and p not in shown}
    for part in sorted(parts, key=len, reverse=True):
        text = text.replace(part, "***")
    return text


def send(config: Any, name: str, message: str, title: str | None = None) -> SendOutcome:
    """Send one message to channel `name` (no retries); raises ChannelError for a channel that
    cannot be used, returns ok=False with the service's error for a failed send."""
    channel = get_channel(config, name)
    if not isinstance(message, str) or not message.strip():
        raise ChannelError("the message is empty")
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS] + "\n[... cut ...]"
    title = (title or channel.title or "")[:MAX_TITLE_CHARS]
    apprise = _apprise()
    instance, plugin = _load(name, channel)
    started = time.monotonic()
    with apprise.LogCapture(level=logging.WARNING) as log:
        try:
            ok = bool(instance.notify(body=message, title=title))
        except Exception as exc:  # a plugin that raises is a failed send, not a crash
            ok = False
            log.write(f"{type(exc).__name__}: {exc}\n")
    took = time.monotonic() - started
    error = "" if ok else (_scrub(_last_line(log.getvalue()), channel_url(name, channel))
                           or f"{plugin.service_name} did not accept the message")
    return SendOutcome(name, ok, str(plugin.service_name), error, took)


def channel_status(config: Any, name: str, *, probe_timeout: float = 3.0) -> dict[str, Any]:
    """Whether channel `name` is configured and usable, and reachable where that can be told
    without sending anything (services whose URL names their own server: a TCP connect)."""
    channel = get_channel(config, name)
    row: dict[str, Any] = {"channel": name, "configured": True, "confirm": channel.confirm,
                           "url": mask_url(channel.url)}
    try:
        _, plugin = _load(name, channel)
    except (ChannelError, DependencyError) as exc:
        row.update(valid=False, reachable=None, detail=str(exc))
        return row
    # Not plugin.url(privacy=True): Apprise masks the passwords and tokens it knows of, but
    # shows an ntfy topic or a webhook path, the very secret of those services (often from
    # ${ENV}), to the model that asked. The URL as written, masked, is what is shown.
    row.update(valid=True, service=str(plugin.service_name))
    scheme = channel_url(name, channel).split("://", 1)[0].lower()
    host = getattr(plugin, "host", None)
    if scheme not in _SELF_HOSTED or not host:
        row.update(reachable=None, detail=f"{plugin.service_name} cannot be checked without "
                                          f"sending a message; try `jarvis channels test {name}`")
        return row
    port = getattr(plugin, "port", None) or _SELF_HOSTED[scheme]
    if scheme.startswith("mailto"):
        host = getattr(plugin, "smtp_host", None) or host
    try:
        with socket.create_connection((host, int(port)), timeout=probe_timeout):
            pass
    except OSError as exc:
        row.update(reachable=False, detail=f"cannot connect to {host}:{port}: {exc}")
    else:
        row.update(reachable=True, detail=f"{host}:{port} accepts connections")
    return row
