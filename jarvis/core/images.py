"""Whether an image may be sent to a model: the one check every image passes before an engine.

Images come from MCP servers (tool results, resources, sampling requests), from jarvis tools'
ORS image blocks and from callers' content parts: all of them untrusted. An image goes to an
engine only as a data URL built from its `mimeType` and `data`, so a lying or malformed one
would reach the engine as something else: `data` that is a data URL or an http URL (the model
server may fetch it, or fail the whole request with HTTP 400), text that is not base64, a
mimeType that changes the URL's shape (`image/png;base64,...`) or is not an image at all
(`text/html`, SVG with script), or bytes that are no image whatever the label says. So: the
type is taken from the bytes (PNG, JPEG, GIF, WebP: what the OpenAI format accepts), the
declared type must be an image type, the data must be plain base64 within MAX_IMAGE_BYTES.
"""

from __future__ import annotations

import base64
import binascii
import re

MAX_IMAGE_BYTES = 8 * 1024 * 1024  # decoded bytes of one image
MAX_IMAGES_PER_MESSAGE = 32  # images one message may carry to an engine
MAX_REQUEST_IMAGE_CHARS = 24_000_000  # base64 of all images in one engine request (~18 MB)
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_MIME = re.compile(r"image/[a-z0-9.+-]{1,50}")
_ALIASES = {"image/jpg": "image/jpeg", "image/pjpeg": "image/jpeg"}


def sniff(head: bytes) -> str | None:
    """The image type of bytes starting with `head`, or None if they are none we send."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def check_image(data: object, mime: object) -> tuple[str | None, str]:
    """(problem, mime): a one-line reason the image must not reach a model (and None when it
    may), and the type to send it as (from its bytes). Cost: a regex over the data and a
    decode of its first bytes, nothing more (no image library, no full decode)."""
    if not isinstance(data, str) or not data:
        return "no image data", "image"
    if not isinstance(mime, str) or not _MIME.fullmatch(mime.strip().lower()):
        # Not quoted back: the model reads this reason, and the type string is the server's.
        return "its declared type is not an image type", "image"
    declared = _ALIASES.get(mime.strip().lower(), mime.strip().lower())
    if len(data) > MAX_IMAGE_BYTES * 4 // 3 + 4:
        return f"larger than {MAX_IMAGE_BYTES // (1024 * 1024)} MB", declared
    if data.startswith(("data:", "http:", "https:", "file:")) or "://" in data[:20]:
        return "its data is a URL, not base64 image bytes", declared
    if len(data) % 4 or not _BASE64.fullmatch(data):
        return "its data is not base64", declared
    try:
        head = base64.b64decode(data[:64], validate=True)
    except (binascii.Error, ValueError):
        return "its data is not base64", declared
    actual = sniff(head)
    if actual is None:
        return "its bytes are not a PNG, JPEG, GIF or WebP image", declared
    return None, actual


def safe_mime(mime: object) -> str:
    """`mime` as it may appear in text a model reads: an image type, else "image" (a server's
    type string is not a place for text the model would read as instructions)."""
    text = mime.strip().lower() if isinstance(mime, str) else ""
    return text if _MIME.fullmatch(text) else "image"


def image_or_problem(data: object, mime: object) -> tuple[str | None, str, str]:
    """(problem, data, mime) for an image from outside: data with line breaks taken out (some
    servers wrap their base64), then checked (see check_image)."""
    if isinstance(data, str) and len(data) <= MAX_IMAGE_BYTES * 2 and any(
            c in data for c in "\r\n \t"):
        data = "".join(data.split())
    problem, actual = check_image(data, mime)
    return problem, data if isinstance(data, str) else "", actual
