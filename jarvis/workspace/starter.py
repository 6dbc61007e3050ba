"""The starter workspace `jarvis init` writes (the repository's own config.toml is this text).

Commented `# key = value` lines show each default; uncomment one to change it. A test
uncomments them all and checks they are valid keys holding the real defaults, so this text
cannot drift from jarvis.core.config.
"""

STARTER_CONFIG = """\
# jarvis workspace configuration.
#
# jarvis looks for its config in this order: --config PATH (or $JARVIS_CONFIG),
# ./config.toml, then $JARVIS_HOME/config.toml. Every key is optional: a commented line
# shows the default; uncomment it to change it. Relative paths are relative to this file's
# folder. `jarvis config show` prints the effective values and where each came from.

[engine]
# Backend: ollama | vllm | llamacpp | lmstudio | sglang | openai.
# Empty: use the first local engine that answers. Env: JARVIS_ENGINE.
# default = ""
# Model name; empty: the engine's first listed model. Env: JARVIS_MODEL.
# model = ""
# temperature = 0.7
# Seconds a whole request may take (first byte, every gap, the total), to open a
# connection, and per probe when discovering an engine.
# timeout = 120.0
# connect_timeout = 5.0
# discovery_timeout = 0.4
# Extra attempts after a transient failure, the first one after retry_backoff seconds.
# max_retries = 3
# retry_backoff = 0.5
# Largest reply accepted, streamed or not (bytes).
# max_response_bytes = 67108864
# Whether the model takes images (images from tools go as image parts, else as text
# placeholders): true | false | "auto" (known vision models by name). Per model:
# [engine.vision_models] "my-vlm*" = true
# vision = "auto"
# Prices of models, USD per million tokens, for budgets and the spend report (local
# engines cost 0; a dollar budget with a model priced nowhere is an error, never a guess):
# [engine.prices] "gpt-4o-mini" = { input = 0.15, output = 0.6 }

[engine.hosts]
# Env: OLLAMA_HOST, VLLM_HOST, LLAMACPP_HOST, LMSTUDIO_HOST, SGLANG_HOST, OPENAI_BASE_URL.
# ollama = "http://localhost:11434"
# vllm = "http://localhost:8000"
# llamacpp = "http://localhost:8080"
# lmstudio = "http://localhost:1234"
# sglang = "http://localhost:30000"
# openai = "https://api.openai.com/v1"

[agent]
# Agent for `jarvis ask`: a built-in one (simple, react, orchestrator) or one from agents/.
# Empty: orchestrator when tools are requested, simple otherwise. Env: JARVIS_AGENT.
# default = ""
# Env: JARVIS_MAX_TURNS.
# max_turns = 10
# Tools given to the agent when none are requested, e.g. ["calculator", "think"].
# tools = []
# system = ""
# Identical tool calls allowed per run before the loop guard blocks them.
# max_repeats = 2
# Tool calls run from one model reply; the rest are refused in their results.
# max_tool_calls_per_turn = 32
# A budget for every ask (none by default; `jarvis ask --budget-usd/--budget-seconds/
# --max-tool-calls` and agent files override it): a call that would overrun it is not made
# and the run ends "incomplete". For example, to allow 5 cents, a minute and 20 tool calls:
# `budget_usd = 0.05`, `budget_seconds = 60`, `max_tool_calls = 20`.

[tools]
# Tools that exist at all (built-in, tools/, plugins, MCP); unset: every registered tool.
# enabled = ["calculator", "think", "file_read"]
# default_timeout = 30.0
# max_output_chars = 100000
# Timed-out calls still running (per tool, in all) before new calls fail at once.
# max_abandoned_per_tool = 8
# max_abandoned_threads = 64

# One table per tool for its settings.
[tools.file_read]
# file_read reads only in the workspace (this file's folder) and in these folders (relative
# to this file's folder). Hidden files and folders (.env, .git, .ssh, ...), keys (*.pem,
# *.key, id_rsa*) and credentials*.json are refused unless listed by path here:
allowed_dirs = ["."]
# allowed_secret_paths = [".env"]

# http_request, web_fetch: public addresses only; exact host:port exceptions open more.
# [tools.http_request]
# allowed_hosts = ["127.0.0.1:8123"]
# blocked_hosts = ["*.ads.example"]
# web_search: searxng (base_url), brave or tavily (api_key), duckduckgo (no key).
# [tools.web_search]
# backend = "duckduckgo"

[memory]
# enabled = true
# SQLite file; empty: $JARVIS_HOME/memory.db. Env: JARVIS_MEMORY_DB.
# db_path = ""
# Put the most relevant memory into the context of `jarvis ask`.
# context = true
# context_top_k = 3
# chunk_size = 1000
# chunk_overlap = 100

[scheduler]
# SQLite file; empty: $JARVIS_HOME/scheduler.db. Env: JARVIS_SCHEDULER_DB.
# db_path = ""
# How late (seconds) a missed run may still run.
# grace_seconds = 3600.0
# max_workers = 2
# poll_seconds = 1.0
# lease_seconds = 60.0
# default_timeout = 600.0
# shutdown_timeout = 30.0
# At shutdown or the end of --once, seconds the channel deliveries of runs recorded then get.
# shutdown_delivery_seconds = 10.0
# What a model may schedule (schedule_task): active tasks, shortest interval, prompt size.
# model_max_active_tasks = 100
# model_min_interval_seconds = 60.0
# model_max_prompt_chars = 4000

[runs]
# Log every run. Env: JARVIS_RUN_LOG, JARVIS_RUNS_DB.
# enabled = true
# db_path = ""

[workspace]
# Folders of workspace tools (*.py) and agents (*.toml).
# tools_dir = "tools"
# agents_dir = "agents"

[serve]
# `jarvis serve` (and the limits of `jarvis mcp serve --http`). Without an API key
# (--api-key or JARVIS_API_KEY) it listens on loopback and answers only to loopback Hosts.
# host = "127.0.0.1"
# port = 8765
# Browser origins allowed besides the server's own, e.g. ["http://localhost:3000"].
# allowed_origins = []
# Seconds a client has to send its request headers, and its body; then 408.
# header_timeout = 10.0
# body_timeout = 30.0
# Open connections at most; more are answered 503 at once.
# max_connections = 512
# Seconds an answer may wait on a client that does not read it; then the connection closes.
# send_timeout = 30.0

[sandbox]
# Where repl and code_interpreter run model-written code: auto (bubblewrap, else jarvis's
# own user-namespace launcher, else refuse to run), bwrap, namespaces, or none (no
# isolation). `jarvis doctor` shows what is in force. Env: JARVIS_SANDBOX.
# isolation = "auto"
# The host network for the code (default: none at all).
# network = false
# Extra paths the code may read / write (the same path inside the sandbox).
# read_only_paths = []
# writable_paths = []
# site_packages = true
# Default limits of both tools ([tools.repl] may override them).
# timeout = 30.0
# cpu_seconds = 10
# memory_mb = 512
# max_output_chars = 20000
# tmp_mb = 64

[egress]
# A run that read untrusted content (web pages, search results, MCP results, indexed files,
# notes a model wrote) and holds private data (your files, memory, tasks) sends nothing out
# without asking you, except: to what you allow here, and calls carrying only your own words
# or following a link it was shown (at most max_unconfirmed_per_run of those). See
# docs/trust.md. `jarvis ask --allow-egress HOST|channel:NAME|mcp:SERVER` allows one ask.
# allow_hosts = []
# allow_channels = []
# allow_mcp_servers = []
# Tools you wrote and vouch for: their results count as neutral, their calls as sending
# nothing out (a tool that declares nothing counts as untrusted and able to send anything).
# trusted_tools = []
# max_unconfirmed_per_run = 8

# MCP servers whose tools join the catalog, one table each. Their tools ask before each call
# and count as sending data out unless the server is marked trusted (then its annotations,
# readOnlyHint and openWorldHint, are believed):
# [mcp.servers.files]
# command = "npx"
# args = ["-y", "@modelcontextprotocol/server-filesystem", "."]
# timeout = 30.0
# trusted = false

# Notification channels (any Apprise URL; ${NAME} comes from the environment), one table each:
# [channels.phone]
# url = "ntfy://ntfy.sh/${NTFY_TOPIC}"
"""
