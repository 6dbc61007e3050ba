"""The cached entry-point scan (jarvis.core.entry_points): a run finds the installed plugins
without importlib.metadata when nothing it would read has changed, and sees a plugin
installed, rewritten in place or removed on the very next run. Real distributions (a
`*.dist-info` folder on PYTHONPATH, as pip leaves one) and real `jarvis` processes."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from test_plugins import install_demo
from waiting import wait_for

from jarvis.core import entry_points

PROBE = """
import json, sys
from jarvis.plugins import installed_plugins
found = [[ep.name, ep.value, ep.distribution, ep.version] for ep in installed_plugins()]
print(json.dumps({"plugins": found, "scanned": "importlib.metadata" in sys.modules}))
"""

DEMO = [["broken", "jarvis_demo_broken", "jarvis-demo-plugin", "1.2"],
        ["counter", "jarvis_demo_plugin:PluginCounter", "jarvis-demo-plugin", "1.2"],
        ["echo", "jarvis_demo_plugin:plugin_echo", "jarvis-demo-plugin", "1.2"],
        ["module", "jarvis_demo_module", "jarvis-demo-plugin", "1.2"],
        ["more", "jarvis_demo_plugin:register_more", "jarvis-demo-plugin", "1.2"]]


def _env(cli_env: dict[str, str], site: Path) -> dict[str, str]:
    env = {**cli_env, "PYTHONPATH": str(site)}
    env.pop("JARVIS_LOAD_PLUGINS", None)  # unset: every installed plugin, so the scan runs
    return env


def _probe(env: dict[str, str], cwd: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                          text=True, timeout=60, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _cached(env: dict[str, str], cwd: Path, plugins: list) -> dict:
    """The next runs until one finds `plugins` from the cache (a scan of files changed in the
    last RACY_NS is not cached, so the first run after a change may scan again)."""
    def hit() -> dict | None:
        seen = _probe(env, cwd)
        assert seen["plugins"] == plugins
        return seen if not seen["scanned"] else None

    return wait_for(hit, timeout=30, what="a run served from the entry-point cache")


def _rewrite_in_place(path: Path, old: str, new: str) -> None:
    """Same inode, same size: only the content (and the file's times) change."""
    assert len(old) == len(new)
    before = path.stat()
    text = path.read_text()
    assert old in text
    with open(path, "r+") as fh:
        fh.write(text.replace(old, new))
    after = path.stat()
    assert (after.st_ino, after.st_size) == (before.st_ino, before.st_size)


def test_installed_rewritten_in_place_and_removed_plugins_are_seen_by_the_next_run(
        tmp_path: Path, cli_env: dict[str, str], jarvis_home: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    env = _env(cli_env, site)
    _cached(env, tmp_path, [])

    install_demo(site)
    first = _probe(env, tmp_path)
    assert first == {"plugins": DEMO, "scanned": True}
    _cached(env, tmp_path, DEMO)

    # A plugin loaded from the cache is the real one (its module imported from the value).
    env_echo = {**env, "JARVIS_LOAD_PLUGINS": "echo"}
    shown = subprocess.run([sys.executable, "-m", "jarvis.cli", "plugins", "--json"],
                           env=env_echo, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    echo = next(p for p in json.loads(shown.stdout)["plugins"] if p["name"] == "echo")
    assert echo == {"name": "echo", "value": "jarvis_demo_plugin:plugin_echo",
                    "distribution": "jarvis-demo-plugin", "version": "1.2",
                    "status": "loaded", "tools": ["plugin_echo"], "error": ""}

    # entry_points.txt rewritten in place (same inode and size, as an editor or a
    # careless installer might): the next run sees the new name.
    dist = site / "jarvis_demo_plugin-1.2.dist-info"
    _rewrite_in_place(dist / "entry_points.txt", "echo = ", "ecko = ")
    renamed = [["ecko", *DEMO[2][1:]] if p[0] == "echo" else p for p in DEMO]
    renamed.sort()
    assert _probe(env, tmp_path) == {"plugins": renamed, "scanned": True}
    _cached(env, tmp_path, renamed)

    # Its METADATA rewritten in place: the version reported follows.
    _rewrite_in_place(dist / "METADATA", "Version: 1.2", "Version: 1.3")
    bumped = [[*p[:3], "1.3"] for p in renamed]
    assert _probe(env, tmp_path) == {"plugins": bumped, "scanned": True}
    _cached(env, tmp_path, bumped)

    # Uninstalled: gone on the next run.
    shutil.rmtree(dist)
    assert _probe(env, tmp_path) == {"plugins": [], "scanned": True}
    _cached(env, tmp_path, [])


def test_a_corrupt_or_open_cache_file_means_a_real_scan(
        tmp_path: Path, cli_env: dict[str, str], jarvis_home: Path) -> None:
    site = install_demo(tmp_path / "site")
    env = _env(cli_env, site)
    _cached(env, tmp_path, DEMO)
    folder = jarvis_home / "cache" / "entry-points"
    (entry,) = folder.glob("*.json")
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700

    entry.write_text('{"format": 1, "key": "x", "entry_points": [', encoding="utf-8")
    assert _probe(env, tmp_path) == {"plugins": DEMO, "scanned": True}
    assert json.loads(entry.read_text())["entry_points"]  # rewritten by that scan

    entry.write_text(json.dumps({"format": 1, "key": entry.stem,
                                 "entry_points": [["evil", "os:system", "x", "1"], [1]]}))
    assert _probe(env, tmp_path) == {"plugins": DEMO, "scanned": True}

    _cached(env, tmp_path, DEMO)
    entry.chmod(0o620)  # writable by others: never trusted, made private again
    assert _probe(env, tmp_path) == {"plugins": DEMO, "scanned": True}
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600


def test_the_cached_answer_is_importlib_metadata_s(jarvis_home: Path) -> None:
    """Every group of the real environment: the same entry points, distributions and
    versions from a scan and from the cache."""
    from importlib.metadata import entry_points as installed

    for group in ("console_scripts", "pytest11", "jarvis"):
        expected = sorted((ep.name, ep.value, ep.dist.metadata["Name"] or "",
                           ep.dist.version or "") for ep in installed(group=group))
        scanned = entry_points.entry_points(group, refresh=True)
        cached = entry_points.entry_points(group)
        for found in (scanned, cached):
            assert [(ep.name, ep.value, ep.distribution, ep.version) for ep in found] == expected
    assert os.listdir(jarvis_home / "cache" / "entry-points")


def test_load_imports_what_the_value_names(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "ep_target_mod.py").write_text("class Outer:\n    class Inner:\n        x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        ep = entry_points.EntryPoint("t", "ep_target_mod:Outer.Inner", "g")
        assert ep.load().x == 1
        module = entry_points.EntryPoint("m", "ep_target_mod", "g").load()
        assert module.__name__ == "ep_target_mod"
        bad = entry_points.EntryPoint("b", "not a value!", "g")
        try:
            bad.load()
        except ValueError as exc:
            assert "not a value!" in str(exc)
        else:
            raise AssertionError("a malformed value loaded")
    finally:
        sys.modules.pop("ep_target_mod", None)
