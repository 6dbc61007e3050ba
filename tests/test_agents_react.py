"""The react agent and its tolerant parser."""

from __future__ import annotations

import pytest

from jarvis.agents import ReActAgent
from jarvis.agents.react_parser import parse_react
from jarvis.testing import ScriptedEngine, reply, tool_call
from jarvis.tools.calculator import CalculatorTool
from jarvis.tools.descriptions import build_tool_descriptions
from jarvis.tools.think import ThinkTool


@pytest.mark.parametrize("text", [
    'Thought: I need math\nAction: calculator\nAction Input: {"expression": "2+2"}',
    'Thought: x\nAction: `calculator`\nAction Input: ```json\n{"expression": "2+2"}\n```',
    '**Action:** calculator\n**Action Input:** {"expression": "2+2"}\nObservation: 4\nFinal Answer: 4',
    'Action: calculator {"expression": "2+2"}',
    '<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>',
    ('<tool_call>\n```json\n{"name": "calculator", '
     '"arguments": "{\\"expression\\": \\"2+2\\"}"}\n```\n</tool_call>'),
    '{"name": "calculator", "arguments": {"expression": "2+2"}}',
    'Sure:\n```json\n{"tool": "calculator", "parameters": {"expression": "2+2"}}\n```',
    '{"action": "calculator", "action_input": {"expression": "2+2"}}',
    '<think>Maybe Final Answer: 5?</think>\nAction: calculator\nAction Input: {"expression": "2+2"}',
])
def test_parser_accepts_many_tool_call_shapes(text):
    step = parse_react(text)
    assert step.kind == "action", step
    assert step.tool == "calculator"
    assert step.arguments == {"expression": "2+2"}


def test_parser_cuts_invented_observations_from_the_transcript():
    step = parse_react('Action: calculator\nAction Input: {"expression": "1"}\nObservation: 1\n'
                       'Final Answer: 1')
    assert step.kind == "action" and "Observation" not in step.text


@pytest.mark.parametrize("text,answer", [
    ("Thought: easy\nFinal Answer: Paris", "Paris"),
    ('{"action": "Final Answer", "action_input": "Paris"}', "Paris"),
    ("Paris is the capital.", "Paris is the capital."),
    ("<think>hmm</think>Paris", "Paris"),
])
def test_parser_final_answers(text, answer):
    step = parse_react(text)
    assert step.kind == "final" and step.answer == answer


@pytest.mark.parametrize("text,fragment", [
    ("Action: calculator\nAction Input: 2+2", "not a JSON object"),
    ('Action: calculator\nAction Input: {"expression": ', "not a JSON object"),
    ("<tool_call>{broken</tool_call>", "not valid JSON"),
    ("Thought: I should use a tool", "neither an Action nor a Final Answer"),
    ('{"name": "calculator", "arguments": [1, 2]}', "could not be read"),
])
def test_parser_errors_say_what_is_wrong(text, fragment):
    step = parse_react(text)
    assert step.kind == "error" and fragment in step.error


def test_react_prompt_uses_tool_descriptions_and_runs_the_loop():
    tools = [CalculatorTool(), ThinkTool()]
    engine = ScriptedEngine([
        'Thought: compute\nAction: calculator\nAction Input: {"expression": "0.15*340"}',
        "Thought: done\nFinal Answer: 51",
    ])
    result = ReActAgent(engine, "m", tools=tools).run("15% of 340?")
    assert result.content == "51" and result.turns == 2
    system = engine.calls[0]["messages"][0]["content"]
    assert build_tool_descriptions(tools) in system
    assert engine.calls[0]["tools"] is None  # prompted tools, not native ones
    assert engine.calls[1]["messages"][-1] == {"role": "user", "content": "Observation: 51.0"}
    assert result.tool_results[0].tool_name == "calculator" and result.tool_results[0].success


def test_parse_errors_and_tool_failures_are_fed_back_and_the_run_continues():
    engine = ScriptedEngine([
        "Action: calculator\nAction Input: 2+2",
        'Action: calculater\nAction Input: {"expression": "2+2"}',
        'Action: calculator\nAction Input: {"expression": "2+2"}',
        "Final Answer: 4",
    ])
    result = ReActAgent(engine, tools=[CalculatorTool()]).run("2+2?")
    assert result.content == "4"
    observations = [c["messages"][-1]["content"] for c in engine.calls[1:]]
    assert observations[0].startswith("Observation: Your reply could not be used")
    assert "ERROR (tool_not_found)" in observations[1] and "calculator" in observations[1]
    assert observations[2] == "Observation: 4"
    assert result.metadata["parse_errors"] == 1


def test_react_honours_native_tool_calls_from_the_server():
    engine = ScriptedEngine([reply(tool_calls=[tool_call("calculator", {"expression": "5*5"})]),
                             "Final Answer: 25"])
    result = ReActAgent(engine, tools=[CalculatorTool()]).run("5*5?")
    assert result.content == "25" and result.tool_results[0].content == "25"


def test_react_streams_only_the_final_answer():
    tokens: list[str] = []
    engine = ScriptedEngine([
        'Thought: compute it\nAction: calculator\nAction Input: {"expression": "6*7"}',
        "Thought: I know it now\nFinal Answer: The answer is 42.",
    ])
    result = ReActAgent(engine, tools=[CalculatorTool()], on_token=tokens.append).run("6*7?")
    assert "".join(tokens) == "The answer is 42." == result.content


def test_react_streams_a_plain_reply_too():
    tokens: list[str] = []
    result = ReActAgent(ScriptedEngine(["Just text."]), on_token=tokens.append).run("hi")
    assert "".join(tokens) == "Just text." == result.content


def test_react_loop_guard_and_max_turns():
    same = 'Action: calculator\nAction Input: {"expression": "1+1"}'
    result = ReActAgent(ScriptedEngine([same] * 6), tools=[CalculatorTool()],
                        max_repeats=1).run("?")
    assert len(result.tool_results) == 1 and result.metadata["loop_detected"] is True
    steps = [f'Action: calculator\nAction Input: {{"expression": "{i}+1"}}' for i in range(5)]
    result = ReActAgent(ScriptedEngine(steps), tools=[CalculatorTool()], max_turns=3).run("?")
    assert result.turns == 3 and result.metadata["max_turns_exceeded"] is True


def test_react_streams_nothing_from_a_tool_step_with_an_invented_answer():
    tokens: list[str] = []
    engine = ScriptedEngine([
        'Thought: I cannot give the final answer: yet\nAction: calculator\n'
        'Action Input: {"expression": "6*7"}\nObservation: 41\nFinal Answer: 41',
        "Final Answer: 42",
    ])
    result = ReActAgent(engine, tools=[CalculatorTool()], on_token=tokens.append).run("6*7?")
    assert "".join(tokens) == "42" == result.content


# Growth, not wall time, shows linear work (see tests/growth.py): 4x the input must take
# under 8x the time. The sizes keep the quadratic code these tests caught at about a second.
HOSTILE_FAMILIES = {
    "nested <think>": lambda n: "<think>" * (n // 7) + "x",
    "nested JSON": lambda n: ('{"name": "calculator", "arguments": ' + '{"a":' * (n // 5) + "1"
                              + "}" * (n // 5 + 1)),
    "open brackets": lambda n: "Action: calculator\nAction Input: " + "[" * n,
    "an unclosed <tool_call> and spaces": lambda n: "<tool_call>x" + " " * n + "y",
    "an unclosed <tool_call> and lines": lambda n: "<tool_call>x" + " \n" * (n // 2) + "y",
    "an unclosed fence": lambda n: "```" + "a" * n,
    "repeated <tool_call> tags": lambda n: "<tool_call>" * (n // 11),
}


@pytest.mark.parametrize("family", sorted(HOSTILE_FAMILIES))
def test_the_parser_is_linear_in_hostile_replies(family):
    from growth import assert_linear

    from jarvis.agents.react_parser import parse_react

    assert_linear(HOSTILE_FAMILIES[family], parse_react, 1500, what=f"parsing {family}")


def test_hostile_replies_never_raise():
    from jarvis.agents.react_parser import parse_react, strip_thinking

    replies = ["<think>" * 50_000 + "x",  # was 27 s
               '{"name": "calculator", "arguments": ' + '{"a":' * 50_000 + "1" + "}" * 50_001,
               "Action: calculator\nAction Input: " + "[" * 100_000]
    for text in replies:
        assert parse_react(text).kind in ("error", "final", "action")
    assert parse_react(replies[2]).kind == "error"
    assert strip_thinking("a<THINK>x</Think>b<think>y</think>c<think>open") == "abc<think>open"


def test_tool_call_tags_and_fences_keep_their_meaning():
    from jarvis.agents.react_parser import parse_react

    hostile = ["<tool_call>x" + " " * 200_000,  # was > 90 s
               "<tool_call>x" + " " * 200_000 + "y",
               "<tool_call>x" + " \n" * 100_000 + "y",
               "```" + "a" * 199_000,
               "<tool_call>" * 20_000]
    for text in hostile:
        assert parse_react(text).kind in ("error", "final")
    # What the tags and fences mean is unchanged.
    closed = parse_react('<TOOL_CALL> {"name": "calculator", "arguments": {"expression": "2"}} '
                         "</tool_call> then text")
    assert (closed.kind, closed.tool, closed.arguments) == ("action", "calculator",
                                                           {"expression": "2"})
    unclosed = parse_react('<tool_call>\n```json\n{"name": "think", "arguments": {}}\n```\n')
    assert (unclosed.kind, unclosed.tool) == ("action", "think")
    fenced = parse_react('```json\n{"name": "think", "arguments": {"thought": "x"}}\n```')
    assert (fenced.kind, fenced.arguments) == ("action", {"thought": "x"})
    assert parse_react("<tool_call>not json").error.startswith("the <tool_call> block is not")


def _forwarded(text: str, sizes: list[int]) -> str:
    from jarvis.agents.react import _AnswerStream

    out: list[str] = []
    stream = _AnswerStream(out.append)
    pos = 0
    for i in range(len(text)):
        if pos >= len(text):
            break
        size = sizes[i % len(sizes)]
        stream(text[pos:pos + size])
        pos += size
    return "".join(out)


def test_the_answer_filter_gives_the_same_text_however_the_reply_is_cut():
    replies = {
        "Thought: easy\nFinal Answer: 42 is it": "42 is it",
        "**Final Answer:**  The answer\nspans lines": "The answer\nspans lines",
        "Thought: x\nAction: calc\nAction Input: {}\nFinal Answer: invented": "",
        "Action Input: {}\nFinal   Answer : y": "y",
        "Thought: " + "long " * 50 + "\nfinal answer:ok": "ok",
        "A Final Answer: is not at a line start\nFinal Answer: z": "z",
        "Thought: Action: in a thought line is no action\nFinal Answer: w": "w",
        "   \t  \n\nFinal Answer:\n\nlater": "later",
    }
    for text, expected in replies.items():
        for sizes in ([1], [2], [3, 1, 7], [len(text)]):
            assert _forwarded(text, sizes) == expected, (text, sizes)


@pytest.mark.parametrize("make, answer", [
    (lambda n: "Thought: " + "x" * n + "\nFinal Answer: done", "done"),
    (lambda n: " " * n + "\nFinal Answer: ok", "ok"),
], ids=["a long thought", "spaces"])
def test_the_answer_filter_is_linear_in_the_number_of_deltas(make, answer):
    from growth import assert_linear

    # One-character deltas; the quadratic filter took 10.8 s for 40 000 of them.
    assert_linear(make, lambda text: _forwarded(text, [1]), 2000,
                  what="filtering one-character deltas")
    assert _forwarded(make(40_000), [1]) == answer


def test_react_streams_a_long_reply_from_the_loopback_engine():
    from jarvis.engine.openai_compat import OpenAICompatEngine
    from jarvis.testing import FakeOpenAIServer

    long_thought = "Thought: " + "x " * 20_000 + "\nFinal Answer: done here"
    with FakeOpenAIServer([long_thought]) as server:  # ~10 000 streamed deltas
        engine = OpenAICompatEngine("vllm", server.url, model="test-model", client="http")
        tokens: list[str] = []
        result = ReActAgent(engine, on_token=tokens.append).run("think long")
        engine.close()
    assert "".join(tokens) == "done here" == result.content
