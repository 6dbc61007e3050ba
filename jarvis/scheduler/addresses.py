"""Store and broker addresses without their secrets, for logs and error messages.

Used by the PostgreSQL store, the Celery app and `jarvis worker` (and importable from
jarvis.scheduler.ledger, where they were first).
"""

from __future__ import annotations

import re

# Secrets outside the `user:password@` part that libpq and Redis accept too, and that were
# shown as they were: `?password=x` / `&sslpassword=x` in a URL's query, and `password=x` or
# `password='x y'` in a key=value DSN (`host=db password=x`).
_QUERY_SECRET = re.compile(r"([?&]([^=&#]+)=)([^&#]*)")
_DSN_SECRET = re.compile(r"(?<![\w?&])((\w+)\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s']+)")


def redact(url: str) -> str:
    """A store or broker address without its secrets, for logs and messages (the user name
    stays: it tells which account is meant)."""
    from jarvis.security.redact import is_secret_name

    def hide(match: re.Match[str]) -> str:
        return match.group(1) + "***" if is_secret_name(match.group(2)) else match.group(0)

    scheme, sep, rest = url.partition("://")
    if not sep:
        return _DSN_SECRET.sub(hide, url)
    head, q, query = rest.partition("?")
    if "@" in head.split("/", 1)[0]:
        netloc, slash, path = head.partition("/")
        creds, _, host = netloc.rpartition("@")
        user = creds.split(":", 1)[0]
        head = f"{user}{':***' if ':' in creds else ''}@{host}{slash}{path}"
    if q:
        query = _QUERY_SECRET.sub(hide, "?" + query)[1:]
    return f"{scheme}://{head}{q}{query}"


def _secrets_in(url: str) -> list[str]:
    """The secret values inside `url`, as written and percent-decoded (longest first)."""
    from urllib.parse import unquote

    from jarvis.security.redact import is_secret_name

    found: list[str] = []
    scheme, sep, rest = url.partition("://")
    if sep:
        head, _, query = rest.partition("?")
        creds = head.split("/", 1)[0].rpartition("@")[0]
        if ":" in creds:
            found.append(creds.split(":", 1)[1])
        found += [m.group(3) for m in _QUERY_SECRET.finditer("?" + query)
                  if is_secret_name(m.group(2))]
    else:
        found += [m.group(3).strip("'") for m in _DSN_SECRET.finditer(url)
                  if is_secret_name(m.group(2))]
    forms = {form for value in found for form in (value, unquote(value)) if form}
    return sorted(forms, key=len, reverse=True)


def redact_error(text: str, url: str) -> str:
    """An error message about `url` with the URL's secrets hidden wherever they appear: libpq
    quotes the part of a DSN it cannot parse (`invalid percent-encoded token: "pa%zzword"`).
    A secret shorter than 4 characters is hidden only where it is quoted (hiding every "e" of
    a message would make it unreadable)."""
    for secret in _secrets_in(url):
        if len(secret) >= 4:
            text = text.replace(secret, "***")
        else:
            text = text.replace(f'"{secret}"', '"***"').replace(f"'{secret}'", "'***'")
    return redact(text) if "://" in text else text
