"""A tolerant parser for ReAct-style model output.

Accepted, in this order:
  1. `Action: NAME` + `Action Input: {json}` (the prompted format; text the model invents
     after it, such as its own `Observation:`, is ignored);
  2. an XML-style `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` block;
  3. a JSON tool-call object, bare or in a ``` fenced block (`name`/`tool`/`action` with
     `arguments`/`parameters`/`action_input`/`input`; `"action": "Final Answer"` is an answer);
  4. `Final Answer: ...`;
  5. plain text with none of the markers is the answer itself.
Anything that looks like a tool call but cannot be read is a ParseError whose message is
fed back to the model as an observation.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

MAX_PARSE_CHARS = 200_000  # model output beyond this is not searched (bounds regex work)

_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_ACTION = re.compile(r"^[ \t*]*Action[ \t*]*:[ \t*]*(.*)$", re.MULTILINE | re.IGNORECASE)
_ACTION_INPUT = re.compile(r"^[ \t*]*Action[ \t]*Input[ \t*]*:[ \t*]*", re.MULTILINE | re.IGNORECASE)
_OBSERVATION = re.compile(r"^[ \t*]*Observation[ \t*]*:", re.MULTILINE | re.IGNORECASE)
_FINAL = re.compile(r"^[ \t*]*Final[ \t]*Answer[ \t*]*:[ \t*]*", re.MULTILINE | re.IGNORECASE)
_THOUGHT = re.compile(r"^[ \t*]*Thought[ \t*]*:", re.MULTILINE | re.IGNORECASE)
# Tags and fences are found with plain searches, not one regex with a lazy body: a pattern
# like `<tool_call>\s*(.*?)\s*(?:</tool_call>|$)` retries the trailing `\s*` from every
# position of an unclosed body, which is quadratic (minutes on a hostile 200 000-character
# reply). See bench/bench_react.py.
_TOOL_OPEN = re.compile(r"<tool_call>", re.IGNORECASE)
_TOOL_CLOSE = re.compile(r"</tool_call>", re.IGNORECASE)
_FENCE_TAG = re.compile(r"[a-zA-Z0-9_-]*[ \t]*\n?")

_NAME_KEYS = ("name", "tool", "tool_name", "action", "function")
_ARG_KEYS = ("arguments", "parameters", "action_input", "input", "args")


@dataclass(slots=True)
class ReactStep:
    """One parsed model reply: a tool action, a final answer, or a parse error."""

    kind: Literal["action", "final", "error"]
    tool: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    answer: str = ""
    error: str = ""
    text: str = ""  # the reply as kept in the transcript (invented observations cut off)


def strip_thinking(text: str) -> str:
    """Remove <think>...</think> blocks that reasoning models emit.

    A left-to-right scan, not one regex: `<think>.*?</think>` retried from every unclosed
    `<think>` is quadratic (tens of seconds on a hostile 200 000-character reply).
    """
    kept: list[str] = []
    pos = 0
    while True:
        opened = _THINK_OPEN.search(text, pos)
        if opened is None:
            break
        closed = _THINK_CLOSE.search(text, opened.end())
        if closed is None:
            break
        kept.append(text[pos:opened.start()])
        pos = closed.end()
    kept.append(text[pos:])
    return "".join(kept).strip()


@dataclass(slots=True, frozen=True)
class _Found:
    """Where a tagged or fenced block is: its span and its body."""

    start: int
    end: int
    body: str


def find_tool_call(text: str) -> _Found | None:
    """The first `<tool_call>` block: its body runs to `</tool_call>`, else to the end of the
    text (a model that stopped before closing the tag). Linear in the text."""
    opened = _TOOL_OPEN.search(text)
    if opened is None:
        return None
    closed = _TOOL_CLOSE.search(text, opened.end())
    end = closed.start() if closed else len(text)
    return _Found(opened.start(), closed.end() if closed else len(text),
                  text[opened.end():end].strip())


def find_fence(text: str) -> _Found | None:
    """The first ``` fenced block (an optional language tag, then the body up to the next
    ```). Linear: a tag never holds a backtick, so the closing fence is the first ``` after
    the tag, and with none after the first opening there is none after any later one."""
    start = text.find("```")
    if start < 0:
        return None
    tag = _FENCE_TAG.match(text, start + 3)
    body_start = tag.end() if tag else start + 3
    close = text.find("```", body_start)
    if close < 0:
        return None
    return _Found(start, close + 3, text[body_start:close])


def _strip_fences(text: str) -> str:
    text = text.strip()
    fenced = find_fence(text)
    if fenced is not None:
        return fenced.body.strip()
    return text.strip("`").strip()


def _first_json_object(text: str) -> Any:
    """Decode the first JSON value starting at the first '{' (trailing text allowed)."""
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON object found")
    try:
        value, _ = json.JSONDecoder().raw_decode(text[start:])
    except RecursionError:
        raise ValueError("the JSON is nested too deeply") from None
    return value


def _clean_name(raw: str) -> str:
    name = raw.strip().strip("`'\"*[]() ").strip()
    return name.split()[0] if name else ""


def _arguments(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):
        stripped = value.strip()
        if not stripped:
            return {}
        try:
            value = json.loads(stripped)  # arguments given as a JSON string inside the JSON
        except RecursionError:
            raise ValueError("the JSON is nested too deeply") from None
    if not isinstance(value, dict):
        raise ValueError(f"arguments must be a JSON object, got {type(value).__name__}")
    return value


def _from_object(obj: Any, text: str) -> ReactStep | None:
    """A tool call (or a langchain-style final answer) from a decoded JSON object."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):  # OpenAI wire form
        obj = {"name": obj["function"].get("name"), "arguments": obj["function"].get("arguments")}
    name = next((obj[k] for k in _NAME_KEYS if isinstance(obj.get(k), str) and obj[k]), None)
    if name is None:
        return None
    raw_args = next((obj[k] for k in _ARG_KEYS if k in obj), None)
    if name.strip().lower().replace("_", " ") == "final answer":
        answer = raw_args if isinstance(raw_args, str) else json.dumps(raw_args)
        return ReactStep("final", answer=answer, text=text)
    try:
        args = _arguments(raw_args)
    except ValueError as exc:
        return ReactStep("error", tool=name, text=text,
                         error=f"the arguments for {name} could not be read: {exc}")
    return ReactStep("action", tool=name, arguments=args, text=text)


def parse_react(raw: str) -> ReactStep:
    """Parse one model reply (see the module docstring for what is accepted)."""
    text = strip_thinking(raw[:MAX_PARSE_CHARS])
    action = _ACTION.search(text)
    final = _FINAL.search(text)
    if action is not None and (final is None or action.start() < final.start()):
        return _parse_action(text, action)
    tagged = find_tool_call(text)
    if tagged is not None and (final is None or tagged.start < final.start()):
        try:
            obj = _first_json_object(_strip_fences(tagged.body))
        except ValueError as exc:
            return ReactStep("error", text=text[:tagged.end],
                             error=f"the <tool_call> block is not valid JSON: {exc}")
        step = _from_object(obj, text[:tagged.end])
        return step or ReactStep("error", text=text[:tagged.end],
                                 error='a <tool_call> block needs {"name": ..., "arguments": {...}}')
    if final is not None:
        return ReactStep("final", answer=text[final.end():].strip(), text=text)
    json_step = _parse_json_reply(text)
    if json_step is not None:
        return json_step
    if _THOUGHT.search(text):
        return ReactStep("error", text=text, error=(
            "the reply has a Thought but neither an Action nor a Final Answer"))
    return ReactStep("final", answer=text.strip(), text=text)


def _parse_action(text: str, action: re.Match[str]) -> ReactStep:
    observed = _OBSERVATION.search(text, action.end())
    kept = text[:observed.start()].rstrip() if observed else text
    name = _clean_name(action.group(1))
    if not name:
        return ReactStep("error", text=kept, error="the Action line names no tool")
    marker = _ACTION_INPUT.search(kept, action.end())
    if marker is None:
        # `Action: calc {"x": 1}` on one line, or no input at all.
        rest = action.group(1).strip()[len(name):].strip() if action.group(1) else ""
        if not rest:
            return ReactStep("action", tool=name, arguments={}, text=kept)
        raw_input = rest
    else:
        end = _FINAL.search(kept, marker.end())
        raw_input = kept[marker.end():end.start() if end else len(kept)]
    cleaned = _strip_fences(raw_input)
    if not cleaned or cleaned.lower() in ("{}", "none", "null"):
        return ReactStep("action", tool=name, arguments={}, text=kept)
    try:
        args = _arguments(_first_json_object(cleaned) if "{" in cleaned else json.loads(cleaned))
    except RecursionError:
        return ReactStep("error", tool=name, text=kept, error=(
            f"the Action Input for {name} is nested too deeply; write it as "
            f'Action Input: {{"parameter": "value"}}'))
    except ValueError as exc:
        return ReactStep("error", tool=name, text=kept, error=(
            f"the Action Input for {name} is not a JSON object ({exc}); write it as "
            f'Action Input: {{"parameter": "value"}}'))
    return ReactStep("action", tool=name, arguments=args, text=kept)


def _parse_json_reply(text: str) -> ReactStep | None:
    fenced = find_fence(text)
    candidates = [fenced.body] if fenced else []
    stripped = text.strip()
    if stripped.startswith("{"):
        candidates.append(stripped)
    for candidate in candidates:
        try:
            obj = _first_json_object(candidate)
        except ValueError:
            if candidate.strip().startswith("{") and any(f'"{k}"' in candidate for k in _NAME_KEYS):
                return ReactStep("error", text=text, error=(
                    "the JSON tool call could not be decoded; send one object like "
                    '{"name": "tool", "arguments": {...}}'))
            continue
        step = _from_object(obj, text)
        if step is not None:
            return step
    return None
