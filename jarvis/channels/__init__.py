"""Notification channels: named Apprise URLs (`[channels.NAME] url = "..."`) that the channel
tools and the scheduler's result delivery send to. Apprise is imported only when sending."""

from jarvis.channels.channels import (
    ChannelError,
    SendOutcome,
    channel_names,
    channel_status,
    get_channel,
    mask_url,
    send,
)

__all__ = ["ChannelError", "SendOutcome", "channel_names", "channel_status", "get_channel",
           "mask_url", "send"]
