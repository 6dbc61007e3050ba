"""Records: ToolCall, ToolCallAction, ToolResult (and its ORS ToolOutput form), Message."""

from __future__ import annotations

import base64
import json

import pytest
from ors import ToolOutput

from jarvis.core.types import (
    AgentResult,
    ErrorType,
    ImageBlock,
    Message,
    TextBlock,
    ToolCall,
    ToolCallAction,
    ToolResult,
    block_from_dict,
)

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n fake image bytes").decode()


def test_tool_result_defaults_match_the_reference_table():
    result = ToolResult(tool_name="calculator", content="4")
    assert result.success is True
    assert result.usage == {} and result.metadata == {}
    assert result.cost_usd == 0.0 and result.latency_seconds == 0.0
    # and the ORS extras
    assert result.blocks == [] and result.finished is False and result.reward is None
    assert result.error_type is None


def test_mutable_defaults_are_not_shared():
    a, b = ToolResult("a", ""), ToolResult("b", "")
    a.metadata["x"] = 1
    a.usage["tokens"] = 3
    assert b.metadata == {} and b.usage == {}


def test_failure_sets_error_type_and_metadata():
    result = ToolResult.failure("file_read", "nope", "denied", path="/x")
    assert result.success is False
    assert result.error_type is ErrorType.DENIED
    assert result.content == "nope"
    assert result.metadata == {"path": "/x"}


def test_failure_rejects_unknown_error_types():
    with pytest.raises(ValueError):
        ToolResult.failure("t", "x", "not-a-kind")


def test_error_types_cover_the_contract():
    assert {e.value for e in ErrorType} >= {"invalid_args", "tool_not_found", "timeout",
                                             "execution", "denied", "transport"}
    assert ErrorType("timeout") == "timeout"


def test_text_only_result_is_a_valid_ors_tool_output():
    out = ToolResult(tool_name="calculator", content="Correct! The answer is 4.", reward=1.0,
                     finished=True).to_tool_output()
    assert out == {"blocks": [{"text": "Correct! The answer is 4.", "detail": None, "type": "text"}],
                   "metadata": None, "reward": 1.0, "finished": True}
    ToolOutput.model_validate(out)  # the ORS SDK's own model accepts it


def test_text_and_image_blocks_convert_to_ors():
    result = ToolResult(tool_name="screenshot", content="the screen",
                        blocks=[TextBlock("the screen"), ImageBlock(data=PNG, mimeType="image/png")],
                        metadata={"width": 10})
    out = result.to_tool_output()
    assert out["blocks"] == [
        {"text": "the screen", "detail": None, "type": "text"},
        {"data": PNG, "mimeType": "image/png", "detail": None, "type": "image"},
    ]
    assert out["metadata"] == {"width": 10}
    parsed = ToolOutput.model_validate(out)
    assert parsed.blocks[1].data == PNG
    json.dumps(out)  # JSON-ready


def test_failed_result_carries_error_type_in_ors_metadata():
    out = ToolResult.failure("t", "Error: File not found", ErrorType.EXECUTION).to_tool_output()
    assert out["metadata"] == {"error_type": "execution"}
    assert out["blocks"][0]["text"] == "Error: File not found"
    ToolOutput.model_validate(out)


def test_block_from_dict_round_trips():
    for block in (TextBlock("hi"), ImageBlock(data=PNG, mimeType="image/jpeg")):
        assert block_from_dict(block.to_dict()) == block


def test_tool_call_arguments_may_be_string_or_dict():
    as_str = ToolCall(id="c1", name="calculator", arguments='{"expression": "2+2"}')
    as_dict = ToolCall(id="c1", name="calculator", arguments={"expression": "2+2"})
    assert as_str.to_openai() == as_dict.to_openai() == {
        "id": "c1", "type": "function",
        "function": {"name": "calculator", "arguments": '{"expression": "2+2"}'},
    }
    assert ToolCall(id="c2", name="think").arguments == "{}"


def test_tool_call_action_is_the_openenv_shape():
    action = ToolCallAction(tool_name="calculator", parameters={"expression": "1+1"},
                            tool_call_id="abc")
    assert (action.tool_name, action.parameters, action.tool_call_id) == (
        "calculator", {"expression": "1+1"}, "abc")
    assert ToolCallAction(tool_name="think").parameters == {}


def test_to_dict_is_json_ready_summary():
    result = ToolResult.failure("t", "boom", ErrorType.TIMEOUT)
    result.call_id = "c9"
    data = result.to_dict()
    assert data["error_type"] == "timeout" and data["call_id"] == "c9"
    assert set(data) >= {"tool_name", "content", "success", "latency_seconds", "cost_usd"}
    assert "blocks" not in data and "reward" not in data
    json.dumps(data)


def test_to_dict_keeps_images_reward_and_finished():
    result = ToolResult(tool_name="shot", content="the screen", reward=1.0, finished=True,
                        blocks=[TextBlock("the screen"), ImageBlock(data=PNG)])
    data = json.loads(json.dumps(result.to_dict()))
    assert data["blocks"][1] == {"data": PNG, "mimeType": "image/png", "detail": None,
                                 "type": "image"}
    assert data["reward"] == 1.0 and data["finished"] is True


def test_message_to_openai_includes_tool_calls_and_tool_ids():
    call = ToolCall(id="c1", name="think", arguments={"thought": "x"})
    assistant = Message(role="assistant", content=None, tool_calls=[call])
    assert assistant.to_openai()["tool_calls"][0]["function"]["name"] == "think"
    tool_msg = Message(role="tool", content="x", tool_call_id="c1", name="think")
    assert tool_msg.to_openai() == {"role": "tool", "content": "x", "tool_call_id": "c1"}


def test_agent_result_defaults():
    result = AgentResult(content="done")
    assert result.tool_results == [] and result.turns == 0


def test_error_type_given_as_a_string_becomes_the_enum():
    result = ToolResult(tool_name="t", content="no", success=False, error_type="timeout")
    assert result.error_type is ErrorType.TIMEOUT
    assert result.to_dict()["error_type"] == "timeout"
    assert result.to_tool_output()["metadata"] == {"error_type": "timeout"}
    with pytest.raises(ValueError):
        ToolResult(tool_name="t", content="no", success=False, error_type="bogus")
