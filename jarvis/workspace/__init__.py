"""The workspace: the folder that holds config.toml, `tools/*.py` and `agents/*.toml`.

`jarvis.workspace.agents` reads declarative agents; `jarvis.workspace.tools` loads tool files
by path into ToolRegistry. Both are imported on use (they need pydantic or import user code).
"""
