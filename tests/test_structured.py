"""Structured answers (issue 26, item 4): `ask_full(output_schema=...)` and `jarvis ask --schema`,
natively (response_format, through the loopback server) and through the final_answer tool (an
engine without response_format), against scripted models: valid, invalid then fixed, never
valid; and hostile schemas refused before use."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from pydantic import BaseModel

from jarvis import Jarvis
from jarvis.agents.structured import SchemaProblem
from jarvis.testing import FakeOpenAIServer, ScriptedEngine, reply, tool_call

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"},
                                           "population": {"type": "integer", "minimum": 0}},
          "required": ["city", "population"], "additionalProperties": False}


class City(BaseModel):
    city: str
    population: int


def _served(replies: list[Any]) -> tuple[FakeOpenAIServer, Jarvis]:
    server = FakeOpenAIServer(replies).start()
    return server, Jarvis(engine="vllm", host=server.url, model="test-model")


# --- native: response_format through the OpenAI-compatible engine -----------------------------
def test_native_valid_answer_is_parsed_and_the_request_carries_the_schema(jarvis_home):
    server, j = _served(['{"city": "Paris", "population": 2100000}'])
    with server, j:
        result = j.ask_full("Largest city of France?", output_schema=SCHEMA, context=False)
    assert result["status"] == "ok" and result["parsed"] == {"city": "Paris", "population": 2100000}
    assert result["metadata"]["structured"] == {"mode": "native", "attempts": 1, "status": "ok",
                                                "errors": []}
    sent = server.requests[0]["response_format"]
    assert sent == {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA,
                                                           "strict": False}}
    assert "tools" not in server.requests[0]


def test_native_invalid_then_fixed_shows_the_model_the_validation_error(jarvis_home):
    server, j = _served(['{"city": "Paris", "population": "lots"}',
                         '```json\n{"city": "Paris", "population": 2100000}\n```'])
    with server, j:
        result = j.ask_full("Largest city of France?", output_schema=City, context=False)
    assert result["status"] == "ok" and isinstance(result["parsed"], City)
    assert result["parsed"].population == 2100000
    assert result["metadata"]["structured"]["attempts"] == 2
    retry = server.requests[1]["messages"]
    assert retry[-2] == {"role": "assistant",
                         "content": '{"city": "Paris", "population": "lots"}'}
    assert retry[-1]["role"] == "user"
    assert "at population: 'lots' is not of type 'integer'" in retry[-1]["content"]
    assert result["turns"] == 2 and result["usage"]["total_tokens"] > 0


def test_native_never_valid_ends_incomplete_after_the_retries(jarvis_home):
    server, j = _served(["Paris, about two million", '{"city": "Paris"}', "[]", "never asked"])
    with server, j:
        result = j.ask_full("Largest city?", output_schema=SCHEMA, schema_retries=2,
                            context=False)
        runs = j.runlog.list(limit=1)
    assert result["status"] == "incomplete" and result["parsed"] is None
    report = result["metadata"]["structured"]
    assert report["attempts"] == 3 and len(report["errors"]) == 3
    assert report["errors"][0].startswith("the answer is not valid JSON")
    assert "'population' is a required property" in report["errors"][1]
    assert len(server.requests) == 3 and server.remaining == 1
    assert runs[0]["status"] == "incomplete" and "not of type 'object'" in runs[0]["error"]


# --- tool: the final_answer tool for engines without response_format ---------------------------
def test_tool_mode_valid_answer_ends_the_run_with_the_model_instance():
    engine = ScriptedEngine([reply(tool_calls=[tool_call("final_answer",
                                                         {"city": "Paris", "population": 2})])])
    with Jarvis(engine=engine, model="m") as j:
        result = j.ask_full("Largest city?", output_schema=City, context=False)
    assert result["status"] == "ok" and result["parsed"] == City(city="Paris", population=2)
    assert result["metadata"]["structured"]["mode"] == "tool"
    assert result["agent"] == "orchestrator"  # the simple agent cannot call final_answer
    offered = engine.calls[0]["tools"]
    assert [t["function"]["name"] for t in offered] == ["final_answer"]
    assert offered[0]["function"]["parameters"]["required"] == ["city", "population"]
    assert "call the final_answer tool" in engine.calls[0]["messages"][0]["content"]
    assert json.loads(result["content"]) == {"city": "Paris", "population": 2}
    assert len(engine.calls) == 1  # the valid call ended the run


def test_tool_mode_invalid_then_fixed_through_the_executors_validation():
    engine = ScriptedEngine([
        reply(tool_calls=[tool_call("calculator", {"expression": "2*1050000"})]),
        reply(tool_calls=[tool_call("final_answer", {"city": "Paris", "population": -1})]),
        reply(tool_calls=[tool_call("final_answer", {"city": "Paris", "population": 2100000})])])
    with Jarvis(engine=engine, model="m") as j:
        result = j.ask_full("Largest city?", output_schema=SCHEMA, tools=["calculator"],
                            context=False)
    assert result["status"] == "ok" and result["parsed"]["population"] == 2100000
    names = [t["function"]["name"] for t in engine.calls[0]["tools"]]
    assert names == ["calculator", "final_answer"]
    told = [m["content"] for m in engine.calls[2]["messages"] if m["role"] == "tool"]
    assert told[0] == "2100000" and told[1].startswith("ERROR (invalid_args)")
    assert "-1" in told[1] and "minimum" in told[1]


def test_tool_mode_never_valid_ends_incomplete():
    engine = ScriptedEngine(["It is Paris.", "Paris!", "I said Paris."])
    with Jarvis(engine=engine, model="m") as j:
        result = j.ask_full("Largest city?", output_schema=SCHEMA, schema_retries=1,
                            context=False)
    assert result["status"] == "incomplete" and result["parsed"] is None
    assert result["metadata"]["structured"]["attempts"] == 2
    assert "Call the final_answer tool" in engine.calls[1]["messages"][-1]["content"]
    assert engine.remaining == 1


def test_tool_mode_wraps_a_schema_that_is_not_an_object_and_react_calls_it_too():
    schema = {"type": "array", "items": {"$ref": "#/$defs/word"}, "minItems": 2,
              "$defs": {"word": {"type": "string", "maxLength": 10}}}
    engine = ScriptedEngine([
        reply('Thought: answer\nAction: final_answer\nAction Input: {"answer": ["a"]}'),
        reply('Thought: answer\nAction: final_answer\nAction Input: {"answer": ["a", "b"]}')])
    with Jarvis(engine=engine, model="m") as j:
        result = j.ask_full("Two letters?", agent="react", output_schema=schema, context=False)
    assert result["status"] == "ok" and result["parsed"] == ["a", "b"]
    assert "final_answer" in engine.calls[0]["messages"][0]["content"]
    assert "Observation: ERROR (invalid_args)" in engine.calls[1]["messages"][-1]["content"]


def test_a_react_agent_can_answer_natively_in_text(jarvis_home):
    server, j = _served(['Thought: done\nFinal Answer: {"city": "Rome", "population": 3}'])
    with server, j:
        result = j.ask_full("Largest city of Italy?", agent="react", output_schema=SCHEMA,
                            context=False)
    assert result["parsed"] == {"city": "Rome", "population": 3}


# --- hostile schemas ------------------------------------------------------------------------------
def _deep(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        node = {"type": "object", "properties": {"x": node}}
    return node


@pytest.mark.parametrize("schema, words", [
    ({"$ref": "#"}, "refers to itself without end"),
    ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}},
      "$ref": "#/$defs/a"}, "refers to itself without end"),
    ({"anyOf": [{"type": "string"}, {"$ref": "#"}]}, "refers to itself without end"),
    ({"$ref": "https://example.com/schema.json"}, "only local references"),
    ({"$ref": "#/$defs/missing"}, "cannot be used"),
    ({"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 100}
                                       for i in range(1000)}}, "the limit is 65536"),
    (_deep(40), "nested more than 32 levels"),
    ({"type": 5}, "not a valid JSON schema"),
    ([1, 2], "a pydantic model class or a JSON schema dict, not list"),
    ({"$defs": {f"d{i}": {"$ref": "#/$defs/d0"} for i in range(300)}}, r"more than 256 \$refs"),
])
def test_hostile_schemas_are_refused_before_any_request(schema, words):
    engine = ScriptedEngine([])
    with Jarvis(engine=engine, model="m") as j, pytest.raises(SchemaProblem, match=words):
        j.ask_full("q", output_schema=schema, context=False)
    assert engine.calls == []


def test_a_recursive_schema_that_consumes_the_answer_is_fine():
    tree = {"type": "object", "properties": {"children": {"type": "array",
                                                          "items": {"$ref": "#"}}}}
    engine = ScriptedEngine([reply(tool_calls=[tool_call(
        "final_answer", {"children": [{"children": []}, {}]})])])
    with Jarvis(engine=engine, model="m") as j:
        assert j.ask_full("tree?", output_schema=tree, context=False)["status"] == "ok"


def test_a_hostile_answer_is_bounded():
    from jarvis.agents.structured import OutputSchema, parse_answer

    with pytest.raises(ValueError, match="nested too deeply"):
        parse_answer("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="longer than"):
        parse_answer("1" * 2_000_000)
    output = OutputSchema.of({"type": "array"})
    assert output.validate([1]) == [1]


# --- jarvis ask --schema --------------------------------------------------------------------------
def _ask(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jarvis.cli", "ask", *args], env=env, text=True,
                          capture_output=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.fixture
def ask_env(cli_env, tmp_path):
    cli_env.update(JARVIS_ENGINE="vllm", JARVIS_MODEL="test-model")
    (tmp_path / "city.json").write_text(json.dumps(SCHEMA))
    return cli_env


def test_cli_schema_prints_the_checked_json(ask_env, tmp_path):
    with FakeOpenAIServer(['{"city": "Paris"}', '{"city": "Paris", "population": 5}']) as server:
        ask_env["VLLM_HOST"] = server.url
        out = _ask(ask_env, "--schema", str(tmp_path / "city.json"), "Largest city?")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"city": "Paris", "population": 5}
    assert server.requests[0]["response_format"]["json_schema"]["schema"] == SCHEMA
    assert not server.requests[0].get("stream")  # checked before it is shown, not streamed


def test_cli_schema_never_valid_exits_3_with_the_reason(ask_env, tmp_path):
    with FakeOpenAIServer(["nope"], default="still nope") as server:
        ask_env["VLLM_HOST"] = server.url
        out = _ask(ask_env, "--schema", str(tmp_path / "city.json"), "Largest city?")
        as_json = _ask(ask_env, "--json", "--schema", str(tmp_path / "city.json"), "q")
    assert out.returncode == 3 and out.stdout == ""
    assert out.stderr.strip().splitlines()[-1].startswith(
        "Error: no answer matched the schema after 3 attempt(s); the last problem: the answer "
        "is not valid JSON")
    assert as_json.returncode == 3
    data = json.loads(as_json.stdout)
    assert data["status"] == "incomplete" and data["parsed"] is None


def test_cli_bad_schema_files_are_one_line_and_exit_2(ask_env, tmp_path):
    (tmp_path / "loop.json").write_text('{"$ref": "#"}')
    (tmp_path / "broken.json").write_text('{"type": ')
    (tmp_path / "huge.json").write_text(json.dumps({"enum": ["x" * 1000] * 100}))
    for name, words in (("loop.json", "refers to itself without end"),
                        ("broken.json", "is not valid JSON"),
                        ("huge.json", "the limit is 65536"),
                        ("missing.json", "cannot read the schema file")):
        out = _ask(ask_env, "--schema", str(tmp_path / name), "q")
        assert out.returncode == 2, (name, out.stderr)
        assert words in out.stderr and "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1


def test_the_documented_example_prints_what_it_says():
    import contextlib
    import io
    import re
    import types
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "engines-agents.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", doc, flags=re.S)
                if "output_schema=City" in b]
    module = types.ModuleType("doc_structured")  # pydantic looks the module up
    sys.modules["doc_structured"] = module
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(block, "docs/engines-agents.md", "exec"), module.__dict__)
    finally:
        del sys.modules["doc_structured"]
    assert out.getvalue() == "ok name='Paris' population=2100000\n"


# --- the testing kit understands response_format -------------------------------------------------
def test_a_scripted_engine_with_response_format_answers_natively():
    engine = ScriptedEngine(['{"city": 1}', '{"city": "Oslo", "population": 700000}'],
                            response_format=True)
    with Jarvis(engine=engine, model="m") as j:
        result = j.ask_full("Capital of Norway?", output_schema=SCHEMA, context=False)
    assert result["status"] == "ok" and result["metadata"]["structured"]["mode"] == "native"
    assert [c["response_format"]["json_schema"]["schema"] for c in engine.calls] == [SCHEMA] * 2
    assert engine.calls[0]["tools"] is None


def test_the_testing_kit_refuses_what_the_openai_api_refuses():
    import httpx

    from jarvis.errors import EngineError

    with Jarvis(engine=ScriptedEngine(["{}"]), model="m") as j, \
            pytest.raises(EngineError, match="does not take response_format"):
        j.ask_full("q", output_schema=SCHEMA, schema_mode="native", context=False)
    bad_formats = [
        ({"type": "xml"}, "Invalid 'response_format.type'"),
        ({"type": "json_schema"}, "Missing required parameter: 'response_format.json_schema'"),
        ({"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}},
         "json_schema.name"),
        ({"type": "json_schema", "json_schema": {"name": "a", "schema": []}},
         "json_schema.schema"),
    ]
    with FakeOpenAIServer(default="unused") as server:
        for fmt, words in bad_formats:
            answer = httpx.post(server.base_url + "/chat/completions", json={
                "model": "test-model", "messages": [{"role": "user", "content": "q"}],
                "response_format": fmt})
            assert answer.status_code == 400 and words in answer.json()["error"]["message"]
        assert len(server.requests) == 4  # recorded, though refused
        ok = httpx.post(server.base_url + "/chat/completions", json={
            "model": "test-model", "messages": [{"role": "user", "content": "q"}],
            "response_format": {"type": "json_object"}})
        assert ok.status_code == 200
