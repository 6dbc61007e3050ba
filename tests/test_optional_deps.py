"""Without the optional packages (trafilatura, ddgs, apprise) the tools that need them fail
with one clear line naming the pip command; run in a subprocess where importing them fails."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from net_support import TESTS_DIR, Reply, serving

SCRIPT = textwrap.dedent("""
    import json, sys
    for name in ("trafilatura", "ddgs", "apprise"):
        sys.modules[name] = None  # `import name` now raises ImportError, as if not installed
    from jarvis.tools.channel_tools import ChannelSendTool
    from jarvis.core.config import JarvisConfig
    from jarvis.tools.web_fetch import WebFetchTool
    from jarvis.tools.web_search import WebSearchTool

    url, hostport = sys.argv[1], sys.argv[2]
    config = JarvisConfig.model_validate({"channels": {"x": {"url": "json://127.0.0.1:9/",
                                                             "confirm": False}}})
    out = [WebFetchTool(allowed_hosts=[hostport]).execute(url=url).content,
           WebSearchTool().execute(query="x").content,
           ChannelSendTool(config=config).execute(channel="x", message="hi").content]
    print(json.dumps(out))
""")


def test_missing_packages_name_the_install_command():
    page = "<html><head><title>t</title></head><body><p>text</p></body></html>"
    with serving({"/": lambda s: Reply(200, page, content_type="text/html")}) as server:
        proc = subprocess.run([sys.executable, "-c", SCRIPT, server.url("/"), server.hostport],
                              capture_output=True, text=True, timeout=60, cwd=TESTS_DIR)
    assert proc.returncode == 0, proc.stderr
    fetch, search, send = json.loads(proc.stdout)
    assert fetch == ("web_fetch needs the trafilatura package, which cannot be imported "
                     "(trafilatura): pip install 'jarvis[web]'")
    assert search == ("web_search backend duckduckgo needs the ddgs package, which is not "
                      "installed: pip install 'jarvis[web]'")
    assert send == ("channels need the apprise package, which is not installed: "
                    "pip install 'jarvis[channels]'")
