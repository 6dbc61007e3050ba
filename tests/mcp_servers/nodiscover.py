"""An MCP server that never answers `server/discover` (as some older servers do: they drop
requests they do not know instead of answering with an error).

    python nodiscover.py [toolbox args...]

It runs toolbox.py (official SDK) behind a filter on stdin that drops every `server/discover`
request; everything else, the initialize handshake included, passes through unchanged.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

METHOD = re.compile(rb'"method"\s*:\s*"([^"]+)"')
LOG = os.environ.get("NODISCOVER_LOG")  # each forwarded request's method is appended here

TOOLBOX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "toolbox.py")

child = subprocess.Popen([sys.executable, TOOLBOX, *sys.argv[1:]], stdin=subprocess.PIPE)
assert child.stdin is not None
try:
    for line in sys.stdin.buffer:
        if b'"server/discover"' in line:
            continue  # never answered
        found = METHOD.search(line)
        if LOG and found:
            with open(LOG, "ab") as fh:
                fh.write(found.group(1) + b"\n")
        child.stdin.write(line)
        child.stdin.flush()
except (BrokenPipeError, KeyboardInterrupt):
    pass
finally:
    try:
        child.stdin.close()
    except BrokenPipeError:
        pass
    sys.exit(child.wait())
