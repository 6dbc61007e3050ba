"""EnvClient: an environment served by `jarvis serve` (its ORS routes), driven over HTTP.

    with EnvClient("http://127.0.0.1:8765") as env:     # your owner token; api_key=... for a key
        obs = env.reset()                                # a new ORS session = a new episode
        obs = env.step(ToolCallAction(tool_name="calculator",
                                      parameters={"expression": "6*7"}))
        print(obs.text, env.state.step_count)

Each episode is one ORS session, so the server's run-scoped resources (one `repl` per
session) live for one episode; `reset()` ends the previous session and `close()` the last.
Every step runs through the server's ToolExecutor. A failed tool call (bad arguments, an
unknown tool, a timeout) is an Observation with `error_type` in its metadata, as it is
locally; a server that cannot be reached or answers outside the protocol is an EnvError.
"""

from __future__ import annotations

import json
from typing import Any

from jarvis.core.types import ImageBlock, TextBlock, ToolCallAction, block_from_dict
from jarvis.env.types import (
    CallToolObservation,
    EnvError,
    ListToolsAction,
    ListToolsObservation,
    Observation,
    State,
    ToolDefinition,
    ToolError,
    tool_call_of,
)
from jarvis.errors import UserError

MAX_RESPONSE_BYTES = 32 * 1024 * 1024


def _on_this_machine(url: str) -> bool:
    """Whether `url` names a loopback address (127.x, ::1, localhost): the only servers the
    owner token is sent to."""
    import ipaddress
    from urllib.parse import urlsplit

    try:
        host = (urlsplit(url).hostname or "").rstrip(".").lower()
    except ValueError:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _sse_events(lines: Any, limit: int = MAX_RESPONSE_BYTES) -> list[tuple[str, str]]:
    """(event, data) pairs of a server-sent-event stream, read up to `limit` bytes."""
    events: list[tuple[str, str]] = []
    kind, data, seen = "message", [], 0
    for line in lines:
        seen += len(line) + 1
        if seen > limit:
            raise EnvError(f"the server's answer is larger than {limit} bytes")
        if not line:
            if data:
                events.append((kind, "\n".join(data)))
            kind, data = "message", []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:][1:] if line[5:6] == " " else line[5:])
    if data:
        events.append((kind, "\n".join(data)))
    return events


class EnvClient:
    """A remote environment: `jarvis serve`'s ORS environment `env_name` at `url`.

    Args:
        url: the server, e.g. http://127.0.0.1:8765.
        env_name: the ORS environment (`jarvis serve --env-name`, default "jarvis").
        api_key: the server's key, when it has one. None, for a server on this machine
            (a loopback URL): your owner token ($JARVIS_HOME/serve.token), which a keyless
            `jarvis serve` requires; it is never sent anywhere else.
        task_spec: what each episode is created with (e.g. {"tools": ["repl"]} to narrow it).
        timeout: seconds one request may take (a tool call included).
    """

    def __init__(self, url: str, *, env_name: str = "jarvis", api_key: str | None = None,
                 task_spec: dict[str, Any] | None = None, timeout: float = 120.0) -> None:
        import httpx

        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise UserError(f"EnvClient needs the server's http(s):// URL, not {url!r}")
        if api_key is None and _on_this_machine(url):
            from jarvis.security.owner_token import owner_token

            api_key = owner_token(create=False)  # a keyless jarvis serve answers only its owner
        headers = {"X-API-Key": api_key} if api_key else {}
        self.url = url.rstrip("/")
        self.env_name = env_name
        self.task_spec = dict(task_spec or {})
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)
        self._state: State | None = None

    # --- HTTP -------------------------------------------------------------------------------
    def _request(self, method: str, path: str, body: Any = None, sid: str | None = None
                 ) -> tuple[int, list[tuple[str, str]] | Any]:
        import httpx

        headers = {"X-Session-ID": sid} if sid else {}
        try:
            with self._http.stream(method, path, json=body, headers=headers) as response:
                if response.headers.get("content-type", "").startswith("text/event-stream"):
                    return response.status_code, _sse_events(response.iter_lines())
                raw = b""
                for chunk in response.iter_bytes():
                    raw += chunk
                    if len(raw) > MAX_RESPONSE_BYTES:
                        raise EnvError(f"the server's answer to {path} is larger than "
                                       f"{MAX_RESPONSE_BYTES} bytes")
                status = response.status_code
        except httpx.HTTPError as exc:
            raise EnvError(f"cannot reach the environment at {self.url}: {exc}") from None
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            raise EnvError(f"{self.url}{path} answered HTTP {status} with something that is not "
                           f"JSON") from None
        return status, data

    def _json(self, method: str, path: str, body: Any = None, sid: str | None = None) -> Any:
        status, data = self._request(method, path, body, sid)
        if status >= 400 or isinstance(data, list) and data and isinstance(data[0], tuple):
            detail = data.get("error", data) if isinstance(data, dict) else data
            if isinstance(detail, dict):
                detail = detail.get("message", detail)
            raise EnvError(f"{self.url}{path}: HTTP {status}: {detail}")
        return data

    # --- the environment --------------------------------------------------------------------
    @property
    def state(self) -> State:
        if self._state is None:
            raise UserError("no episode yet: call reset() first")
        return self._state

    def actions(self) -> list[ToolDefinition]:
        """The environment's tools (GET /{env}/tools)."""
        data = self._json("GET", f"/{self.env_name}/tools")
        return [ToolDefinition.from_json_schema(t) for t in (data or {}).get("tools", [])]

    def tools(self) -> list[ToolDefinition]:
        return self.actions()

    def reset(self, task_spec: dict[str, Any] | None = None) -> Observation:
        """End the current session and start a new one; its prompt is the observation."""
        self._end_session()
        status, events = self._request("POST", "/create_session")
        sid = next((data for kind, data in events if kind == "task_id"), None) \
            if isinstance(events, list) else None
        if status >= 400 or not sid:
            raise EnvError(f"{self.url}/create_session: HTTP {status}: no session id")
        self._json("POST", "/create", {"task_spec": dict(task_spec or self.task_spec)}, sid=sid)
        self._state = State(episode_id=sid)
        prompt = self._json("GET", f"/{self.env_name}/prompt", sid=sid) or []
        return Observation(blocks=[block_from_dict(b) for b in prompt if isinstance(b, dict)],
                           metadata={"episode_id": sid})

    def step(self, action: Any) -> Observation:
        """One tool call in the current session (POST /{env}/call)."""
        if isinstance(action, ListToolsAction):
            return ListToolsObservation(tools=[d.to_json_schema() for d in self.actions()])
        call, mcp = tool_call_of(action, "EnvClient")
        state = self.state
        status, answer = self._request("POST", f"/{self.env_name}/call",
                                       {"name": call.tool_name, "input": call.parameters},
                                       sid=state.episode_id)
        state.step_count += 1
        if status >= 400:  # the call never ran: an unknown tool, a body the server refused
            message = answer.get("error", answer) if isinstance(answer, dict) else answer
            if isinstance(message, dict):
                message = message.get("message", message)
            kind = "tool_not_found" if status == 404 else "invalid_args"
            return self._failed(call, mcp, kind, f"HTTP {status}: {message}")
        payload = next((data for kind, data in answer if kind == "end"), None) \
            if isinstance(answer, list) else None
        chunks = "".join(data for kind, data in answer if kind == "chunk") \
            if isinstance(answer, list) else ""
        errors = [data for kind, data in answer if kind == "error"] \
            if isinstance(answer, list) else []
        if errors or payload is None:
            raise EnvError(f"the environment did not answer the call to {call.tool_name!r}: "
                           f"{errors[0] if errors else 'no end event'}")
        try:
            output = json.loads(chunks + payload)["output"]
        except (ValueError, KeyError, TypeError):
            raise EnvError(f"the answer to the call to {call.tool_name!r} is not a ToolOutput"
                           ) from None
        blocks = [block_from_dict(b) for b in output.get("blocks") or [] if isinstance(b, dict)]
        metadata = dict(output.get("metadata") or {})
        done, reward = bool(output.get("finished")), output.get("reward")
        if metadata.get("error_type"):
            text = "\n".join(b.text for b in blocks if isinstance(b, TextBlock))
            return self._failed(call, mcp, str(metadata["error_type"]), text, metadata)
        if mcp:
            return CallToolObservation(tool_name=call.tool_name, result=output, done=done,
                                       reward=reward, metadata=metadata, blocks=blocks)
        return Observation(done=done, reward=reward, metadata=metadata, blocks=blocks)

    @staticmethod
    def _failed(call: ToolCallAction, mcp: bool, kind: str, message: str,
                metadata: dict[str, Any] | None = None) -> Observation:
        meta = dict(metadata or {})
        meta.update(error_type=kind, error=message, tool_name=call.tool_name)
        blocks: list[TextBlock | ImageBlock] = [TextBlock(f"ERROR ({kind}): {message}")]
        if mcp:
            return CallToolObservation(tool_name=call.tool_name, metadata=meta, blocks=blocks,
                                       error=ToolError(error_type=kind, message=message))
        return Observation(metadata=meta, blocks=blocks)

    def _end_session(self) -> None:
        if self._state is not None and self._state.episode_id:
            try:
                self._request("POST", "/delete", sid=self._state.episode_id)
            except EnvError:
                pass  # the server is gone: so is the session
        self._state = None

    def close(self) -> None:
        """End the session (its resources are released on the server) and the connection."""
        self._end_session()
        self._http.close()

    def __enter__(self) -> EnvClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
