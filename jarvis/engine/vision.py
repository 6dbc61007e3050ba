"""Whether a model takes images: decides if image parts are sent, or text placeholders.

Sending `image_url` parts to a text-only model is an HTTP 400 on most servers (or, worse,
silently ignored), so images are sent only where they are known to work:

- `[engine] vision = true | false | "auto"` sets it for the engine;
- `[engine.vision_models]` maps model names or globs to true/false and wins over `vision`;
- "auto" (the default) recognises the usual vision-capable model families by name
  (gpt-4o, gpt-4.1, gpt-5, o3/o4, claude-3+, gemini, llava, qwen-vl, llama3.2-vision, gemma3,
  pixtral, minicpm-v, moondream, ... and any name with "vision" or "-vl"); any other model
  gets placeholders like `[image: image/png, 12 KB]`.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping

# Lower-cased model names (the part after a "org/" prefix too) that take images.
_VISION_NAME = re.compile(
    r"(gpt-4o|gpt-4\.1|gpt-4-turbo|gpt-4-vision|gpt-5|chatgpt-4o|(^|[/:])o[34](-|$)|"
    r"claude-(3|sonnet|opus|haiku)|gemini|llava|bakllava|vision|[-_]vl([-_:.]|$)|qwen-?vl|"
    r"qwen2(\.5)?-?vl|qwen3-?vl|internvl|minicpm-?v|moondream|pixtral|gemma-?3|"
    r"llama-?4|phi-?[34](\.5)?-?(multimodal|vision)|molmo|idefics|smolvlm|granite-vision|"
    r"mistral-small-3\.[12]|mistral-medium)")

VisionSetting = bool | str


def check_setting(value: VisionSetting) -> VisionSetting:
    """Validate a `vision` value: True, False or "auto"."""
    if isinstance(value, bool) or value == "auto":
        return value
    raise ValueError(f"vision must be true, false or \"auto\", got {value!r}")


def guess_vision(model: str) -> bool:
    """The "auto" guess from a model's name."""
    return bool(_VISION_NAME.search((model or "").lower()))


def accepts_images(model: str, vision: VisionSetting = "auto",
                   overrides: Mapping[str, bool] | None = None) -> bool:
    """Whether to send image parts to `model` (else text placeholders)."""
    for pattern, value in (overrides or {}).items():
        if pattern == model or fnmatch.fnmatchcase(model, pattern):
            return bool(value)
    if isinstance(vision, bool):
        return vision
    return guess_vision(model)
