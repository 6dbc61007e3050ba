"""An MCP tool's image reaching the model: as an `image_url` part for a model that takes images,
as a placeholder for one that does not. Real parts end to end: the features MCP server
(official SDK) over stdio, the agents, OpenAICompatEngine on both transports, and the
loopback OpenAI-compatible server recording every request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp_support import features_server, write_config

from jarvis.engine.openai_compat import OpenAICompatEngine
from jarvis.sdk import Jarvis
from jarvis.testing import FakeOpenAIServer, reply, tool_call

PLACEHOLDER = "[image: image/png, 4 KB]"
SCRIPT = [reply(tool_calls=[tool_call("fs__read_media_file", {"path": "cat.png"})]),
          reply("It is a picture.")]


def ask(tmp_path: Path, model: str, client: str, agent: str = "orchestrator",
        script=SCRIPT, **engine_options):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = write_config(tmp_path, {"fs": features_server()})
    with FakeOpenAIServer(list(script), models=[model]) as server:
        engine = OpenAICompatEngine("vllm", server.url, model=model, client=client,
                                    max_retries=0, **engine_options)
        with Jarvis(config_path=path, engine=engine) as j:
            result = j.ask_full("What is in cat.png?", agent=agent, tools=["fs__read_media_file"],
                                approved_tools=["fs__read_media_file"])
        engine.close()
        return result, server.requests


def image_parts(request: dict) -> list[dict]:
    return [part for message in request["messages"] if isinstance(message["content"], list)
            for part in message["content"] if part.get("type") == "image_url"]


@pytest.mark.parametrize("client", ["http", "openai"])
def test_vision_model_gets_the_image_as_an_image_url_part(tmp_path: Path, client: str) -> None:
    result, requests = ask(tmp_path, "llava-1.6-test", client)
    assert result["content"] == "It is a picture."
    second = requests[1]["messages"]
    tool_message = next(m for m in second if m["role"] == "tool")
    assert tool_message["content"] == PLACEHOLDER  # never base64 in the tool's text
    (part,) = image_parts(requests[1])
    url = part["image_url"]["url"]
    assert url.startswith("data:image/png;base64,iVBORw0KGgo") and len(url) > 5000
    carrier = second[-1]
    assert carrier["role"] == "user" and second.index(carrier) > second.index(tool_message)
    assert carrier["content"][0] == {
        "type": "text", "text": f"The image returned by tool fs__read_media_file "
                                f"(call {tool_message['tool_call_id']}):"}


@pytest.mark.parametrize("client", ["http", "openai"])
def test_text_only_model_gets_a_placeholder(tmp_path: Path, client: str) -> None:
    result, requests = ask(tmp_path, "qwen3:8b", client)
    assert result["content"] == "It is a picture."
    assert image_parts(requests[1]) == []
    body = json.dumps(requests[1]["messages"])
    assert "base64" not in body and "iVBORw0KGgo" not in body and len(body) < 2000
    texts = [m["content"] for m in requests[1]["messages"]]
    assert PLACEHOLDER in texts  # the tool message
    assert any(isinstance(t, str) and t.endswith(PLACEHOLDER) and "fs__read_media_file" in t
               for t in texts)  # the image message, as text


def test_vision_setting_and_per_model_override(tmp_path: Path) -> None:
    _, requests = ask(tmp_path / "a", "qwen3:8b", "http", vision_models={"qwen3:*": True})
    assert len(image_parts(requests[1])) == 1
    _, requests = ask(tmp_path / "b", "llava-1.6-test", "http", vision=False)
    assert image_parts(requests[1]) == []
    _, requests = ask(tmp_path / "c", "my-own-model", "http", vision=True)
    assert len(image_parts(requests[1])) == 1


def test_react_agent_reads_the_placeholder(tmp_path: Path) -> None:
    script = [reply('Thought: look at it\nAction: fs__read_media_file\n'
                    'Action Input: {"path": "cat.png"}'),
              reply("Thought: done\nFinal Answer: a picture")]
    result, requests = ask(tmp_path, "llava-1.6-test", "http", agent="react", script=script)
    assert result["content"] == "a picture"
    observation = requests[1]["messages"][-1]["content"]
    assert observation == f"Observation: {PLACEHOLDER}"
    assert "iVBORw0KGgo" not in json.dumps(requests[1]["messages"])


def test_engine_config_vision_keys(tmp_path: Path) -> None:
    from jarvis.core.config import load_config
    from jarvis.engine.discovery import get_engine
    from jarvis.errors import ConfigError

    (tmp_path / "config.toml").write_text(
        '[engine]\ndefault = "vllm"\nmodel = "m"\nvision = false\n'
        '[engine.vision_models]\n"m-vl*" = true\n', encoding="utf-8")
    engine = get_engine(load_config(tmp_path / "config.toml"))
    assert not engine.accepts_images("m") and engine.accepts_images("m-vl-7b")
    assert not engine.accepts_images("gpt-4o")  # vision = false wins over the name guess
    (tmp_path / "config.toml").write_text('[engine]\nvision = "sometimes"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="vision"):
        load_config(tmp_path / "config.toml")
