"""Channels with real receivers on loopback: an SMTP server (aiosmtpd) for mailto://, an HTTP
server for json:// and ntfy:// webhooks. Asserts what arrived, not what was called."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from net_support import Reply, SmtpReceiver, serving
from ports import closed_port

from jarvis.channels.channels import ChannelError, channel_status, mask_url, send
from jarvis.core.config import JarvisConfig, load_config
from jarvis.core.types import ToolCall
from jarvis.errors import ConfigError
from jarvis.tools.channel_tools import ChannelListTool, ChannelSendTool, ChannelStatusTool
from jarvis.tools.executor import ToolExecutor


def config_with(**channels):
    return JarvisConfig.model_validate({"channels": channels})


def run(tool, approver=None, **arguments):
    return ToolExecutor([tool], approver=approver).execute(
        ToolCall(id="c", name=tool.spec.name, arguments=arguments))


def test_json_webhook_receives_title_and_message():
    with serving({"/hook": lambda s: Reply(200, "ok")}) as server:
        config = config_with(hook={"url": f"json://{server.hostport}/hook"})
        outcome = send(config, "hook", "The build is green.", "CI")
    assert outcome.ok and outcome.service == "JSON"
    (seen,) = server.seen
    payload = json.loads(seen.body)
    assert (seen.method, seen.path) == ("POST", "/hook")
    assert payload["title"] == "CI" and payload["message"] == "The build is green."


def test_ntfy_receives_the_topic_and_message():
    with serving({"/": lambda s: Reply(200, '{"id": "abc"}', content_type="application/json")}) as server:
        config = config_with(phone={"url": f"ntfy://{server.hostport}/alerts"})
        assert send(config, "phone", "Call Bob at 3", "Reminder").ok
    payload = json.loads(server.seen[0].body)
    assert payload == {"topic": "alerts", "title": "Reminder", "message": "Call Bob at 3"}


def test_mailto_delivers_an_email_to_a_real_smtp_server():
    with SmtpReceiver() as smtp:
        config = config_with(mail={"url": f"mailto://127.0.0.1:{smtp.port}?to=me@example.com"
                                          f"&from=jarvis@example.com"})
        outcome = send(config, "mail", "Your morning summary: all quiet.", "Morning summary")
    assert outcome.ok and outcome.service == "E-Mail"
    (sender, recipients, message), = smtp.messages
    assert sender == "jarvis@example.com" and recipients == ["me@example.com"]
    assert message["Subject"] == "Morning summary"
    parts = [p.get_payload(decode=True).decode() for p in message.walk()
             if p.get_content_type() == "text/plain"]
    assert "Your morning summary: all quiet." in parts[0]


def test_a_models_title_and_message_cannot_add_recipients_or_headers():
    """channel_send's title becomes the Subject line and its message the body: CR/LF in them
    must not start new headers (a Bcc) or end the SMTP data early."""
    with SmtpReceiver() as smtp:
        config = config_with(mail={"url": f"mailto://127.0.0.1:{smtp.port}?to=me@example.com"
                                          f"&from=jarvis@example.com", "confirm": False})
        result = run(ChannelSendTool(config=config), channel="mail",
                     title="Hi\r\nBcc: evil@example.com\r\nX-Injected: 1",
                     message="text\r\n.\r\nMAIL FROM:<evil@example.com>\r\nRCPT TO:<e@x>\r\n")
    assert result.success, result.content
    (sender, recipients, message), = smtp.messages
    assert sender == "jarvis@example.com" and recipients == ["me@example.com"]
    assert message["Bcc"] is None and message["X-Injected"] is None
    assert "evil@example.com" in message["Subject"]  # folded into the one Subject line


def test_secrets_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("HOOK_PATH", "s3cret-path")
    with serving({"/s3cret-path": lambda s: Reply(200, "ok")}) as server:
        config = config_with(hook={"url": f"json://{server.hostport}/${{HOOK_PATH}}"})
        assert send(config, "hook", "hi").ok
    assert server.seen[0].path == "/s3cret-path"
    monkeypatch.delenv("HOOK_PATH")
    with pytest.raises(ChannelError, match=r"\[channels.hook\] url uses \$\{HOOK_PATH\}, but the "
                                           r"environment variable HOOK_PATH is not set"):
        send(config, "hook", "hi")


def test_a_failed_send_is_reported_not_raised():
    config = config_with(hook={"url": f"json://127.0.0.1:{closed_port()}/hook"})
    outcome = send(config, "hook", "hi")
    assert not outcome.ok and outcome.error


def test_unknown_channels_and_bad_urls_are_clear():
    config = config_with(hook={"url": "json://127.0.0.1:9/x"})
    with pytest.raises(ChannelError, match="unknown channel 'nope'; configured channels: hook"):
        send(config, "nope", "hi")
    bad = config_with(broken={"url": "nosuchservice://whatever"})
    with pytest.raises(ChannelError, match=r"\[channels.broken\] url is not a URL Apprise"):
        send(bad, "broken", "hi")
    with pytest.raises(Exception, match="Apprise URL"):
        config_with(x={"url": "not a url"})
    with pytest.raises(Exception, match="channel name"):
        config_with(**{"bad name!": {"url": "json://h/"}})


def test_masking_hides_tokens_but_keeps_env_references():
    assert mask_url("tgram://123456:ABC-secret/987654") == "tgram://***"
    assert mask_url("mailto://user:pa55@smtp.example.com?to=me@x.com") == \
        "mailto://***@smtp.example.com/***"
    assert mask_url("ntfy://ntfy.sh/${NTFY_TOPIC}") == "ntfy://ntfy.sh/${NTFY_TOPIC}"
    assert mask_url("discord://${DISCORD_WEBHOOK}") == "discord://${DISCORD_WEBHOOK}"


def test_config_show_masks_channel_urls(cli_env, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[channels.chat]\nurl = "tgram://123456:ABC-secret/987654"\n'
                      '[tools.web_search]\nbackend = "brave"\napi_key = "BSA-secret"\n')
    proc = subprocess.run([sys.executable, "-m", "jarvis.cli", "config", "show", "--json"],
                          capture_output=True, text=True, timeout=60,
                          env=dict(cli_env, JARVIS_CONFIG=str(config)))
    assert proc.returncode == 0, proc.stderr
    assert "ABC-secret" not in proc.stdout and "BSA-secret" not in proc.stdout
    values = json.loads(proc.stdout)["values"]
    assert values["channels.chat.url"]["value"] == "tgram://***"
    assert values["tools.web_search.api_key"]["value"] == "***"
    assert values["tools.web_search.backend"]["value"] == "brave"


def test_channel_send_needs_approval_unless_the_channel_says_otherwise():
    with serving({"/a": lambda s: Reply(200, "ok"), "/b": lambda s: Reply(200, "ok")}) as server:
        config = config_with(asks={"url": f"json://{server.hostport}/a"},
                             open={"url": f"json://{server.hostport}/b", "confirm": False})
        tool = ChannelSendTool(config=config)
        denied = run(tool, channel="asks", message="hi")
        assert not denied.success and denied.error_type.value == "denied"
        assert server.seen == []
        approved = run(tool, approver=lambda spec, args: True, channel="asks", message="hi")
        unattended = run(tool, channel="open", message="no approval needed", title="T")
        unknown = run(tool, channel="nope", message="hi")
    assert approved.success and approved.content == "sent to asks (JSON)"
    assert unattended.success
    assert [s.path for s in server.seen] == ["/a", "/b"]
    assert json.loads(server.seen[1].body)["message"] == "no approval needed"
    assert not unknown.success and unknown.error_type.value == "invalid_args"
    assert "configured channels: asks, open" in unknown.content


def test_channel_list_and_status():
    with serving({"/": lambda s: Reply(200, "ok")}) as server:
        config = config_with(hook={"url": f"json://{server.hostport}/", "description": "my hook"},
                             dead={"url": f"json://127.0.0.1:{closed_port()}/"},
                             chat={"url": "tgram://123456:ABC-secret/987654", "confirm": False})
        listing = run(ChannelListTool(config=config))
        alive = run(ChannelStatusTool(config=config), channel="hook")
        dead = run(ChannelStatusTool(config=config), channel="dead")
        chat = run(ChannelStatusTool(config=config), channel="chat")
        assert server.seen == []  # status sends nothing
    rows = json.loads(listing.content)
    assert [(r["channel"], r["kind"], r["confirm"]) for r in rows] == [
        ("chat", "tgram", False), ("dead", "json", True), ("hook", "json", True)]
    assert "ABC-secret" not in listing.content
    assert alive.metadata["reachable"] is True and alive.metadata["service"] == "JSON"
    assert dead.metadata["reachable"] is False and "cannot connect" in dead.metadata["detail"]
    assert chat.metadata["valid"] and chat.metadata["reachable"] is None
    assert "ABC-secret" not in chat.content


def test_channels_cli_list_and_test(cli_env, tmp_path):
    with serving({"/hook": lambda s: Reply(200, "ok")}) as server:
        config = tmp_path / "config.toml"
        config.write_text(f'[channels.hook]\nurl = "json://{server.hostport}/hook"\n'
                          f'[channels.dead]\nurl = "json://127.0.0.1:{closed_port()}/x"\n'
                          f'retries = 0\n')
        env = dict(cli_env, JARVIS_CONFIG=str(config))

        def jarvis(*args):
            return subprocess.run([sys.executable, "-m", "jarvis.cli", *args],
                                  capture_output=True, text=True, env=env, timeout=60)

        listing = jarvis("channels", "list")
        as_json = jarvis("channels", "list", "--check", "--json")
        sent = jarvis("channels", "test", "hook")
        failed = jarvis("channels", "test", "dead")
        unknown = jarvis("channels", "test", "nope")
    assert listing.returncode == 0 and listing.stdout.splitlines()[0].startswith("dead")
    assert {r["channel"]: r["reachable"] for r in json.loads(as_json.stdout)} == \
        {"dead": False, "hook": True}
    assert sent.returncode == 0 and sent.stdout.startswith("sent to hook (JSON) in ")
    assert "this channel works" in json.loads(server.seen[0].body)["message"]
    assert failed.returncode == 1 and failed.stderr.startswith("Error: sending to dead (JSON) failed")
    assert unknown.returncode == 2
    assert unknown.stderr == "Error: unknown channel 'nope'; configured channels: dead, hook\n"


def test_channels_in_a_config_file(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('[channels.phone]\nurl = "ntfy://ntfy.sh/${T}"\nconfirm = false\n')
    config = load_config(path)
    assert config.channels["phone"].confirm is False
    path.write_text('[channels.phone]\nurl = "ntfy://x/y"\nconfrim = false\n')
    with pytest.raises(ConfigError, match="channels.phone.confrim: unknown key"):
        load_config(path)


def test_status_for_an_unknown_channel_lists_names():
    with pytest.raises(ChannelError, match="configured channels: \\(none"):
        channel_status(config_with(), "x")


def test_status_and_list_never_show_a_secret_from_the_environment(monkeypatch):
    # Apprise's "privacy" URL masks passwords and tokens it knows about, not an ntfy topic or
    # a webhook path, which are the secret in those services: channel_status showed them.
    monkeypatch.setenv("NTFY_TOPIC", "s3cr3t-topic-77")
    monkeypatch.setenv("HOOK_TOKEN", "hook-token-4242")
    config = config_with(
        topic={"url": "ntfy://127.0.0.1:9/${NTFY_TOPIC}"},
        hook={"url": f"json://127.0.0.1:{closed_port()}/hooks/${{HOOK_TOKEN}}?x=1"},
        literal={"url": "ntfy://my-literal-secret-topic"},  # topic-only form: no host shown
    )
    listing = run(ChannelListTool(config=config))
    assert "my-literal-secret-topic" not in listing.content
    for name in ("topic", "hook", "literal"):
        status = run(ChannelStatusTool(config=config), channel=name)
        shown = status.content + json.dumps(status.metadata)
        assert "s3cr3t-topic-77" not in shown and "hook-token-4242" not in shown, shown
        assert "my-literal-secret-topic" not in shown, shown
        assert status.metadata["valid"] is True
    assert mask_url("ntfys://my-literal-secret-topic?priority=high") == "ntfys://***"
    assert mask_url("ntfy://ntfy.example.com/topic") == "ntfy://ntfy.example.com/***"


def test_a_failed_send_does_not_show_the_secret_parts_of_the_url(monkeypatch):
    # Apprise's ntfy plugin names the topic in its error ("Failed to send ntfy notification to
    # topic '...'"): channel_send returned it to the model.
    monkeypatch.setenv("NTFY_TOPIC", "s3cr3t-topic-77")
    with serving({}) as server:  # every path is a 404
        config = config_with(topic={"url": f"ntfy://{server.hostport}/${{NTFY_TOPIC}}",
                                    "confirm": False},
                             literal={"url": f"ntfy://{server.hostport}/literal-topic-99",
                                      "confirm": False})
        for name, secret in (("topic", "s3cr3t-topic-77"), ("literal", "literal-topic-99")):
            result = run(ChannelSendTool(config=config), channel=name, message="hi")
            assert not result.success and result.error_type.value == "transport"
            assert "404" in result.content and secret not in result.content, result.content
        assert len(server.seen) == 2  # both were really sent


def test_a_url_apprise_cannot_load_is_reported_without_its_secret_parts():
    config = config_with(chat={"url": "slack://secrettoken99/abcdefgh"})
    result = run(ChannelStatusTool(config=config), channel="chat")
    assert result.metadata["valid"] is False and "Slack" in result.metadata["detail"]
    assert "secrettoken99" not in result.content and "abcdefgh" not in result.content
