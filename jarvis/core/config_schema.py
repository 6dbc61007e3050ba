"""The models config.toml is validated with (pydantic): the single source of truth of what
a valid configuration is. jarvis.core.config finds, reads and loads it (and re-exports these
names); this module is imported only when a configuration is validated in full.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from jarvis.core.approvals_config import ApprovalsConfig
from jarvis.core.config_base import (
    ENV_OVERRIDES,
    PATH_KEYS,
    PATH_SETTING_SUFFIXES,
    KeepRunsMethods,
    RootMethods,
)
from jarvis.core.inbound_config import ConversationsConfig, InboundConfig
from jarvis.errors import ConfigError

_CHANNEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class EngineHosts(_Section):
    ollama: str = "http://localhost:11434"
    vllm: str = "http://localhost:8000"
    llamacpp: str = "http://localhost:8080"
    lmstudio: str = "http://localhost:1234"
    sglang: str = "http://localhost:30000"
    openai: str = "https://api.openai.com/v1"


class ModelPrice(_Section):
    input: float = Field(ge=0, le=1_000_000, allow_inf_nan=False,
                         description="USD per million prompt tokens")
    output: float = Field(ge=0, le=1_000_000, allow_inf_nan=False,
                          description="USD per million completion tokens")


class EngineConfig(_Section):
    default: str = Field("", description="engine backend; empty means discover a local one")
    model: str = Field("", description="model name; empty means the engine's first model")
    temperature: float = 0.7
    max_tokens: int | None = None
    timeout: float = Field(120.0, gt=0, description="seconds per request")
    discovery_timeout: float = Field(0.4, gt=0, description="seconds per probe when discovering")
    max_retries: int = Field(3, ge=0, le=10)
    retry_backoff: float = Field(0.5, ge=0, le=60, description="seconds before the first retry; "
                                 "doubles each time")
    connect_timeout: float = Field(5.0, gt=0, description="seconds to open a connection")
    max_response_bytes: int = Field(64 * 1024 * 1024, ge=1024, description="largest reply "
                                    "accepted, streamed or not; a larger one is an error")
    client: Literal["auto", "openai", "http"] = Field(
        "auto", description="HTTP client: the openai package, or jarvis's built-in one (fast "
        "start-up, cheaper requests); auto: built-in for `jarvis ask`, and for the SDK and "
        "`jarvis serve` with a plain http:// engine URL and no proxy set, else openai")
    hosts: EngineHosts = Field(default_factory=EngineHosts)
    vision: bool | Literal["auto"] = Field(
        "auto", description="whether the model takes images (tool results' images are sent as "
        "image parts, else as text placeholders); auto: known vision models by name")
    vision_models: dict[str, bool] = Field(
        default_factory=dict, description="model names or globs -> true/false; wins over vision")
    prices: dict[str, ModelPrice] = Field(
        default_factory=dict, description="model names or globs -> USD per million input and "
        "output tokens, for budgets and the spend report; local engines cost 0")


class AgentConfig(_Section):
    default: str = Field("", description="agent name; empty: orchestrator with tools, else simple")
    max_turns: int = Field(10, ge=1, le=100)
    tools: list[str] = Field(default_factory=list)
    system: str = ""
    max_repeats: int = Field(2, ge=1, le=20, description="identical tool calls allowed per run "
                             "before the loop guard blocks them")
    max_tool_calls_per_turn: int = Field(32, ge=1, le=10_000, description="tool calls run from "
                                         "one model reply; the rest get a failed result")
    # The default budget of every ask (jarvis.tools.budget); None: no limit.
    budget_usd: float | None = Field(None, gt=0, le=1_000_000, allow_inf_nan=False,
                                     description="USD one ask may spend (engine and tools)")
    budget_seconds: float | None = Field(None, gt=0, le=30 * 24 * 3600, allow_inf_nan=False,
                                         description="seconds one ask may take")
    max_tool_calls: int | None = Field(None, ge=0, le=1_000_000,
                                       description="tool calls one ask may make")


class ToolsConfig(BaseModel):
    """[tools]: which tools exist, executor defaults, and one table per tool for its settings,
    e.g. [tools.file_read] allowed_dirs = ["."]."""

    model_config = ConfigDict(extra="allow")

    enabled: list[str] | None = Field(None, description="tools available; None means all")
    default_timeout: float = Field(30.0, gt=0)
    max_output_chars: int = Field(100_000, gt=0)
    max_abandoned_per_tool: int = Field(8, ge=1, description="timed-out calls of one tool whose "
                                        "threads still run before its calls fail at once")
    max_abandoned_threads: int = Field(64, ge=1, description="the same, for all tools together")

    @property
    def settings(self) -> dict[str, dict[str, Any]]:
        return dict(self.__pydantic_extra__ or {})

    def model_post_init(self, __context: Any) -> None:
        for key, value in (self.__pydantic_extra__ or {}).items():
            if not isinstance(value, dict):
                raise ValueError(f"tools.{key} must be a table of settings for tool {key!r}")


class MemoryConfig(_Section):
    enabled: bool = True
    db_path: str = ""
    context: bool = Field(True, description="put relevant memory into ask's context")
    context_top_k: int = Field(3, ge=1, le=50)
    context_min_match: float = Field(
        0.5, ge=0.0, le=1.0, description="share of the question's key words a passage must "
        "contain to be added as context (0: any match; 1: all of them)")
    chunk_size: int = Field(1000, ge=100, le=100_000)
    chunk_overlap: int = Field(100, ge=0)
    max_file_bytes: int = Field(10_000_000, ge=1, description="`memory index` skips larger files")


class KeepRuns(_Section):
    """How long finished scheduler runs are kept: by age, by count per task, or both."""

    days: float | None = Field(None, gt=0, description="delete finished runs older than this")
    count: int | None = Field(None, ge=1, description="keep this many newest runs per task")

    @model_validator(mode="after")
    def _one_limit(self) -> KeepRuns:
        if self.days is None and self.count is None:
            raise ValueError("give days, count or both, e.g. keep_runs = { days = 30 }")
        return self

    describe = KeepRunsMethods.describe


def _keep_runs(value: Any) -> Any:
    """`keep_runs = 500` (runs per task), `"30d"` (days) or `{ days = 30, count = 500 }`."""
    if isinstance(value, bool):
        raise ValueError("keep_runs is a count (500), a number of days (\"30d\") or a table")
    if isinstance(value, int):
        return {"count": value}
    if isinstance(value, str):
        text = value.strip().lower()
        if text.endswith("d"):
            try:
                return {"days": float(text[:-1])}
            except ValueError:
                pass
        raise ValueError(f"keep_runs {value!r}: write days as \"30d\", or a count as 500")
    return value


class CeleryConfig(_Section):
    """[scheduler.celery]: scheduled runs executed by Celery workers (`runner = "celery"`)."""

    broker: str = Field("", description="broker URL, e.g. redis://localhost:6379/0")
    queue: str = Field("jarvis", description="the Celery queue runs are sent to")
    dispatch_timeout: float = Field(300.0, ge=1, description="a sent run that no worker has "
                                    "started after this many seconds, while nothing waits in "
                                    "the queue, is presumed lost and sent again")
    message_expiry: float = Field(3600.0, ge=1, description="a run's message expires in the "
                                  "broker after this many seconds, and a run still not started "
                                  "then is sent again (the safety net for a lost message)")
    visibility_timeout: float | None = Field(None, gt=0, description="Redis redelivery time "
                                             "of unacknowledged messages; default: above the "
                                             "longest task timeout")
    concurrency: int = Field(2, ge=1, le=256, description="runs one `jarvis worker` executes "
                             "at once (--concurrency wins)")


class SchedulerConfig(_Section):
    db_path: str = ""
    store: str = Field("", description="the scheduler's ledger: empty for the SQLite file at "
                       "db_path, or postgresql://user@host:port/db to share it between machines")
    grace_seconds: float = Field(3600.0, ge=0, description="how late a missed run may still run")
    max_workers: int = Field(2, ge=1, le=64)
    poll_seconds: float = Field(1.0, gt=0, le=60, description="longest sleep; how soon tasks "
                                "added by other processes are noticed")
    lease_seconds: float = Field(60.0, ge=1, description="a claimed run whose daemon stops "
                                 "renewing it for this long is treated as crashed")
    default_timeout: float = Field(600.0, gt=0, description="seconds a run may take by default")
    shutdown_timeout: float = Field(30.0, ge=0, description="seconds running tasks get to "
                                    "finish on SIGINT/SIGTERM")
    shutdown_delivery_seconds: float = Field(10.0, ge=0, description="at shutdown or the end "
                                             "of --once, seconds the channel deliveries of runs "
                                             "recorded then may take; one not done by then is "
                                             "recorded as not sent")
    runner: str = Field("", description="\"celery\" sends runs to Celery workers; else "
                        "module:factory of a TaskRunner; empty runs prompts through the SDK "
                        "like `jarvis ask` on local threads")
    model_max_active_tasks: int = Field(100, ge=0, description="active tasks that models (the "
                                        "schedule_task tool) may have at once")
    model_min_interval_seconds: float = Field(60.0, ge=0, description="shortest time between "
                                              "two runs of a task a model schedules")
    model_max_prompt_chars: int = Field(4_000, ge=1, le=20_000, description="longest prompt of "
                                        "a task a model schedules")
    keep_runs: KeepRuns | None = Field(None, description="retention of finished runs, applied "
                                       "by the daemon: 500 (per task), \"30d\", or "
                                       "{ days = 30, count = 500 }; unset keeps them all")
    celery: CeleryConfig = Field(default_factory=CeleryConfig)
    listen: bool = Field(False, description="`jarvis scheduler start` also runs the enabled "
                         "[inbound.NAME] listeners (as `jarvis listen` does)")

    @field_validator("keep_runs", mode="before")
    @classmethod
    def _parse_keep_runs(cls, value: Any) -> Any:
        return _keep_runs(value)


# A `network` entry's shape (jarvis/sandbox/netproxy.py parses it fully when the server starts).
_NETWORK_ENTRY = re.compile(r"(\*\.)?[A-Za-z0-9_.-]+(:\d{1,5})?|\[[0-9A-Fa-f:.]+\](:\d{1,5})?")


class McpServerConfig(_Section):
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    enabled: bool = True
    timeout: float = Field(30.0, gt=0, description="seconds per call")
    connect_timeout: float = Field(10.0, gt=0)
    include: list[str] | None = Field(None, description="tool names or globs to expose; None: all")
    exclude: list[str] = Field(default_factory=list, description="tool names or globs to hide")
    tool_timeouts: dict[str, float] = Field(default_factory=dict, description="per-tool seconds")
    confirm: list[str] = Field(default_factory=list,
                               description="tool names or globs that require confirmation")
    protocol: str = Field("auto", description="auto: try the 2026 protocol, fall back to the "
                          "initialize handshake; legacy: always the initialize handshake")
    transport: Literal["auto", "http", "sse"] = Field(
        "auto", description="for `url`: http (streamable HTTP), sse (the older HTTP+SSE "
        "transport), auto: sse for a URL ending in /sse, else streamable HTTP with a fall back "
        "to sse when the server does not know it")
    max_timeout: float = Field(300.0, gt=0, description="seconds a call may run while the "
                               "server keeps reporting progress (each report restarts `timeout`); "
                               "never less than the call's timeout")
    sampling: bool = Field(False, description="let the server ask jarvis's engine for "
                           "completions (MCP sampling)")
    roots: bool = Field(True, description="tell the server the workspace folder and the "
                        "folders the file tools may read (MCP roots)")
    elicitation: bool = Field(True, description="let the server ask the user questions on the "
                              "terminal (refused when not interactive)")
    sandbox: bool = Field(True, description="stdio: run the server in the sandbox, seeing only "
                          "its runtime, its package and the paths listed below, no network, an "
                          "environment of only `env` (false: with your full rights)")
    read_only_paths: list[str] = Field(default_factory=list, description="stdio, sandboxed: "
                                       "paths the server may read")
    writable_paths: list[str] = Field(default_factory=list, description="stdio, sandboxed: "
                                      "folders the server may write")
    network: list[str] = Field(default_factory=list, description="stdio, sandboxed: the hosts "
                               "the server may reach, through a proxy in jarvis (`host`: ports "
                               "443 and 80, `host:port`, `*.domain`, an IP address); none: no "
                               "network at all")
    max_message_mb: float = Field(32.0, gt=0, le=1024, description="largest message the "
                                  "server may send, in MB (stdio: a line; HTTP: a JSON body or "
                                  "an SSE event); a larger one is dropped and the call it "
                                  "answers fails saying so")
    trusted: bool = Field(False, description="believe the server's tool annotations "
                          "(readOnlyHint, destructiveHint, openWorldHint); without it every "
                          "tool of the server asks first and counts as sending data out")

    def model_post_init(self, __context: Any) -> None:
        if self.protocol not in ("auto", "legacy"):
            raise ValueError(f"protocol must be 'auto' or 'legacy', got {self.protocol!r}")
        if bool(self.command) == bool(self.url):
            raise ValueError("an MCP server needs exactly one of `command` (stdio) or `url` "
                             "(streamable HTTP)")
        for tool, seconds in self.tool_timeouts.items():
            if seconds <= 0:
                raise ValueError(f"tool_timeouts.{tool} must be a positive number of seconds")
        for host in self.network:
            if not _NETWORK_ENTRY.fullmatch(host.strip()):
                raise ValueError(f"network entry {host!r} is not a host name, `host:port`, "
                                 f"`*.domain` or an IP address (no scheme or path)")
        if self.network and not (self.command and self.sandbox):
            raise ValueError("`network` limits what a sandboxed stdio server (`command`, "
                             "sandbox = true) may reach; without the sandbox a server has your "
                             "whole network")


class McpConfig(_Section):
    servers: dict[str, McpServerConfig] = Field(default_factory=dict)

    def model_post_init(self, __context: Any) -> None:
        from jarvis.core.server_names import check_server_name

        for name in self.servers:
            problem = check_server_name(name)
            if problem:
                raise ValueError(f"mcp.servers.{name}: the server name {problem}")


class EgressConfig(_Section):
    """[egress]: what a run that read untrusted content and holds private data may send out
    without asking a person (docs/trust.md)."""

    allow_hosts: list[str] = Field(default_factory=list, description="hosts such runs may "
                                   "send to: example.com (any port), example.com:8443, "
                                   "*.example.com (its subdomains)")
    allow_channels: list[str] = Field(default_factory=list, description="channels such runs "
                                      "may send to")
    allow_mcp_servers: list[str] = Field(default_factory=list, description="MCP servers such "
                                         "runs may call")
    trusted_tools: list[str] = Field(default_factory=list, description="tools you vouch for "
                                     "(e.g. your own tools/*.py that declare nothing): their "
                                     "results count as neutral, their calls as sending "
                                     "nothing out")
    max_unconfirmed_per_run: int = Field(8, ge=0, le=1000, description="calls such a run may "
                                         "make without asking because they carry only your "
                                         "words or follow a link (the rest ask)")


class WorkspaceConfig(_Section):
    tools_dir: str = "tools"
    agents_dir: str = "agents"


class RunsConfig(_Section):
    enabled: bool = True
    db_path: str = ""


class ServeConfig(_Section):
    """[serve]: defaults for `jarvis serve` (its flags win). The API key is never read from
    the file: pass --api-key or set JARVIS_API_KEY."""

    host: str = "127.0.0.1"
    port: int = Field(8765, ge=0, le=65535)
    env_name: str = Field("jarvis", description="the ORS environment name")
    tools: list[str] | None = Field(None, description="tools exposed over ORS; None: [tools] enabled")
    approve: bool = Field(False, description="run tools that require confirmation")
    max_body_bytes: int = Field(1_048_576, ge=1024)
    max_sessions: int = Field(256, ge=1)
    session_idle_seconds: float = Field(900.0, gt=0)
    allowed_origins: list[str] = Field(default_factory=list, description="browser origins "
                                       "allowed besides the server's own, e.g. "
                                       "\"http://localhost:3000\"; others get 403")
    header_timeout: float = Field(10.0, gt=0, description="seconds a client has to send its "
                                  "request headers; then 408 and the connection is closed")
    body_timeout: float = Field(30.0, gt=0, description="seconds a client has to send its "
                                "request body; then 408")
    max_connections: int = Field(512, ge=1, description="open connections at most; more are "
                                 "answered 503 at once")
    send_timeout: float = Field(30.0, gt=0, description="seconds an answer may wait on a "
                                "client that does not read it; then the connection is closed")


class ChannelConfig(_Section):
    """[channels.NAME]: a notification channel (an Apprise URL)."""

    url: str = Field(description="any Apprise URL (tgram://, mailto://, ntfy://, json://, ...); "
                     "${ENV} is replaced from the environment")
    confirm: bool = Field(True, description="channel_send asks a person before sending")
    title: str = Field("", description="default title when a message has none")
    description: str = ""
    retries: int = Field(3, ge=0, le=9, description="scheduled deliveries: retries after a "
                         "failed send")
    retry_backoff: float = Field(2.0, ge=0, le=300, description="seconds before the first "
                                 "retry; doubles each time")

    def model_post_init(self, __context: Any) -> None:
        if "://" not in self.url:
            raise ValueError(f"url must be an Apprise URL such as ntfy://host/topic, got "
                             f"{self.url[:40]!r}")


class SandboxConfig(_Section):
    """[sandbox]: where `repl` and `code_interpreter` run model-written code (see
    jarvis.sandbox and docs/serve.md). Limits here are the defaults; [tools.repl] and
    [tools.code_interpreter] may override timeout, cpu_seconds, memory_mb, ...."""

    isolation: Literal["auto", "bwrap", "namespaces", "none"] = Field(
        "auto", description="auto: the strongest this host supports (bwrap, then namespaces), "
        "refusing to run code when neither works; none: no isolation (opt-out)")
    network: bool = Field(False, description="give sandboxed code the host network")
    read_only_paths: list[str] = Field(default_factory=list,
                                       description="extra paths visible read-only")
    writable_paths: list[str] = Field(default_factory=list,
                                      description="extra folders visible read-write")
    site_packages: bool = Field(True, description="installed libraries importable (read-only)")
    timeout: float = Field(30.0, gt=0, description="wall-clock seconds per call")
    cpu_seconds: int = Field(10, gt=0, description="CPU seconds per call, all threads")
    session_cpu_seconds: int = Field(600, gt=0, description="CPU seconds per interpreter")
    memory_mb: int = Field(512, gt=0)
    max_output_chars: int = Field(20_000, gt=0)
    max_file_mb: int = Field(50, gt=0)
    max_open_files: int = Field(256, ge=16)
    tmp_mb: int = Field(64, gt=0, description="size of the private work folder (/tmp)")
    max_threads: int = Field(64, ge=8, description="threads and processes of one sandbox "
                             "together (RLIMIT_NPROC)")
    uid: int = Field(65534, gt=0, description="host uid/gid the sandbox runs as when jarvis "
                     "runs as root (the kernel does not bound root's threads)")


class JarvisConfig(RootMethods, _Section):
    engine: EngineConfig = Field(default_factory=EngineConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    mcp: McpConfig = Field(default_factory=McpConfig)
    workspace: WorkspaceConfig = Field(default_factory=WorkspaceConfig)
    runs: RunsConfig = Field(default_factory=RunsConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)
    channels: dict[str, ChannelConfig] = Field(default_factory=dict)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    egress: EgressConfig = Field(default_factory=EgressConfig)
    conversations: ConversationsConfig = Field(default_factory=ConversationsConfig)
    inbound: dict[str, InboundConfig] = Field(default_factory=dict)
    approvals: ApprovalsConfig = Field(default_factory=ApprovalsConfig)

    # Not part of the file: where it came from, for relative paths and `config show`.
    _source: Path | None = None

    # dotted key -> where its value came from: the file's path, an env var name, "override"
    _provenance: dict[str, str] = PrivateAttr(default_factory=dict)

    def model_post_init(self, __context: Any) -> None:
        for name in self.channels:
            if not _CHANNEL_NAME.match(name):
                raise ValueError(f"channels.{name}: a channel name is 1-64 letters, digits, "
                                 f"'_' or '-'")
        for name in self.inbound:
            if not _CHANNEL_NAME.match(name):
                raise ValueError(f"inbound.{name}: an inbound name is 1-64 letters, digits, "
                                 f"'_' or '-'")



def _valid_keys(loc: tuple[Any, ...]) -> list[str] | None:
    """The keys the table at `loc[:-1]` accepts (None when that is not a fixed model)."""
    from typing import get_args, get_origin

    model: type[BaseModel] = JarvisConfig
    parts = list(loc[:-1])
    i = 0
    while i < len(parts):
        info = model.model_fields.get(str(parts[i]))
        if info is None:
            return None
        annotation = info.annotation
        if get_origin(annotation) is dict:
            annotation = get_args(annotation)[1]
            i += 1  # skip the user's table name, e.g. mcp.servers.<name>
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
        i += 1
    return list(model.model_fields)


def _format_error(exc: ValidationError, where: str,
                  provenance: dict[str, str] | None = None) -> str:
    problems = []
    for err in exc.errors()[:5]:
        loc = tuple(err.get("loc", ()))
        key = ".".join(str(p) for p in loc)
        if err.get("type") == "extra_forbidden":
            valid = _valid_keys(loc)
            table = ".".join(str(p) for p in loc[:-1])
            msg = "unknown key" + (f"; valid keys in [{table}]: {', '.join(valid)}"
                                   if valid and table else
                                   f"; valid tables: {', '.join(valid)}" if valid else "")
        else:
            msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        origin = (provenance or {}).get(key, "")
        if origin in ENV_OVERRIDES:
            key = f"{key} (from environment variable {origin})"
        elif origin == "override":
            key = f"{key} (from an override)"
        problems.append(f"{key}: {msg}")
    return f"invalid config in {where}: " + "; ".join(problems)


def _resolve_file_paths(config: JarvisConfig) -> None:
    """Make paths given in the config file absolute, relative to the file's folder; state
    paths from environment variables are relative to the current folder, as in a shell."""
    for dotted in PATH_KEYS:
        section, _, key = dotted.partition(".")
        value = getattr(getattr(config, section, None), key, None)
        if isinstance(value, str) and value and config.source_of(dotted) in ENV_OVERRIDES:
            setattr(getattr(config, section), key, str(Path(value).expanduser().absolute()))
    if config.source is None:
        return
    file_origin = str(config.source)
    for tool_name, table in config.tools.settings.items():
        for key, value in list(table.items()):
            if not key.endswith(PATH_SETTING_SUFFIXES):
                continue
            if config.source_of(f"tools.{tool_name}.{key}") != file_origin:
                continue
            if isinstance(value, str) and value:
                table[key] = str(config.resolve_path(value))
            elif isinstance(value, list):
                table[key] = [str(config.resolve_path(v)) if isinstance(v, str) and v else v
                              for v in value]
    for dotted in PATH_KEYS:
        section, _, key = dotted.partition(".")
        value = getattr(getattr(config, section, None), key, None)
        if isinstance(value, str) and value and config.source_of(dotted) == file_origin:
            setattr(getattr(config, section), key, str(config.resolve_path(value)))
    for key in ("read_only_paths", "writable_paths"):
        if config.source_of(f"sandbox.{key}") == file_origin:
            setattr(config.sandbox, key,
                    [str(config.resolve_path(v)) for v in getattr(config.sandbox, key)])
    for name, server in config.mcp.servers.items():
        if server.cwd and config.source_of(f"mcp.servers.{name}.cwd") == file_origin:
            server.cwd = str(config.resolve_path(server.cwd))


def validate_config(data: dict[str, Any], provenance: dict[str, str],
                    source: Path | None) -> JarvisConfig:
    """Validate the merged file, environment and override values in full (pydantic)."""
    where = str(source) if source else "defaults and environment"
    try:
        config = JarvisConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_error(exc, where, provenance)) from None
    except ValueError as exc:
        raise ConfigError(f"invalid config in {where}: {exc}") from None
    config._source = source
    config._provenance = provenance
    _resolve_file_paths(config)
    return config
