"""The config.toml examples in the docs load as they are written (a wrong key would be a
ConfigError for anyone who copies them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jarvis.core.config import load_config

DOCS = Path(__file__).resolve().parent.parent / "docs"
EXAMPLES = [(doc.name, block) for doc in sorted(DOCS.glob("*.md"))
            for block in re.findall(r"```toml\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
            if re.match(r"\[(engine|agent|tools|scheduler)\]", block)]


def test_the_new_settings_have_examples():
    text = "".join(block for _, block in EXAMPLES)
    for key in ("max_tool_calls_per_turn", "max_response_bytes", "max_abandoned_per_tool",
                "model_max_active_tasks", "model_min_interval_seconds"):
        assert key in text, key


@pytest.mark.parametrize(("doc", "block"), EXAMPLES, ids=[f"{d}-{i}" for i, (d, _) in
                                                           enumerate(EXAMPLES)])
def test_config_examples_load(tmp_path, doc, block):
    path = tmp_path / "config.toml"
    path.write_text(block, encoding="utf-8")
    config = load_config(path)
    current = None  # every key shown is the value loaded
    for line in block.splitlines():
        if line.startswith("["):
            current = line.strip("[] ")
        elif "=" in line and current:
            key, value = (part.strip() for part in line.split("=", 1))
            loaded = getattr(getattr(config, current), key)
            shown = str(loaded).lower() if isinstance(loaded, bool) else str(loaded)  # TOML's
            assert shown in (value, f"{value}.0"), line
