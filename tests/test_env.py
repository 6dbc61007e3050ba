"""Environments (issue 26, item 2): the two examples of OpenEnv RFC 004 run as written (only
`core.env_server` / `core.tools` renamed to `jarvis.env`), ToolEnvironment's episodes, the MCP
form, ToolDefinition <-> ToolSpec, and EnvClient against a real `jarvis serve` process."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from jarvis.core.events import EventBus, EventType
from jarvis.env import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
    Observation,
    ToolCallAction,
    ToolDefinition,
    ToolParameter,
)

# Names the examples use without importing them (the RFC shows only the classes).
PREAMBLE = """
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import chess

from jarvis.env import Action, Observation, State, ToolDefinition, ToolParameter, action


@dataclass(kw_only=True)
class CodeState(State):
    pass


@dataclass(kw_only=True)
class CodeObservation(Observation):
    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0


@dataclass(kw_only=True)
class GameState(State):
    pass


@dataclass(kw_only=True)
class ChessObservation(Observation):
    fen: Optional[str] = None
    legal_moves: list = field(default_factory=list)
    valid_move: Optional[bool] = None
"""

# RFC 004, Example 1, as written.
EXAMPLE_CODE_ACT = '''
from jarvis.env import Environment, Observation, State, ToolCallAction
from jarvis.env import PyExecutor

class PythonCodeActEnv(Environment):
    """Environment for executing Python code via tool calls."""

    def __init__(self):
        self._executor = PyExecutor()
        self._state = CodeState()

    @action("execute_code", "Execute Python code and return stdout, stderr, and exit code")
    def execute_code(self, code: str) -> Dict[str, Any]:
        """Execute Python code.

        Args:
            code: Python code to execute

        Returns:
            Dict with stdout, stderr, and exit_code keys
        """
        result = self._executor.run(code)
        return {
            "stdout": result.stdout,
            "stderr": result.stderr,
            "exit_code": result.exit_code,
        }

    def reset(self) -> Observation:
        self._state = CodeState(episode_id=str(uuid.uuid4()))
        return CodeObservation(stdout="", stderr="", exit_code=0)

    def step(self, action: Action) -> Observation:
        if not isinstance(action, ToolCallAction):
            raise ValueError(f"Expected ToolCallAction, got {type(action)}")

        # Dispatch to action method
        if action.tool_name == "execute_code":
            result = self.execute_code(**action.parameters)
            reward = 1 if result["exit_code"] == 0 else -1
            self._state.step_count += 1
            return CodeObservation(reward=reward, **result)
        else:
            raise ValueError(f"Unknown action: {action.tool_name}")

    @property
    def state(self) -> State:
        return self._state
'''

# RFC 004, Example 2, as written.
EXAMPLE_CHESS = '''
from jarvis.env import Environment, Observation, State, ToolCallAction

class ChessEnv(Environment):
    """Chess environment - actions are game moves, not tools."""

    def __init__(self):
        self._board = chess.Board()
        self._state = GameState()

    @action("move_piece", "Move a chess piece from one square to another")
    def move_piece(self, from_square: str, to_square: str) -> Dict[str, Any]:
        """Move a chess piece.

        Args:
            from_square: Starting square (e.g., "e2")
            to_square: Destination square (e.g., "e4")

        Returns:
            Dict with move validity and game state
        """
        move = chess.Move.from_uci(f"{from_square}{to_square}")
        if move in self._board.legal_moves:
            self._board.push(move)
            return {
                "valid": True,
                "game_over": self._board.is_game_over(),
                "fen": self._board.fen(),
            }
        return {"valid": False, "error": "Illegal move"}

    def reset(self) -> Observation:
        self._board = chess.Board()
        self._state = GameState(episode_id=str(uuid.uuid4()))
        return ChessObservation(fen=self._board.fen(), legal_moves=list(self._board.legal_moves))

    def step(self, action: Action) -> Observation:
        if not isinstance(action, ToolCallAction):
            raise ValueError(f"Expected ToolCallAction, got {type(action)}")

        # Dispatch to action method
        if action.tool_name == "move_piece":
            result = self.move_piece(**action.parameters)
            reward = 1 if result.get("valid") else -1
            done = result.get("game_over", False)
            self._state.step_count += 1
            return ChessObservation(
                reward=reward,
                done=done,
                fen=result.get("fen"),
                valid_move=result.get("valid"),
            )
        else:
            raise ValueError(f"Unknown action: {action.tool_name}")

    @property
    def state(self) -> State:
        return self._state

    def actions(self) -> List[ToolDefinition]:
        """Return available actions (game moves, not tools)."""
        return [
            ToolDefinition(
                name="move_piece",
                description="Move a chess piece from one square to another",
                parameters=[
                    ToolParameter(name="from_square", type="string", description="Starting square (e.g., 'e2')"),
                    ToolParameter(name="to_square", type="string", description="Destination square (e.g., 'e4')"),
                ],
            )
        ]
'''


def load(example: str) -> dict[str, Any]:
    """Run an example in a module of its own (dataclasses look their module up)."""
    import types

    module = types.ModuleType("rfc_example")
    sys.modules["rfc_example"] = module
    try:
        exec(compile(PREAMBLE + example, "<rfc example>", "exec"), module.__dict__)
    finally:
        del sys.modules["rfc_example"]
    return module.__dict__


def call(name: str, **parameters: Any) -> ToolCallAction:
    return ToolCallAction(tool_name=name, parameters=parameters)


# --- RFC example 1: a Python code-act environment -------------------------------------------------
def test_the_code_act_example_runs_code_in_the_sandbox_through_an_executor():
    ns = load(EXAMPLE_CODE_ACT)
    env = ns["PythonCodeActEnv"]()
    env.bus = EventBus(record_history=True)
    try:
        first = env.reset()
        assert (first.stdout, first.exit_code) == ("", 0) and env.state.episode_id
        obs = env.step(call("execute_code", code="x = 6 * 7\nprint(x)"))
        assert type(obs).__name__ == "CodeObservation"
        assert (obs.stdout, obs.exit_code, obs.reward) == ("42\n", 0, 1)
        obs = env.step(call("execute_code", code="x + 1"))  # the interpreter keeps state
        assert obs.stdout.strip() == "43"
        obs = env.step(call("execute_code", code="1/0"))
        assert obs.exit_code == 1 and obs.reward == -1 and "ZeroDivisionError" in obs.stderr
        assert env.state.step_count == 3
        # Every step went through a ToolExecutor: its events name the action.
        # (An action declares nothing, so its result also marks the run untrusted: one
        # TRUST_CHANGED event, not a tool event.)
        kinds = [(e.type, e.data["tool_name"]) for e in env.bus.history
                 if e.type in (EventType.TOOL_CALL_START, EventType.TOOL_CALL_END)]
        assert kinds == [(EventType.TOOL_CALL_START, "execute_code"),
                         (EventType.TOOL_CALL_END, "execute_code")] * 3
        (definition,) = env.actions()
        assert definition.to_json_schema() == {
            "name": "execute_code",
            "description": "Execute Python code and return stdout, stderr, and exit code",
            "input_schema": {"type": "object", "additionalProperties": False,
                             "properties": {"code": {"type": "string",
                                                     "description": "Python code to execute"}},
                             "required": ["code"]}}
    finally:
        env._executor.close()


def test_model_mistakes_in_a_step_come_back_as_failed_observations():
    ns = load(EXAMPLE_CODE_ACT)
    env = ns["PythonCodeActEnv"]()
    try:
        env.reset()
        unknown = env.step(call("execute_python", code="1"))
        assert unknown.metadata["error_type"] == "tool_not_found"
        assert "execute_code" in unknown.text and unknown.reward is None
        typo = env.step(call("execute_code", cod="1"))
        assert typo.metadata["error_type"] == "invalid_args"
        assert "did you mean 'code'" in typo.text
        wrong = env.step(call("execute_code", code=5))
        assert wrong.metadata["error_type"] == "invalid_args"
        assert env.state.step_count == 0  # none of them reached the environment's step
        with pytest.raises(Exception, match="takes a ToolCallAction"):
            env.step({"tool_name": "execute_code"})
    finally:
        env._executor.close()


# --- RFC example 2: a chess environment (actions that are no tools) -------------------------------
def test_the_chess_example_plays_moves_as_actions():
    ns = load(EXAMPLE_CHESS)
    env = ns["ChessEnv"]()
    first = env.reset()
    assert first.fen.startswith("rnbqkbnr/pppppppp") and len(first.legal_moves) == 20
    obs = env.step(call("move_piece", from_square="e2", to_square="e4"))
    assert (obs.valid_move, obs.reward, obs.done) == (True, 1, False) and " b " in obs.fen
    illegal = env.step(call("move_piece", from_square="e7", to_square="e3"))
    assert (illegal.valid_move, illegal.reward) == (False, -1)
    # python-chess raises on a square that does not exist: a failed observation, not a crash.
    broken = env.step(call("move_piece", from_square="z9", to_square="e4"))
    assert broken.metadata["error_type"] == "execution" and "InvalidMoveError" in broken.text
    missing = env.step(call("move_piece", from_square="e7"))
    assert missing.metadata["error_type"] == "invalid_args" and "to_square" in missing.text
    env.reset()
    for frm, to in (("f2", "f3"), ("e7", "e5"), ("g2", "g4"), ("d8", "h4")):
        obs = env.step(call("move_piece", from_square=frm, to_square=to))
    assert obs.done is True and obs.valid_move is True  # fool's mate
    assert env.state.step_count == 4
    (definition,) = env.actions()
    assert definition.to_json_schema() == {
        "name": "move_piece", "description": "Move a chess piece from one square to another",
        "input_schema": {"type": "object", "properties": {
            "from_square": {"type": "string", "description": "Starting square (e.g., 'e2')"},
            "to_square": {"type": "string", "description": "Destination square (e.g., 'e4')"}},
            "required": ["from_square", "to_square"]}}


def test_the_mcp_form_lists_and_calls_actions():
    ns = load(EXAMPLE_CHESS)
    env = ns["ChessEnv"]()
    listed = env.step(ListToolsAction())  # no reset needed
    assert isinstance(listed, ListToolsObservation)
    assert [t["name"] for t in listed.tools] == ["move_piece"]
    env.reset()
    obs = env.step(CallToolAction(tool_name="move_piece",
                                  arguments={"from_square": "g1", "to_square": "f3"}))
    assert isinstance(obs, CallToolObservation) and obs.error is None
    assert obs.result.valid_move is True and obs.reward == 1
    bad = env.step(CallToolAction(tool_name="castle", arguments={}))
    assert bad.result is None and bad.error.error_type == "tool_not_found"


# --- @action, the default step, timeouts ------------------------------------------------------------
def test_action_methods_need_no_step_of_their_own_and_steps_are_timed_out():
    import threading

    from jarvis.env import Environment, State, action

    release = threading.Event()

    class Counter(Environment):
        step_timeout = 0.5

        def __init__(self) -> None:
            self._state = State()
            self.total = 0

        def reset(self) -> Observation:
            self._state = State(episode_id="e1")
            self.total = 0
            return Observation()

        @property
        def state(self) -> State:
            return self._state

        @action
        def add(self, amount: int) -> dict:
            """Add to the total.

            Args:
                amount: how much to add.
            """
            self.total += amount
            return {"total": self.total}

        @action("stall", "Wait for a long time.")
        def stall(self) -> str:
            release.wait(10)
            return "late"

    env = Counter()
    env.reset()
    obs = env.step(call("add", amount=2))
    assert obs.metadata["result"] == {"total": 2} and obs.text == '{"total": 2}'
    assert env.state.step_count == 1
    assert env.step(call("add", amount="2")).metadata["error_type"] == "invalid_args"
    slow = env.step(call("stall"))
    release.set()
    assert slow.metadata["error_type"] == "timeout"
    assert [d.name for d in env.tools()] == ["add", "stall"]
    assert env.actions()[0].parameters[0].description == "how much to add."

    with pytest.raises(Exception, match="cannot be named 'reset'"):
        class Bad(Counter):
            @action("reset")
            def again(self) -> str:
                """Reset in disguise."""
                return ""

        Bad().actions()


# --- ToolDefinition <-> ToolSpec ----------------------------------------------------------------------
def test_tool_definitions_convert_to_and_from_tool_specs():
    from jarvis.tools.calculator import CalculatorTool

    spec = CalculatorTool().spec
    definition = ToolDefinition.from_spec(spec)
    assert definition.to_json_schema() == spec.to_anthropic_tool()
    assert definition.parameters[0].name == "expression" and definition.parameters[0].required
    back = definition.to_spec(category="math")
    assert back.input_schema() == spec.input_schema() and back.category == "math"
    plain = ToolDefinition("go", "Go somewhere.", [
        ToolParameter("where", "string", "Where to."),
        ToolParameter("speed", "number", "How fast.", required=False, default=1.0)])
    assert plain.to_json_schema()["input_schema"] == {
        "type": "object", "required": ["where"],
        "properties": {"where": {"type": "string", "description": "Where to."},
                       "speed": {"type": "number", "description": "How fast.", "default": 1.0}}}
    assert ToolDefinition.from_spec(plain.to_spec()).to_json_schema() == plain.to_json_schema()


# --- ToolEnvironment: one run per episode -----------------------------------------------------------
def _leases(run_id: str) -> int:
    from jarvis.resources import default_manager

    manager = default_manager()
    with manager._lock:
        return sum(1 for owner, _ in manager._leases if owner == run_id)


def test_tool_environment_gives_each_episode_its_own_repl():
    from jarvis.env import ToolEnvironment

    env = ToolEnvironment(tools=["calculator", "repl"], approved_tools=["repl"])
    other = ToolEnvironment(tools=["repl"], approved_tools=["repl"])
    try:
        first = env.reset()
        assert first.metadata["tools"] == ["calculator", "repl"]
        episode = env.state.episode_id
        assert env.step(call("repl", code="x = 6 * 7")).metadata["success"] is True
        assert env.step(call("repl", code="x")).text.strip() == "42"
        assert _leases(episode) == 1
        other.reset()
        assert "NameError" in other.step(call("repl", code="x")).text  # another interpreter
        env.reset()
        assert _leases(episode) == 0  # the old episode's interpreter was released
        again = env.step(call("repl", code="x"))
        assert again.metadata["error_type"] == "execution" and "NameError" in again.text
        assert env.step(call("calculator", expression="2**10")).text == "1024"
        assert env.state.step_count == 2
        assert [d.name for d in env.actions()] == ["calculator", "repl"]
    finally:
        env.close()
        other.close()
    assert _leases(episode) == 0


def test_tool_environment_rewards_done_denials_and_the_mcp_form():
    from jarvis import tool
    from jarvis.env import ToolEnvironment

    @tool(register=False)
    def submit(answer: int) -> dict:
        """Submit an answer.

        Args:
            answer: the answer.
        """
        return {"observation": "right" if answer == 42 else "wrong",
                "reward": 1.0 if answer == 42 else 0.0, "finished": answer == 42}

    env = ToolEnvironment(tools=[submit, "repl"], max_steps=3)
    with pytest.raises(Exception, match="call reset"):
        env.step(call("submit", answer=1))
    env.reset()
    wrong = env.step(call("submit", answer=1))
    assert (wrong.reward, wrong.done, wrong.text) == (0.0, False, "wrong")
    denied = env.step(call("repl", code="1"))  # requires confirmation; nobody approved it
    assert denied.metadata["error_type"] == "denied" and not denied.done
    right = env.step(CallToolAction(tool_name="submit", arguments={"answer": 42}))
    assert isinstance(right, CallToolObservation) and right.done and right.reward == 1.0
    assert right.result["blocks"][0]["text"] == "right" and right.error is None
    env.reset()
    for _ in range(3):
        last = env.step(call("submit", answer=0))
    assert last.done  # max_steps
    listed = env.step(ListToolsAction())
    assert [t["name"] for t in listed.tools] == ["submit", "repl"]
    env.close()


# --- EnvClient: a real `jarvis serve` ---------------------------------------------------------------
@pytest.fixture
def served(cli_env, tmp_path):
    from logged_process import LoggedProcess

    proc = subprocess.Popen([sys.executable, "-m", "jarvis.cli", "serve", "--port", "0",
                             "--tools", "calculator,think,repl", "--yes"],
                            env=cli_env, cwd=tmp_path, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    server = LoggedProcess(proc, "jarvis serve")
    try:
        line = server.wait_for_line("listening on")
        yield line.rsplit(" ", 1)[-1]
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        server.close_streams()


def test_env_client_drives_jarvis_serve_episodes(served):
    from jarvis.env import EnvClient, EnvError

    with EnvClient(served) as env:
        assert [d.name for d in env.actions()] == ["calculator", "think", "repl"]
        first = env.reset()
        assert "calculator" in first.text and env.state.step_count == 0
        episode = env.state.episode_id
        obs = env.step(call("calculator", expression="6*7"))
        assert obs.text == "42" and not obs.done and obs.metadata.get("error_type") is None
        env.step(call("repl", code="x = 41"))
        assert env.step(call("repl", code="x + 1")).text.strip() == "42"
        bad = env.step(call("calculator", expression="9**9**9"))
        assert bad.metadata["error_type"] == "execution" and "too large" in bad.text
        unknown = env.step(call("nope"))
        assert unknown.metadata["error_type"] == "tool_not_found"
        mcp = env.step(CallToolAction(tool_name="think", arguments={"thought": "hm"}))
        assert isinstance(mcp, CallToolObservation) and mcp.result["blocks"][0]["text"] == "hm"
        assert env.state.step_count == 6
        env.reset()
        assert env.state.episode_id != episode
        assert "NameError" in env.step(call("repl", code="x")).text  # a new session, a new repl
        narrowed = env.reset({"tools": ["think"]})
        assert "think" in narrowed.text and "calculator" not in narrowed.text
    with pytest.raises(EnvError, match="cannot reach"):
        EnvClient("http://127.0.0.1:9").actions()
    with pytest.raises(Exception, match="http"):
        EnvClient("localhost:8765")
