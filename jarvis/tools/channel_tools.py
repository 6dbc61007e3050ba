"""Channel tools: channel_send, channel_list, channel_status (over jarvis.channels).

They get the config by injection (`ChannelSendTool(config=...)`, which the SDK and the CLI
do). channel_send needs a person's approval per call unless the channel sets `confirm = false`.

In a scheduled run (a fence in the call's context, jarvis.tools.fence), each send is recorded
before and confirmed after, keyed by the occurrence and the call's position among the run's
sends to that channel: a retried attempt never sends the same key twice. A channel cannot
de-duplicate, so a send whose process died before confirming it is not sent again: it errs
toward a message lost, never one received twice.
"""

from __future__ import annotations

import json
from typing import Any

from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ErrorType, ToolResult
from jarvis.tools.base import BaseTool
from jarvis.tools.context import ToolContext
from jarvis.tools.spec import ToolSpec

_NAME = {"type": "string", "minLength": 1, "maxLength": 64,
         "description": "The channel's name, as channel_list shows"}


class _ChannelTool(BaseTool):
    needs = ("config",)

    def __init__(self, config: Any = None) -> None:
        if config is None:
            from jarvis.core.config import load_config

            config = load_config()
        self.config = config

    def _names(self) -> str:
        from jarvis.channels.channels import channel_names

        return ", ".join(channel_names(self.config)) or "none configured"


@ToolRegistry.register("channel_send")
class ChannelSendTool(_ChannelTool):
    """Send a message to one of the user's notification channels."""

    tool_id = "channel_send"

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="channel_send",
            description=f"Send a message to one of the user's notification channels (chat, "
                        f"e-mail, push; configured channels: {self._names()}). Needs the user's "
                        f"approval unless the channel allows sending without asking.",
            parameters={
                "type": "object",
                "properties": {
                    "channel": _NAME,
                    "message": {"type": "string", "minLength": 1, "maxLength": 20_000,
                                "description": "The message text"},
                    "title": {"type": "string", "maxLength": 250,
                              "description": "A short title (subject line)"},
                },
                "required": ["channel", "message"],
            },
            category="channels",
            latency_estimate=1.0,
            timeout_seconds=60.0,
            metadata={"confirmation": "per call, unless the channel sets confirm = false"},
            output_labels=frozenset(),
            egress="channel",
        )

    def egress_of(self, arguments: dict[str, Any]) -> list[Any]:
        from jarvis.trust.labels import Egress

        return [Egress.of("channel", str(arguments.get("channel") or ""),
                          payload=[arguments.get("title"), arguments.get("message")])]

    def needs_confirmation(self, arguments: dict[str, Any]) -> bool:
        channels = getattr(self.config, "channels", None) or {}
        channel = channels.get(arguments.get("channel"))
        if channel is None:
            return False  # refused in execute, with the configured names: nothing to approve
        return bool(channel.confirm)

    def execute(self, **params: Any) -> ToolResult:
        return self._send(params, None)

    def invoke(self, arguments: dict[str, Any], context: ToolContext | None = None) -> ToolResult:
        return self._send(arguments, context)

    def _send(self, params: dict[str, Any], context: ToolContext | None) -> ToolResult:
        from jarvis.channels.channels import get_channel, send
        from jarvis.errors import JarvisError

        effect = None
        fence = context.fence if context is not None else None
        if fence is not None:
            try:
                get_channel(self.config, params.get("channel"))  # unknown: refused, no record
            except JarvisError as exc:
                return ToolResult.failure("channel_send", str(exc), ErrorType.INVALID_ARGS)
            effect = fence.begin("channel_send", f"channel {params.get('channel')}")
            if not effect.go:
                sent = effect.prior is not None and effect.prior.status == "sent"
                return ToolResult(tool_name="channel_send", content=effect.describe_prior(),
                                  success=sent, error_type=None if sent else ErrorType.EXECUTION,
                                  metadata={"channel": params.get("channel"),
                                            "idempotency_key": effect.key, "not_sent": True})
        try:
            outcome = send(self.config, params.get("channel"), params.get("message"),
                           params.get("title"))
        except JarvisError as exc:
            if effect is not None:
                effect.finish(False, str(exc))
            return ToolResult.failure("channel_send", str(exc), ErrorType.INVALID_ARGS
                                      if "unknown channel" in str(exc) else ErrorType.EXECUTION)
        if effect is not None:
            effect.finish(outcome.ok, outcome.error or f"sent ({outcome.service})")
        meta = {"channel": outcome.channel, "service": outcome.service,
                "seconds": round(outcome.seconds, 3)}
        if effect is not None:
            meta["idempotency_key"] = effect.key
        if not outcome.ok:
            return ToolResult.failure("channel_send", f"sending to {outcome.channel} failed: "
                                                      f"{outcome.error}", ErrorType.TRANSPORT, **meta)
        return ToolResult(tool_name="channel_send",
                          content=f"sent to {outcome.channel} ({outcome.service})", metadata=meta)


@ToolRegistry.register("channel_list")
class ChannelListTool(_ChannelTool):
    """List the configured notification channels."""

    tool_id = "channel_list"
    inline = True

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="channel_list",
            description="List the user's notification channels: name, service kind and "
                        "whether sending needs approval. Returns JSON.",
            parameters={"type": "object", "properties": {}},
            category="channels",
            latency_estimate=0.001,
            output_labels=frozenset(),
            egress="none",
        )

    def execute(self, **params: Any) -> ToolResult:
        from jarvis.channels.channels import mask_url

        channels = getattr(self.config, "channels", None) or {}
        rows = [{"channel": name, "kind": c.url.split("://", 1)[0].lower(),
                 "confirm": c.confirm, "description": c.description, "url": mask_url(c.url)}
                for name, c in sorted(channels.items())]
        return ToolResult(tool_name="channel_list", content=json.dumps(rows, ensure_ascii=False),
                          metadata={"count": len(rows)})


@ToolRegistry.register("channel_status")
class ChannelStatusTool(_ChannelTool):
    """Whether a channel is configured, valid, and reachable where that can be told."""

    tool_id = "channel_status"

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="channel_status",
            description="Check a notification channel: configured, a valid URL, and reachable "
                        "(where the service can tell without sending). Returns JSON.",
            parameters={"type": "object", "properties": {"channel": _NAME},
                        "required": ["channel"]},
            category="channels",
            latency_estimate=0.5,
            timeout_seconds=15.0,
            output_labels=frozenset(),
            egress="none",  # it checks a configured channel; it sends no message
        )

    def execute(self, **params: Any) -> ToolResult:
        from jarvis.channels.channels import channel_status
        from jarvis.errors import JarvisError

        try:
            row = channel_status(self.config, params.get("channel"))
        except JarvisError as exc:
            return ToolResult.failure("channel_status", str(exc), ErrorType.INVALID_ARGS)
        return ToolResult(tool_name="channel_status", content=json.dumps(row, ensure_ascii=False),
                          metadata=row, success=bool(row.get("valid")),
                          error_type=None if row.get("valid") else ErrorType.EXECUTION)
