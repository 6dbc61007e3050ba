"""Hiding secrets in what jarvis prints: values whose name says they are secret, passwords
and tokens inside URLs, and secret command-line options.

    redact_value("GH_PAT", "ghp_x")                      -> "***"
    redact_value("url", "postgres://u:pw@db/x")         -> "postgres://u:***@db/x"
    redact_args(["--token", "abc", "--api-key=def"])    -> ["--token", "***", "--api-key=***"]

A name is secret when one of its words (split at `_`, `-`, `.`, spaces and camelCase) is
key, token, secret, password, passwd, pwd, pass, passphrase, pat, auth, authorization,
credential, cookie, session or bearer, or ends in key/token/secret/password/pass/passphrase
(apikey, accesstoken, smtppass), except English words that end in "pass" (bypass, compass,
surpass, ...). Names that hold paths (`..._path`, `..._dirs`, ...) are not secrets by name.
A key in a URL's path or query under any name (Zapier's `https://actions.zapier.com/mcp/
sk-ak-.../sse`, `?customer=<uuid>`) is hidden when it looks like one (`looks_like_token`).
Webhook URLs carry their secret in the path: it is hidden for known webhook hosts (Slack,
Telegram, ntfy.sh, ...), after a `/hooks/` or `/webhook(s)/` segment, and for any URL under
a name containing "webhook" (`WEBHOOK_URL = https://host/***`). Only strings are hidden: a number
or a flag named `session_idle_seconds` tells nothing. Under any name, well-known token shapes
(ghp_..., sk-..., hf_..., AIza..., sk_live_..., npm_..., AKIA..., JWTs, PEM private keys) and
`Bearer ...`-style values are hidden too, and secrets inside longer values: `NAME=value`
pairs (connection strings, `env TOKEN=x cmd`), `Name: value` header lines (`--header
"Authorization: Bearer x"`), `--secret-option value` in a command line, URL fragments.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"

_WORDS = frozenset({"key", "token", "secret", "password", "passwd", "pwd", "pw", "pat", "auth",
                    "authorization", "authentication", "credential", "cookie", "session",
                    "bearer", "sig", "signature", "sas", "pass", "passphrase"})
_ENDINGS = ("key", "token", "secret", "password", "passwd", "credential", "cookie", "pass",
            "passphrase")
# English words that end in "pass" and name no password (BYPASS_PROXY, COMPASS_HEADING).
_NOT_PASS = frozenset({"bypass", "compass", "surpass", "trespass", "overpass", "underpass",
                       "encompass"})
# Webhook URLs whose path (or part of it) is the secret: the service's own hosts...
# (Discord and Outlook serve other pages too: their webhooks are found by the segment below.)
_WEBHOOK_HOSTS = ("hooks.slack.com", "api.telegram.org", "maker.ifttt.com", "ntfy.sh",
                  "hooks.zapier.com", "webhook.office.com")
# ...and a path segment that says what follows is a hook's id or token (Discord's
# /api/webhooks/ID/TOKEN, Outlook's /webhook/..., Mattermost's and Rocket.Chat's /hooks/...,
# n8n's /webhook/..., Feishu's /bot/v2/hook/...).
_WEBHOOK_SEGMENTS = frozenset({"webhook", "webhooks", "webhookb2", "hooks", "hook"})
_PATH_ENDINGS = ("path", "paths", "dir", "dirs", "file", "files", "folder")
_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s\"'<>]+")
# Well-known token shapes, hidden wherever they appear as a whole value.
_TOKEN_SHAPES = re.compile(
    r"^(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|sk-[A-Za-z0-9_-]{16,}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|glpat-[A-Za-z0-9_-]{16,}"
    r"|hf_[A-Za-z0-9]{20,}|AIza[0-9A-Za-z_-]{30,}|[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"
    r"|npm_[A-Za-z0-9]{30,}|pypi-[A-Za-z0-9_-]{40,}"
    r"|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]+)$")
# Inside a longer value: a PEM private key anywhere hides the whole value; `NAME=value` pairs
# (connection strings, `env TOKEN=x cmd`), `Name: value` header lines (`--header
# "Authorization: Bearer x"`) and `--secret-option value` hide the value when the name is
# secret; `Bearer x` / `Basic x` after a `:` or `=` hides the credential.
_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
_PAIR = re.compile(r"(?<![\w.-])([A-Za-z_][\w.-]*)=([^\s;&,\"']+)")
_HEADER = re.compile(r"(?:^|(?<=[=\s\"']))([A-Za-z][\w-]*)(\s*:\s*)(\S.*)$")
_OPTION = re.compile(r"(?:^|(?<=\s))(--?[A-Za-z][\w-]*)(\s+)([^\s-]\S*)")
_SCHEME_INSIDE = re.compile(r"(?<=[:=])(\s*)(Bearer|Basic)\s+\S+", re.IGNORECASE)


def _words(name: str) -> list[str]:
    # Trailing digits say nothing: `cookie2`, `token_v2`'s `v2` aside, `password1`.
    return [w.lower().rstrip("0123456789") or w for w in _SPLIT.split(name) if w]


def is_secret_name(name: str) -> bool:
    """Whether a key, variable or option name says its value is a secret."""
    words = _words(name)
    if not words or words[-1] in _PATH_ENDINGS:
        return False
    for word in words:
        if word in _NOT_PASS:
            continue
        single = word[:-1] if word.endswith("s") and word[:-1] in _WORDS else word
        if single in _WORDS or word.endswith(_ENDINGS):
            return True
    return False


def is_webhook_name(name: str) -> bool:
    """Whether a name says its value is a webhook URL (SLACK_WEBHOOK, webhookUrl): the path
    of such a URL is its secret."""
    return "webhook" in name.lower()


def redact_url(text: str, webhook: bool = False) -> str:
    """`text` with URL passwords (or a lone userinfo token) and secret query values hidden,
    and the path of webhook URLs (known webhook hosts, a /hooks/ or /webhook/ segment, or any
    URL when `webhook`: the value's name says it is one): `https://hooks.slack.com/***`."""
    def one(match: re.Match[str]) -> str:
        url = match.group(0)
        try:
            parts = urlsplit(url)
        except ValueError:
            return url
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, hostport = netloc.rpartition("@")
            user, colon, _ = userinfo.partition(":")
            # user:password -> user:***; a lone token (https://TOKEN@host) -> ***
            netloc = f"{user}:{MASK}@{hostport}" if colon else f"{MASK}@{hostport}"
        path = _webhook_path(parts.path, webhook or _webhook_host(parts.hostname or ""))
        hook = path != parts.path
        if not hook:
            # A key in the path, e.g. Zapier's https://actions.zapier.com/mcp/sk-ak-.../sse
            path = "/".join(MASK if looks_like_token(s) else s for s in path.split("/"))
        # The query, and a fragment shaped like one (OAuth's #access_token=...); every query
        # value of a webhook (an Azure Function's ?code=...).
        query, fragment = _mask_query(parts.query, hook), _mask_query(parts.fragment, hook)
        if (netloc, path, query, fragment) == (parts.netloc, parts.path, parts.query,
                                               parts.fragment):
            return url
        return urlunsplit((parts.scheme, netloc, path, query, fragment))

    return _URL.sub(one, text)


def _webhook_host(host: str) -> bool:
    host = host.lower().rstrip(".")
    return any(host == known or host.endswith("." + known) for known in _WEBHOOK_HOSTS)


def _webhook_path(path: str, whole: bool) -> str:
    """The path with what follows its first webhook segment hidden (`/api/webhooks/***`);
    with `whole` and no such segment, the whole path (`/***`)."""
    segments = path.split("/")
    for i, segment in enumerate(segments[:-1]):
        if segment.lower() in _WEBHOOK_SEGMENTS and any(segments[i + 1:]):
            return "/".join(segments[:i + 1]) + f"/{MASK}"
    return f"/{MASK}" if whole and path.strip("/") else path


def _mask_query(query: str, everything: bool = False) -> str:
    if not query or "=" not in query:
        return query
    pairs = parse_qsl(query, keep_blank_values=True)

    def hidden(key: str, value: str) -> bool:
        return bool(value) and (everything or is_secret_name(key) or looks_like_token(value))

    if not any(hidden(k, v) for k, v in pairs):
        return query
    return urlencode([(k, MASK if hidden(k, v) else v) for k, v in pairs], safe="*")


_TOKEN_CHARS = re.compile(r"[A-Za-z0-9_~+=%-]+")
_HEXISH = re.compile(r"[0-9a-fA-F-]+")
_PIECE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+|[^A-Za-z0-9]+")
_CLUSTER = re.compile(r"[^aeiouy]{6,}")


def looks_like_token(value: str) -> bool:
    """Whether a URL path segment or query value looks like a key rather than a name: a
    well-known token shape (`sk-...`, `ghp_...`), a UUID or hex digest, or 20+ characters
    whose pieces do not read as words (`JiNEWaENKWMB5Vsz...`), unlike
    `my-long-article-2024`, `getUserProfileDataById` or `report-2024-01-01.pdf`. Random
    keys of 20 characters are seen 99.7% of the time, longer ones more often."""
    if _TOKEN_SHAPES.match(value):
        return True
    if len(value) < 20 or len(value) > 4096 or not _TOKEN_CHARS.fullmatch(value):
        return False
    digits = sum(c.isdigit() for c in value)
    letters = sum(c.isalpha() for c in value)
    if not letters:
        return digits >= 24  # a long number is an id; a date or a version is not
    if digits and _HEXISH.fullmatch(value):
        return True  # a UUID, a hex digest
    if not _wordy(value):
        return True
    kinds = ["d" if c.isdigit() else "u" if c.isupper() else "l" for c in value if c.isalnum()]
    changes = sum(1 for a, b in zip(kinds, kinds[1:], strict=False) if a != b)
    return digits >= 2 and changes >= 4


def _wordy(value: str) -> bool:
    """Whether each alphabetic piece (split at separators, digits and camelCase humps) reads
    like a word: a vowel and no run of 6 consonants, a few acronyms (HTTP, URL), at most one
    lone letter other than a and i."""
    lone = acronyms = 0
    for piece in _PIECE.findall(value):
        if not piece[0].isalpha():
            continue
        if piece.isupper() and 2 <= len(piece) <= 5:
            acronyms += 1
            if acronyms > 2:
                return False
            continue
        word = piece.lower()
        if len(word) == 1:
            if word not in "ai":
                lone += 1
                if lone > 1:
                    return False
            continue
        if not any(v in word for v in "aeiouy") or _CLUSTER.search(word):
            return False
    return True


def redact_args(args: list[Any]) -> list[Any]:
    """Command-line arguments with the values of secret options hidden: `--token X`,
    `--api-key=X`, `TOKEN=X`, URLs with passwords, and well-known token shapes."""
    out: list[Any] = []
    hide_next = hook_next = False
    for arg in args:
        if not isinstance(arg, str):
            out.append(arg)
            hide_next = hook_next = False
            continue
        if hide_next and not arg.startswith("-"):
            out.append(MASK)
            hide_next = False
            continue
        hide_next = False
        if hook_next and not arg.startswith("-"):
            out.append(_redact_text(arg, webhook=True))
            hook_next = False
            continue
        hook_next = False
        if arg.startswith("-"):
            name, eq, value = arg.lstrip("-").partition("=")
            if is_webhook_name(name) and not is_secret_name(name):
                if eq:
                    out.append(f"{arg.split('=', 1)[0]}={_redact_text(value, webhook=True)}")
                else:
                    out.append(arg)
                    hook_next = True
                continue
            if is_secret_name(name):
                if eq:
                    out.append(f"{arg.split('=', 1)[0]}={MASK}" if value else arg)
                else:
                    out.append(arg)
                    hide_next = True
                continue
        elif "=" in arg and not arg.startswith(("http://", "https://")):
            name, _, value = arg.partition("=")
            if value and is_secret_name(name) and " " not in name:
                out.append(f"{name}={MASK}")
                continue
        out.append(_redact_text(arg))
    return out


_SCHEME_TOKEN = re.compile(r"^(Bearer|Basic|Token|Digest)\s+\S.*$", re.IGNORECASE)


def _redact_text(value: str, webhook: bool = False) -> str:
    if _TOKEN_SHAPES.match(value.strip()) or _PEM.search(value):
        return MASK
    scheme = _SCHEME_TOKEN.match(value.strip())
    if scheme:  # an Authorization-style value under an innocent name
        return f"{scheme.group(1)} {MASK}"
    return _redact_inside(redact_url(value, webhook))


def _redact_inside(text: str) -> str:
    """Secrets inside a longer value (see _PAIR, _HEADER, _OPTION, _SCHEME_INSIDE)."""
    def pair(m: re.Match[str]) -> str:
        return f"{m.group(1)}={MASK}" if is_secret_name(m.group(1)) and m.group(2) != MASK \
            else m.group(0)

    def header(m: re.Match[str]) -> str:
        return f"{m.group(1)}{m.group(2)}{MASK}" if is_secret_name(m.group(1)) else m.group(0)

    def option(m: re.Match[str]) -> str:
        name = m.group(1).lstrip("-")
        return f"{m.group(1)}{m.group(2)}{MASK}" if is_secret_name(name) else m.group(0)

    text = _PAIR.sub(pair, text)
    text = _HEADER.sub(header, text)
    text = _OPTION.sub(option, text)
    return _SCHEME_INSIDE.sub(lambda m: f"{m.group(1)}{m.group(2)} {MASK}", text)


def redact_value(name: str, value: Any) -> Any:
    """`value` as it may be shown under `name`: hidden if the name says secret (strings
    only), else with URL secrets and token-shaped strings hidden; lists and tables too."""
    if isinstance(value, str):
        if value and is_secret_name(name):
            return MASK
        return _redact_text(value, webhook=is_webhook_name(name))
    if isinstance(value, dict):
        return {k: redact_value(str(k), v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if name.lower() == "args":
            return redact_args(list(value))
        return [redact_value(name, v) for v in value]
    return value
