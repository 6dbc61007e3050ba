"""`${NAME}` in config values: secrets stay in the environment, not in config.toml."""

from __future__ import annotations

import os
import re

from jarvis.errors import ConfigError

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_env(value: str, where: str) -> str:
    """`value` with every `${NAME}` replaced by that environment variable; an unset one is a
    ConfigError naming it and `where` it is used (`$$` is not special; write the value)."""

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        found = os.environ.get(name)
        if found is None:
            raise ConfigError(f"{where} uses ${{{name}}}, but the environment variable {name} "
                              f"is not set")
        return found

    return _VAR.sub(sub, value)


def env_names(value: str) -> list[str]:
    """The variable names `value` refers to."""
    return _VAR.findall(value)
