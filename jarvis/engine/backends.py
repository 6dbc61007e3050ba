"""Per-backend settings for OpenAI-compatible model servers.

Each backend differs only in where it listens, how its base URL is spelled, which key it
wants, a few protocol details, and how a user starts it (for error messages).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True, slots=True)
class Backend:
    """How to reach one kind of OpenAI-compatible server."""

    name: str
    host_env: str                  # environment variable naming its host
    default_host: str
    append_v1: bool                # hosts are given without the /v1 suffix
    api_key_env: str | None        # where a real key comes from, if it needs one
    placeholder_key: str           # local servers ignore the key but the client wants one
    local: bool                    # probed by discovery
    max_tokens_param: str = "max_tokens"
    stream_usage: bool = True      # accepts stream_options.include_usage
    default_model: str = ""        # used when no model is named (else the first listed model)
    start_hint: str = ""


BACKENDS: dict[str, Backend] = {
    "ollama": Backend(
        "ollama", "OLLAMA_HOST", "http://localhost:11434", True, None, "ollama", True,
        start_hint="start it with `ollama serve` and pull a model with tool support, "
                   "e.g. `ollama pull qwen3:8b`"),
    "vllm": Backend(
        "vllm", "VLLM_HOST", "http://localhost:8000", True, "VLLM_API_KEY", "EMPTY", True,
        start_hint="start it with `vllm serve MODEL --enable-auto-tool-choice "
                   "--tool-call-parser hermes`"),
    "llamacpp": Backend(
        "llamacpp", "LLAMACPP_HOST", "http://localhost:8080", True, "LLAMACPP_API_KEY", "EMPTY",
        True, start_hint="start it with `llama-server -m MODEL.gguf --jinja`"),
    "lmstudio": Backend(
        "lmstudio", "LMSTUDIO_HOST", "http://localhost:1234", True, None, "lm-studio", True,
        start_hint="start the LM Studio server with `lms server start` and load a model"),
    "sglang": Backend(
        "sglang", "SGLANG_HOST", "http://localhost:30000", True, "SGLANG_API_KEY", "EMPTY", True,
        start_hint="start it with `python -m sglang.launch_server --model-path MODEL "
                   "--tool-call-parser qwen25`"),
    "openai": Backend(
        "openai", "OPENAI_BASE_URL", "https://api.openai.com/v1", False, "OPENAI_API_KEY", "",
        False, max_tokens_param="max_completion_tokens", default_model="gpt-4o-mini",
        start_hint="set OPENAI_API_KEY (and OPENAI_BASE_URL for another OpenAI-compatible "
                   "service)"),
}

LOCAL_BACKENDS: tuple[str, ...] = tuple(name for name, b in BACKENDS.items() if b.local)


def base_url(backend: Backend, host: str) -> str:
    """The OpenAI base URL (ending in /v1 where the backend needs it) for a host.

    Accepts `localhost:11434`, `http://host:port`, or a URL that already has a path.
    """
    host = host.strip().rstrip("/")
    if "://" not in host:
        host = "http://" + host
    if backend.append_v1 and urlsplit(host).path in ("", "/"):
        host += "/v1"
    return host


def check_base_url(engine: str, url: str) -> None:
    """Raise ConfigError unless `url` is an http(s) URL http.client can connect to."""
    from jarvis.errors import ConfigError

    parts = urlsplit(url)
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:  # a port that is not a number in range
        port_ok = False
    if (parts.scheme not in ("http", "https") or not parts.hostname or not port_ok
            or any(ch.isspace() or ord(ch) < 32 for ch in url)):
        from jarvis.security.redact import redact_url

        raise ConfigError(f"{engine}: {redact_url(url)!r} is not a usable server address; give it as "
                          "http://HOST:PORT (e.g. http://localhost:8000) with --host, the "
                          "engine's *_HOST variable or config.toml")
