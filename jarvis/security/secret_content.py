"""Secrets recognised by what a file holds, whatever its name.

The path policy (`jarvis.security.paths`) refuses secrets by name (`id_rsa`, `*.pem`, `.aws`,
...), but `cp ~/.ssh/id_ed25519 notes.txt` or a kubeconfig saved as `cluster.yaml` has an
innocent name. `secret_in(text)` looks at the text itself and names what it holds:

- PEM private keys of every kind (`-----BEGIN [RSA|EC|DSA|OPENSSH|ENCRYPTED|...] PRIVATE
  KEY-----` with a body: PKCS#1, PKCS#8 and so Apple's `.p8` keys, SEC1, OpenSSH, SSH2), PGP
  private key blocks, PuTTY key files, and the base64 body of a DER or OpenSSH private key
  without its armor lines;
- AWS credentials (`aws_secret_access_key = ...`, `"SecretAccessKey": ...`,
  `aws_session_token`), kubeconfig client keys (`client-key-data`) and user tokens, Google
  Cloud service-account keys (`"type": "service_account"` with a `private_key`), age secret
  keys (`AGE-SECRET-KEY-1...`) and `.netrc` logins.

Spellings a copy can have are covered: any case, CRLF or CR line ends, a byte-order mark,
the armor line broken across lines, the key inside a JSON string (`\\n` escapes, `\\u`
escapes: a JSON document's strings are checked decoded), in a Markdown quote or a YAML block.
An armor line alone (a document that explains the format) is not a key: a body of base64
must follow.

Bounded: the patterns are linear (no nested unbounded repetition), a body is looked for in a
bounded window after its armor line, and a JSON document is decoded only up to
MAX_JSON_CHARS. The caller decides how much text to show it: everything that would be
returned (file_read and the indexer check every byte they read).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

# A JSON document larger than this is checked as text only (its escapes not decoded).
MAX_JSON_CHARS = 10_000_000
# How far after an armor line its base64 body is looked for, and how much of it is enough.
_BODY_WINDOW = 2_000
_BODY_MIN = 40

_WS = r"[ \t\r\n]{1,4}"
# `BEGIN [up to 4 words] PRIVATE KEY [BLOCK]`, the words split by any whitespace (CRLF too).
_ARMOR = re.compile(rf"BEGIN{_WS}((?:[A-Z0-9]{{1,12}}{_WS}){{0,4}})PRIVATE{_WS}KEY"
                    rf"((?:{_WS}BLOCK)?)", re.IGNORECASE)
_HEADER_LINE = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,40}:")  # Proc-Type:, DEK-Info:, Version:
_BASE64_CHUNK = re.compile(r"(?=[A-Za-z=]*[0-9+/])[A-Za-z0-9+/]+={0,2}")
_CHUNK_MIN = 20
# What a line of a key may carry around it: a Markdown quote, a comment, YAML/JSON quoting.
_LINE_STRIP = " \t>#*/;'\",|"
# The first base64 characters of a private key's DER (or OpenSSH) encoding, for a body kept
# without its armor lines: openssh-key-v1; PKCS#8 RSA, EC, Ed25519/X25519; PKCS#1 RSA;
# SEC1 EC.
_BARE_BODY = re.compile(
    r"(?<![A-Za-z0-9+/])(?:b3BlbnNzaC1rZXktdjE"
    r"|MII[A-Za-z0-9+/]{3}IBADANBgkqhkiG9w0BAQEFAAS"
    r"|MI[GH][A-Za-z0-9+/]{1,3}AgEAM[A-Za-z0-9+/]{2}GByqGSM49AgEG"
    r"|MC4CAQAwBQYDK2V[uw]BCIEI"
    r"|MII[A-Za-z0-9+/]{3}IBAAKC[AQg]"
    r"|MHcCAQEEI|MI[GH][A-Za-z0-9+/]AgEBB[DE])"
    r"[A-Za-z0-9+/]{40}")
_BARE_MARKERS = ("b3BlbnNzaC1rZXktdjE", "IBADANBgkqhkiG9w0BAQEFAAS", "GByqGSM49AgEG",
                 "MC4CAQAwBQYDK2V", "IBAAKC", "MHcCAQEEI", "AgEBB")
_PUTTY = re.compile(r"PuTTY-User-Key-File-\d{1,3}\s*:", re.IGNORECASE)
_PUTTY_PRIVATE = re.compile(r"^Private-(?:Lines|MAC)\s*:", re.IGNORECASE | re.MULTILINE)
_AGE = re.compile(r"AGE-SECRET-KEY-(?:[A-Z0-9]{1,12}-)?1[02-9AC-HJ-NP-Z]{50}", re.IGNORECASE)
_Q = r"""["']?"""
_AWS = re.compile(rf"secret[_-]?access[_-]?key{_Q}[ \t]*[:=][ \t]*{_Q}"
                  rf"[A-Za-z0-9/+]{{30,}}"
                  rf"|aws[_-]?session[_-]?token{_Q}[ \t]*[:=][ \t]*{_Q}[A-Za-z0-9/+=]{{40,}}",
                  re.IGNORECASE)
_KUBE_KEY = re.compile(rf"client-key-data{_Q}[ \t]*:[ \t]*{_Q}[A-Za-z0-9+/=]{{40,}}",
                       re.IGNORECASE)
_KUBE_CONFIG = re.compile(rf"^[ \t{{]*{_Q}kind{_Q}[ \t]*:[ \t]*{_Q}Config\b",
                          re.IGNORECASE | re.MULTILINE)
_KUBE_TOKEN = re.compile(rf"^[ \t{{,]*{_Q}(?:token|password|(?:id|refresh|access)-token)"
                         rf"{_Q}[ \t]*:[ \t]*{_Q}[^\s\"',}}]{{8,}}", re.IGNORECASE | re.MULTILINE)
_GCP_TYPE = re.compile(r""""type"\s*:\s*"service_account\"""", re.IGNORECASE)
_GCP_KEY = re.compile(r""""private_key"\s*:\s*"[^"]{20}""", re.IGNORECASE)
_NETRC = re.compile(r"\bmachine\s+\S{1,255}\s+login\s+\S{1,255}\s+password\s+\S",
                    re.IGNORECASE)
# JSON escapes a key may be written with inside a string (a service-account file's "\n").
_ESCAPES = re.compile(r"\\[nrt]")


def secret_in(text: str) -> str | None:
    """What secret `text` holds, e.g. "an OpenSSH private key", or None."""
    found = _secret_in_text(text)
    if found is None and _looks_like_json(text):
        # \u escapes and the like: the same checks on the decoded strings.
        decoded = "\n".join(_strings(text))
        if decoded:
            found = _secret_in_text(decoded)
    return found


def secret_in_bytes(data: bytes) -> str | None:
    """secret_in for bytes read from a file (UTF-8; bytes that are not are replaced)."""
    return secret_in(data.decode("utf-8", "replace"))


def _secret_in_text(text: str) -> str | None:
    # Each check runs only where its marker occurs: most text has none of them, and a search
    # for a lowercase word is far cheaper than a case-insensitive pattern (a 1 MiB file is
    # checked in a few milliseconds).
    low = text.lower()
    if "service_account" in low and _GCP_TYPE.search(text) and _GCP_KEY.search(text):
        return "a Google Cloud service-account key"
    if "private" in low:
        for match in _ARMOR.finditer(text):
            if _has_body(text, match.end()):
                return _armor_kind(match.group(1), bool(match.group(2).strip()))
    if any(marker in text for marker in _BARE_MARKERS) and _BARE_BODY.search(text):
        return "the body of a private key (base64 without its BEGIN/END lines)"
    if "putty-user-key-file" in low and _PUTTY.search(text) and _PUTTY_PRIVATE.search(text):
        return "a PuTTY private key"
    if "age-secret-key-" in low and _AGE.search(text):
        return "an age secret key"
    if ("access" in low or "session" in low) and _AWS.search(text):
        return "AWS credentials (a secret access key or session token)"
    if "client-key-data" in low and _KUBE_KEY.search(text):
        return "a Kubernetes client key (kubeconfig client-key-data)"
    if "kind" in low and _KUBE_CONFIG.search(text) and _KUBE_TOKEN.search(text):
        return "a kubeconfig with a user's token or password"
    if "machine" in low and _NETRC.search(text):
        return "a .netrc login (machine, login and password)"
    return None


def _armor_kind(words: str, block: bool) -> str:
    kind = " ".join(words.split()).upper()
    if kind.startswith("PGP") or block:
        return "a PGP private key block"
    if "OPENSSH" in kind:
        return "an OpenSSH private key"
    if "SSH2" in kind:
        return "an SSH2 private key"
    if "ENCRYPTED" in kind:
        return "an encrypted private key (PEM)"
    names = {"RSA": "an RSA", "EC": "an EC", "DSA": "a DSA"}
    for word, article in names.items():
        if kind.split()[:1] == [word]:
            return f"{article} private key (PEM)"
    return "a private key (PEM)"


def _has_body(text: str, start: int) -> bool:
    """Whether a base64 body follows an armor line that ends at `start`: after the dashes,
    blank lines and header lines (Proc-Type:, Version:, Comment:), base64 chunks of at least
    _CHUNK_MIN characters with a digit, `+` or `/` in them (prose words are not), at least
    _BODY_MIN characters in all. A key flattened onto one line counts too."""
    window = _ESCAPES.sub("\n", text[start:start + _BODY_WINDOW]).replace("\r", "\n")
    count = 0
    in_body = False
    for number, raw in enumerate(window.split("\n")):
        line = raw.lstrip("-") if number == 0 else raw  # the armor line's own "-----"
        line = line.strip(_LINE_STRIP)
        if not line or (not in_body and _HEADER_LINE.match(line)):
            continue
        for token in line.split():
            token = token.strip(_LINE_STRIP)
            if len(token) < _CHUNK_MIN or not _BASE64_CHUNK.fullmatch(token):
                return False  # the END line, or prose: no body here
            in_body = True
            count += len(token)
            if count >= _BODY_MIN:
                return True
    return False


def _looks_like_json(text: str) -> bool:
    head = text[:64].lstrip("\ufeff \t\r\n")
    return head[:1] in ("{", "[") and "\\u" in text and len(text) <= MAX_JSON_CHARS


def _strings(text: str) -> Iterator[str]:
    """Every key and string value of a JSON document (nothing when it is not JSON)."""
    try:
        value = json.loads(text.lstrip("\ufeff"))
    except (ValueError, RecursionError):
        return
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            for key, inner in item.items():
                yield f'"{key}": ' + (json.dumps(inner) if isinstance(inner, str) else "")
                stack.append(inner)
        elif isinstance(item, list):
            stack.extend(item)
