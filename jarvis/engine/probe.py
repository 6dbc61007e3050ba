"""One probe of an OpenAI-compatible server: `GET {base_url}/models`, bounded, never raising.

Used by engine discovery (jarvis.engine.discovery, which probes the local hosts) and by an
engine's own health check. Standard library only: no openai import.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field


@dataclass(slots=True)
class ProbeResult:
    """What one probe of `GET {base_url}/models` found."""

    backend: str
    url: str
    ok: bool = False
    models: list[str] = field(default_factory=list)
    error: str = "not probed"
    seconds: float = 0.0


def probe(url: str, timeout: float, backend: str = "", api_key: str | None = None) -> ProbeResult:
    """Ask an OpenAI-compatible base URL for its models; never raises."""
    import urllib.error  # here, not at the top: urllib.request pulls in ssl
    import urllib.request

    result = ProbeResult(backend, url)
    start = time.perf_counter()
    request = urllib.request.Request(url.rstrip("/") + "/models")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - configured host
            body = response.read(1_000_000)
        data = json.loads(body or b"{}")
        items = data.get("data") if isinstance(data, dict) else None
        result.models = [str(m.get("id")) for m in items or [] if isinstance(m, dict) and m.get("id")]
        result.ok, result.error = True, ""
    except urllib.error.HTTPError as exc:
        result.error = f"HTTP {exc.code}"
    except urllib.error.URLError as exc:
        reason = exc.reason
        result.error = "connection refused" if isinstance(reason, ConnectionRefusedError) else str(reason)
    except TimeoutError:
        result.error = f"no answer within {timeout:g} s"
    except (OSError, ValueError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    result.seconds = time.perf_counter() - start
    return result
