"""Budgets per ask (issue 26, item 3): a scripted model that keeps calling a slow, priced tool
stops at the budget in every entry point (`jarvis ask` through the starter workspace, the SDK,
agent files, `[agent]` defaults, scheduled tasks); `--json` and the run log show the spend;
estimates come from the spec and from measured calls the run log keeps across processes; bad
budgets and unpriced models are one clear line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jarvis import Jarvis
from jarvis.errors import UserError
from jarvis.testing import FakeOpenAIServer, reply, tool_call
from jarvis.tools.budget import Budget, BudgetMeter, find_price

# A workspace tool: slow (it sleeps its latency) and priced (cost_estimate per call).
PRICED_TOOL = '''
import time

from jarvis import tool


@tool(cost_estimate=0.01, latency_estimate=0.05, egress="none", output="neutral")
def lookup(item: str) -> str:
    """Look an item up in a slow, paid catalog.

    Args:
        item: what to look up.
    """
    time.sleep(0.05)
    return f"{item}: in stock"


@tool(latency_estimate=0.0, egress="none", output="neutral")
def sluggish(item: str) -> str:
    """A tool whose spec claims it is instant; it takes 0.3 s.

    Args:
        item: anything.
    """
    time.sleep(0.3)
    return "done"
'''



def ALWAYS_LOOKUP(request: dict[str, Any]) -> Any:  # noqa: N802 - a script item, like a constant
    """A model that never answers: each reply looks up one more item (never the same call
    twice, so the loop guard stays out of it)."""
    n = len(request["messages"])
    return reply(tool_calls=[tool_call("lookup", {"item": f"tea no. {n}"})])


def _workspace(path: Path, extra: str = "") -> Path:
    """`jarvis init` in `path` (the starter config), a priced tool in tools/, `extra` config."""
    path.mkdir(parents=True, exist_ok=True)
    init = subprocess.run([sys.executable, "-m", "jarvis.cli", "init"], cwd=path, text=True,
                          capture_output=True, timeout=60)
    assert init.returncode == 0, init.stderr
    (path / "tools" / "priced.py").write_text(PRICED_TOOL)
    if extra:
        with (path / "config.toml").open("a") as fh:
            fh.write("\n" + extra + "\n")
    return path


def _ask(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jarvis.cli", "ask", *args], env=env, cwd=cwd,
                          text=True, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.fixture
def served_env(cli_env):
    cli_env.update(JARVIS_ENGINE="vllm", JARVIS_MODEL="test-model")
    return cli_env


def _told(server: FakeOpenAIServer) -> list[str]:
    """The tool messages the model read, over every request."""
    last = server.requests[-1]["messages"]
    return [m["content"] for m in last if m["role"] == "tool"]


# --- the CLI, through the starter workspace ------------------------------------------------------
def test_cli_max_tool_calls_refuses_the_next_call_then_stops_incomplete(served_env, tmp_path):
    work = _workspace(tmp_path / "ws")
    with FakeOpenAIServer(default=ALWAYS_LOOKUP) as server:
        served_env["VLLM_HOST"] = server.url
        out = _ask(served_env, work, "--tools", "lookup", "--max-tool-calls", "2", "--json",
                   "Is tea in stock?")
    assert out.returncode == 3, out.stderr
    data = json.loads(out.stdout)
    assert data["status"] == "incomplete" and data["metadata"]["budget_exceeded"] is True
    results = data["tool_results"]
    assert [r["success"] for r in results] == [True, True, False]
    assert results[2]["error_type"] == "budget"
    assert "the run's 2 tool calls (--max-tool-calls) are used up" in results[2]["content"]
    # The model read the refusal, then called again: the run stopped before running it.
    assert len(server.requests) == 4
    assert _told(server)[-1].startswith("ERROR (budget): not run: the budget does not allow")
    spent = data["budget"]["spent"]
    assert data["budget"]["limits"] == {"usd": None, "seconds": None, "tool_calls": 2}
    assert spent["tool_calls"] == 2 and spent["engine_calls"] == 4
    assert spent["tool_usd"] == pytest.approx(0.02)  # the spec's cost_estimate per call
    assert spent["engine_usd"] == 0.0  # vllm: a local engine costs nothing
    assert data["budget"]["refused_calls"] == 2
    assert "refused again" in data["budget"]["exhausted"]
    assert "Error: stopped at the budget without a final answer: spent $0.02" in out.stderr
    assert "2 tool calls of 2" in out.stderr and "Traceback" not in out.stderr
    shown = subprocess.run([sys.executable, "-m", "jarvis.cli", "runs", "show", data["run_id"]],
                           env=served_env, cwd=work, text=True, capture_output=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "stopped: at the budget, before a final answer" in shown.stdout
    assert "budget:  spent $0.02, " in shown.stdout and "2 tool calls of 2" in shown.stdout


def test_cli_dollar_budget_prices_the_engine_from_the_config_table(served_env, tmp_path):
    work = _workspace(tmp_path / "ws", '[engine.prices]\n"test-*" = { input = 10.0, '
                      'output = 20.0 }')
    with FakeOpenAIServer(default=ALWAYS_LOOKUP) as server:
        served_env["VLLM_HOST"] = server.url
        out = _ask(served_env, work, "--tools", "lookup", "--budget-usd", "0.035", "--json", "q")
    assert out.returncode == 3, out.stderr
    data = json.loads(out.stdout)
    report = data["budget"]
    usage = data["usage"]
    engine_usd = (usage["prompt_tokens"] * 10 + usage["completion_tokens"] * 20) / 1e6
    assert report["spent"]["engine_usd"] == pytest.approx(engine_usd)
    assert report["model_price"] == {"input": 10.0, "output": 20.0}
    assert report["spent"]["usd"] == pytest.approx(engine_usd + report["spent"]["tool_usd"])
    assert report["spent"]["usd"] <= 0.035
    ran = [r for r in data["tool_results"] if r["success"]]
    assert 1 <= len(ran) <= 3
    assert data["tool_results"][-1]["error_type"] == "budget" or "model" in report["exhausted"]
    # The run log keeps the same report.
    runs = subprocess.run([sys.executable, "-m", "jarvis.cli", "runs", "show", data["run_id"],
                           "--json"], env=served_env, cwd=work, text=True, capture_output=True,
                          timeout=60)
    assert runs.returncode == 0, runs.stderr
    assert json.loads(runs.stdout)["metadata"]["budget"]["spent"] == report["spent"]


def test_cli_answer_inside_the_budget_is_ok_and_shows_the_spend(served_env, tmp_path):
    work = _workspace(tmp_path / "ws")
    with FakeOpenAIServer([ALWAYS_LOOKUP, "Yes, tea is in stock."]) as server:
        served_env["VLLM_HOST"] = server.url
        out = _ask(served_env, work, "--tools", "lookup", "--max-tool-calls", "5",
                   "--budget-seconds", "60", "--json", "Tea?")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["status"] == "ok" and data["budget"]["exhausted"] is None
    assert data["budget"]["spent"]["tool_calls"] == 1
    assert 0 < data["budget"]["spent"]["seconds"] < 60


def test_cli_seconds_budget_bounds_the_calls_of_a_slow_tool(served_env, tmp_path):
    work = _workspace(tmp_path / "ws")
    with FakeOpenAIServer(default=ALWAYS_LOOKUP) as server:
        served_env["VLLM_HOST"] = server.url
        out = _ask(served_env, work, "--tools", "lookup", "--budget-seconds", "0.12", "--json",
                   "q")
    assert out.returncode == 3, out.stderr
    data = json.loads(out.stdout)
    # Each call takes at least its 0.05 s, and none starts past 0.12 s minus its estimate.
    assert len([r for r in data["tool_results"] if r["success"]]) <= 2
    assert data["status"] == "incomplete" and data["budget"]["exhausted"]


@pytest.mark.parametrize("args, words", [
    (("--budget-usd", "-1"), "budget usd must be a number above 0"),
    (("--budget-usd", "nan"), "budget usd must be a number above 0"),
    (("--budget-seconds", "inf"), "budget seconds must be a number above 0"),
    (("--budget-seconds", "1e12"), "at most 2.592e+06"),
    (("--max-tool-calls", "-3"), "must be a whole number from 0 to 1000000"),
    (("--max-tool-calls", "99999999999"), "must be a whole number from 0 to 1000000"),
])
def test_cli_bad_budgets_are_one_line_and_exit_2(served_env, tmp_path, args, words):
    work = _workspace(tmp_path / "ws")
    with FakeOpenAIServer([]) as server:
        served_env["VLLM_HOST"] = server.url
        out = _ask(served_env, work, *args, "q")
    assert out.returncode == 2, out.stderr
    assert words in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert server.requests == []


def test_cli_an_unpriced_model_under_a_dollar_budget_is_refused_before_any_call(cli_env,
                                                                               tmp_path):
    work = _workspace(tmp_path / "ws")
    with FakeOpenAIServer([]) as server:
        cli_env.update(JARVIS_ENGINE="openai", JARVIS_MODEL="paid-model",
                       OPENAI_BASE_URL=server.url + "/v1", OPENAI_API_KEY="sk-test")
        out = _ask(cli_env, work, "--budget-usd", "0.5", "q")
    assert out.returncode == 2, out.stderr
    assert "a dollar budget needs the price of model 'paid-model' on engine 'openai'" in out.stderr
    assert "[engine.prices]" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert server.requests == []


# --- measured latencies persist across processes in the run log -----------------------------------
def test_a_tools_measured_latency_from_an_earlier_process_refines_its_spec(served_env, tmp_path):
    work = _workspace(tmp_path / "ws")
    script = [reply(tool_calls=[tool_call("sluggish", {"item": "x"})]), "done"]

    def ask(env: dict[str, str], *budget: str) -> dict[str, Any]:
        with FakeOpenAIServer(list(script)) as server:
            env["VLLM_HOST"] = server.url
            out = _ask(env, work, "--tools", "sluggish", *budget, "--json", "q")
        assert out.returncode in (0, 3), out.stderr
        return json.loads(out.stdout)["tool_results"][0]

    # A process with no history trusts the spec's 0 s: the call starts, and the 0.25 s budget
    # cuts it off (it takes 0.3 s).
    fresh = dict(served_env, JARVIS_HOME=str(tmp_path / "other-home"))
    (tmp_path / "other-home").mkdir()
    started = ask(fresh, "--budget-seconds", "0.25")
    assert started["error_type"] == "budget"
    assert "ran past the run's time budget (--budget-seconds" in started["content"]
    # One process measures it (no budget) into the run log ...
    assert ask(served_env)["success"] is True
    # ... and the next process refuses it before it starts: 0.3 s measured > 0.25 s.
    refused = ask(served_env, "--budget-seconds", "0.25")
    assert refused["error_type"] == "budget"
    assert refused["content"].startswith("not run: the budget does not allow this call")
    assert re.search(r"estimated at 0\.3\d* s", refused["content"]), refused["content"]


# --- the SDK, agent files, [agent] defaults ----------------------------------------------------------
def test_sdk_ask_full_budget_and_agent_file_and_config_defaults(jarvis_home, tmp_path):
    work = _workspace(tmp_path / "ws", "")
    (work / "agents" / "frugal.toml").write_text(
        'base = "orchestrator"\ntools = ["lookup"]\nmax_tool_calls = 1\n')
    config = work / "config.toml"
    text = config.read_text().replace("[agent]\n", "[agent]\nmax_tool_calls = 3\n", 1)
    config.write_text(text)

    def run(**kwargs: Any) -> dict[str, Any]:
        with FakeOpenAIServer(default=ALWAYS_LOOKUP) as server, \
                Jarvis(config_path=config, engine="vllm", host=server.url,
                       model="test-model") as j:
            return j.ask_full("q", context=False, **kwargs)

    from_config = run(tools=["lookup"])
    assert from_config["budget"]["limits"]["tool_calls"] == 3
    assert from_config["budget"]["spent"]["tool_calls"] == 3
    assert from_config["status"] == "incomplete"
    from_agent = run(agent="frugal")
    assert from_agent["budget"]["limits"]["tool_calls"] == 1
    assert [r["success"] for r in from_agent["tool_results"]] == [True, False]
    given = run(agent="frugal", budget={"tool_calls": 2, "seconds": 60})
    assert given["budget"]["limits"] == {"usd": None, "seconds": 60, "tool_calls": 2}
    assert given["budget"]["spent"]["tool_calls"] == 2
    as_object = run(tools=["lookup"], budget=Budget(tool_calls=0))
    assert as_object["tool_results"][0]["error_type"] == "budget"
    with pytest.raises(UserError, match="unknown budget key"):
        run(tools=["lookup"], budget={"dollars": 1})


def test_sdk_structured_answer_stops_at_the_budget_too(jarvis_home, tmp_path):
    work = _workspace(tmp_path / "ws")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    with FakeOpenAIServer(default=ALWAYS_LOOKUP) as server, \
            Jarvis(config_path=work / "config.toml", engine="vllm", host=server.url,
                   model="test-model") as j:
        result = j.ask_full("q", tools=["lookup"], output_schema=schema, schema_mode="tool",
                            budget={"tool_calls": 1}, context=False)
    assert result["status"] == "incomplete" and result["parsed"] is None
    assert result["metadata"]["budget_exceeded"] is True
    assert "the budget" in result["metadata"]["structured"]["errors"][-1]


# --- scheduled tasks -----------------------------------------------------------------------------------
def test_a_scheduled_task_runs_inside_its_budget(jarvis_home, tmp_path):
    work = _workspace(tmp_path / "ws")
    with FakeOpenAIServer(default=ALWAYS_LOOKUP) as server, \
            Jarvis(config_path=work / "config.toml", engine="vllm", host=server.url,
                   model="test-model") as j:
        task = j.scheduler.add("Check the tea", at="2099-01-01T08:00:00Z", tools=["lookup"],
                               budget={"tool_calls": 2})
        assert task.metadata["budget"] == {"usd": None, "seconds": None, "tool_calls": 2}
        run = j.scheduler.run_now(task.id)
        entry = j.runlog.get(run.run_log_id)
    assert entry["status"] == "incomplete"
    assert entry["metadata"]["budget"]["spent"]["tool_calls"] == 2
    assert [c["error_type"] for c in entry["tool_calls"]] == [None, None, "budget"]


def test_cli_schedule_add_keeps_the_budget_and_refuses_a_bad_one(cli_env, tmp_path):
    work = _workspace(tmp_path / "ws")

    def schedule(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "jarvis.cli", "schedule", "add", "tea?",
                               "--at", "2099-01-01T08:00:00Z", "--json", *args], env=cli_env,
                              cwd=work, text=True, capture_output=True, timeout=60)

    made = schedule("--budget-usd", "0.2", "--max-tool-calls", "4")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["budget"] == {"usd": 0.2, "seconds": None,
                                                             "tool_calls": 4}
    bad = schedule("--budget-seconds", "-5")
    assert bad.returncode == 2 and "budget seconds must be a number above 0" in bad.stderr
    assert "Traceback" not in bad.stderr


# --- the meter itself -----------------------------------------------------------------------------
def test_prices_exact_then_glob_then_local_engines_then_unknown():
    prices = {"gpt-4o": {"input": 2.5, "output": 10.0}, "gpt-*": {"input": 1.0, "output": 2.0}}
    assert find_price(prices, "gpt-4o", "openai").input == 2.5
    assert find_price(prices, "gpt-4.1", "openai").output == 2.0
    assert find_price(prices, "qwen3:8b", "ollama").input == 0.0
    assert find_price(prices, "claude", "openai") is None
    with pytest.raises(UserError, match="needs the price of model 'claude'"):
        BudgetMeter(Budget(usd=1.0), price=None, model="claude", engine_id="openai")
    # Without a dollar limit the unknown price is reported, not guessed.
    meter = BudgetMeter(Budget(tool_calls=1), price=None, model="claude", engine_id="openai")
    meter.after_engine({"prompt_tokens": 10, "completion_tokens": 5}, 0.1)
    assert meter.report()["spent"]["engine_usd"] is None


def test_concurrent_calls_of_one_reply_reserve_their_estimates():
    from jarvis.tools.spec import ToolSpec

    spec = ToolSpec(name="t", description="d", parameters={"type": "object"}, cost_estimate=0.4)
    meter = BudgetMeter(Budget(usd=1.0), price=find_price({}, "m", "vllm"))
    assert meter.admit_tool(spec, "a") is None and meter.admit_tool(spec, "b") is None
    refused = meter.admit_tool(spec, "c")  # 0.8 reserved + 0.4 > 1.0, though nothing finished
    assert refused is not None and "$0.4" in refused and "$0.8" in refused


def test_the_documented_example_prints_what_it_says(jarvis_home):
    import contextlib
    import io

    doc = (Path(__file__).resolve().parent.parent / "docs" / "engines-agents.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", doc, flags=re.S)
                if "budget={" in b]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "docs/engines-agents.md", "exec"), {"__name__": "doc_budget"})
    expected = [line.split("#")[1].strip() for line in block.splitlines()
                if line.startswith("print(")]
    assert out.getvalue().splitlines() == expected


def test_the_documented_price_table_loads_and_prices(tmp_path):
    import textwrap

    from jarvis.core.config import load_config

    doc = (Path(__file__).resolve().parent.parent / "docs" / "engines-agents.md").read_text()
    (block,) = [b for b in re.findall(r"```toml\n(.*?)```", doc, flags=re.S)
                if "[engine.prices]" in b]
    (tmp_path / "config.toml").write_text(textwrap.dedent(block))
    prices = load_config(tmp_path / "config.toml", use_env=False).engine.prices
    assert find_price(prices, "gpt-4o-mini", "openai").output == 0.6
    assert find_price(prices, "gpt-4.1-mini", "openai").input == 2.0


def test_react_agent_stops_before_an_engine_call_that_would_overrun(jarvis_home, tmp_path):
    from jarvis.testing import ScriptedEngine

    (tmp_path / "config.toml").write_text('[engine.prices]\n"m" = { input = 1000.0, '
                                          'output = 2000.0 }\n')

    def step(request: dict[str, Any]) -> Any:  # a react model that never gives an answer
        n = len(request["messages"])
        return reply(f'Thought: more.\nAction: calculator\nAction Input: {{"expression": '
                     f'"{n} + 1"}}')

    engine = ScriptedEngine(default=step, model="m")
    with Jarvis(config_path=tmp_path / "config.toml", engine=engine, model="m") as j:
        result = j.ask_full("Count", agent="react", tools=["calculator"], max_turns=50,
                            budget={"usd": 1.0}, context=False)
    report = result["budget"]
    assert result["status"] == "incomplete" and result["metadata"]["budget_exceeded"]
    assert report["exhausted"].startswith("the next call of model m is estimated at $")
    assert report["spent"]["usd"] <= 1.0 and report["spent"]["engine_calls"] >= 2
    usage = result["usage"]
    assert report["spent"]["engine_usd"] == pytest.approx(
        (usage["prompt_tokens"] * 1000 + usage["completion_tokens"] * 2000) / 1e6)
    assert len(engine.calls) == report["spent"]["engine_calls"]  # the refused one was not made
    assert all(r["success"] for r in result["tool_results"])


def test_a_parked_run_continues_with_what_its_budget_left(jarvis_home, tmp_path, monkeypatch):
    from approvals_support import Receiver, config_text, workspace

    from jarvis.core.config import load_config

    marked = tmp_path / "marked.txt"

    def model(body: dict[str, Any]) -> Any:  # calculator first, then the gated tool, then done
        told = [m for m in body.get("messages", []) if m.get("role") == "tool"]
        if not told:
            return reply(tool_calls=[tool_call("calculator", {"expression": "1 + 1"})])
        if len(told) == 1:
            return reply(tool_calls=[tool_call("danger", {"path": str(marked), "note": "x"})])
        return f"tool said: {told[-1]['content']}"

    monkeypatch.setenv("OPENAI_API_KEY", "test")
    with FakeOpenAIServer(default=model) as engine, Receiver() as receiver:
        workspace(Path.cwd())
        (Path.cwd() / "config.toml").write_text(config_text(
            engine.base_url, receiver, extra="[memory]\ncontext = false\n"))
        with Jarvis(config=load_config(Path.cwd() / "config.toml")) as j:
            parked = j.ask_full("go", tools=["calculator", "danger"], agent="orchestrator",
                                on_approval="defer", budget={"tool_calls": 1, "seconds": 600})
            assert parked["status"] == "parked", parked
            assert parked["budget"]["spent"]["tool_calls"] == 1
            (pending,) = parked["pending_approvals"]
            done = j.resume(parked["run_id"], {pending["id"]: "approve"})
    # The calculator call used the one tool call: the approved call is refused by the budget.
    assert done["budget"]["limits"] == {"usd": None, "seconds": 600, "tool_calls": 0}
    assert [r["error_type"] for r in done["tool_results"]][-1] == "budget"
    assert not marked.exists()
