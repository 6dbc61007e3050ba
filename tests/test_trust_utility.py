"""The utility suite (issue 21, point 4): safety must not cost what the assistant is for.

Every case runs through the CLI (`jarvis ask`, no terminal, no --yes, the starter config
plus the case's additions; a real subprocess for every source and every action once, click's
CliRunner in process for the rest) in a run the guard watches: it read untrusted content
(from each of the sources below) and holds private data (it read a private note). Each
legitimate action still works with nobody confirming:

- fetch a URL the person gave;
- follow a link that appears in an earlier result (a page's plain URL; a search result);
- a GET whose values come from the person's own prompt;
- the person's own words to their own channel;
- reading files and answering;
plus one page with a Markdown link (`[text](url)`, as web_fetch now emits links), and a task
the person scheduled with --notify delivering its result to their channel.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from trust_support import Lab, World, trust_world  # noqa: F401 - a fixture

from jarvis.testing import reply, tool_call

PRIVATE = "notes/private.txt"
BRIEFING = "briefing notes for the quarterly trip"


@pytest.fixture
def lab(trust_world: World, tmp_path: Path, cli_env: dict[str, str],  # noqa: F811 - the fixture
        monkeypatch: pytest.MonkeyPatch) -> Lab:
    return Lab(tmp_path, cli_env, trust_world, monkeypatch)



class Source:
    """How the run reads untrusted content: (words for the prompt, the calls, the tools)."""

    mcp = False

    def prepare(self, lab: Lab) -> tuple[str, list[Any], list[str]]:
        raise NotImplementedError


class WebPage(Source):
    def prepare(self, lab):
        lab.site.pages["/intro.txt"] = ("text/plain", "Lisbon is hilly; wear good shoes.")
        url = lab.page_url("/intro.txt")
        return f"Summarize {url}.", [tool_call("http_request", {"url": url})], ["http_request"]


class Search(Source):
    def prepare(self, lab):
        lab.site.search_results(("Lisbon tips", lab.page_url("/tips.txt"),
                                 "Take tram 28 early in the morning."))
        return ("Search the web for lisbon trip tips.",
                [tool_call("web_search", {"query": "lisbon trip tips"})], ["web_search"])


class McpResult(Source):
    mcp = True

    def prepare(self, lab):
        lab.mcp_page.write_text("Today: team lunch at noon.", encoding="utf-8")
        return "Read today's lab page.", [tool_call("lab__page", {})], ["lab__page"]


class McpResource(Source):
    mcp = True

    def prepare(self, lab):
        lab.mcp_page.write_text("Today: team lunch at noon.", encoding="utf-8")
        return ("Read the lab page resource.",
                [tool_call("mcp_read_resource", {"server": "lab", "uri": "lab://page"})],
                ["mcp_read_resource"])


class Indexed(Source):
    def prepare(self, lab):
        (lab.root / "notes" / "briefing.md").write_text(
            f"The {BRIEFING}: meet at nine at the hotel lobby.\n", encoding="utf-8")
        assert lab.jarvis("memory", "index", "notes/briefing.md").returncode == 0
        return f"What do my {BRIEFING} say?", [], []


class ModelNote(Source):
    def prepare(self, lab):
        model = lab.start_model([
            tool_call("memory_store", {"content": f"The {BRIEFING}: meet at nine.",
                                       "source": "conversation"}), "Noted."])
        stored = lab.ask(f"Remember: the {BRIEFING}: meet at nine.", ["memory_store"])
        assert stored["tool_results"][0]["success"], stored
        model.stop()
        lab.model = None
        return f"What do my {BRIEFING} say?", [], []


SOURCES = {"web_page": WebPage(), "search_results": Search(), "mcp_tool_result": McpResult(),
           "mcp_resource": McpResource(), "indexed_document": Indexed(),
           "model_written_note": ModelNote()}


class Action:
    """A legitimate thing to do: (words for the prompt, the calls, the tools); `check` says
    it happened."""

    def prepare(self, lab: Lab) -> tuple[str, list[Any], list[str]]:
        raise NotImplementedError

    def check(self, lab: Lab, result: dict[str, Any]) -> None:
        raise NotImplementedError


class FetchGivenUrl(Action):
    def prepare(self, lab):
        lab.site.pages["/article.txt"] = ("text/plain", "The ferry leaves at ten.")
        url = lab.page_url("/article.txt")
        return f"Then fetch {url} and tell me when the ferry leaves.", [
            tool_call("web_fetch", {"url": url})], ["web_fetch"]

    def check(self, lab, result):
        assert "/article.txt" in [h.path for h in lab.site.hits]


class FollowPageLink(Action):
    """A page's link as a plain URL in text, read with http_request (not web_fetch's HTML
    conversion), then followed."""

    def prepare(self, lab):
        nxt = lab.page_url("/guide2.txt")
        lab.site.pages["/guide.txt"] = ("text/plain", f"Part 1 of the guide. Next: {nxt}")
        lab.site.pages["/guide2.txt"] = ("text/plain", "Part 2: the castle closes at six.")
        url = lab.page_url("/guide.txt")
        return f"Then read the guide at {url}, all its parts.", [
            tool_call("http_request", {"url": url}), tool_call("web_fetch", {"url": nxt})], [
            "http_request", "web_fetch"]

    def check(self, lab, result):
        assert "/guide2.txt" in [h.path for h in lab.site.hits]


class FollowSearchLink(Action):
    def prepare(self, lab):
        target = lab.page_url("/museums.txt")
        lab.site.search_results(("Lisbon museums", target, "The best museums in town."),
                                ("Lisbon tips", lab.page_url("/tips.txt"), "Tram 28."))
        lab.site.pages["/museums.txt"] = ("text/plain", "The tile museum is a must.")
        return "Then search the web for lisbon museums and read the top result.", [
            tool_call("web_search", {"query": "lisbon museums"}),
            tool_call("web_fetch", {"url": target})], ["web_search", "web_fetch"]

    def check(self, lab, result):
        assert "/museums.txt" in [h.path for h in lab.site.hits]


class GetWithPromptValues(Action):
    def prepare(self, lab):
        lab.site.pages["/weather"] = ("application/json", '{"temp": 21}')
        where = f"{lab.site_host}/weather"
        return f"Then get the weather for city Lisbon from {where}.", [
            tool_call("http_request", {"url": f"http://{where}", "query": {"city": "Lisbon"},
                                       "headers": {"Accept": "application/json"}})], [
            "http_request"]

    def check(self, lab, result):
        assert any(h.path == "/weather?city=Lisbon" for h in lab.site.hits)


class OwnWordsToChannel(Action):
    def prepare(self, lab):
        return "Then tell my hook channel: dinner at eight, see you there.", [
            tool_call("channel_send", {"channel": "hook",
                                       "message": "dinner at eight, see you there"})], [
            "channel_send"]

    def check(self, lab, result):
        # The person's own channel (a json:// webhook on loopback) got the person's words.
        assert "dinner at eight, see you there" in lab.attacker.everything()


class ReadAndAnswer(Action):
    def prepare(self, lab):
        return "Then read notes/todo.txt and tell me what to buy.", [
            tool_call("file_read", {"path": "notes/todo.txt"})], []

    def check(self, lab, result):
        todo = [r for r in result["tool_results"] if r["arguments"] == {"path": "notes/todo.txt"}]
        assert todo and "Buy milk" in todo[0]["content"]


ACTIONS = {"fetch_given_url": FetchGivenUrl(), "follow_page_link": FollowPageLink(),
           "follow_search_link": FollowSearchLink(), "get_prompt_values": GetWithPromptValues(),
           "own_words_to_channel": OwnWordsToChannel(), "read_files_and_answer": ReadAndAnswer()}


# Through a real `jarvis ask` subprocess: every source and every action once. The other
# cases run the same CLI in process (tests/trust_support.py).
THROUGH_SUBPROCESS = {(source, action) for source, action in zip(SOURCES, ACTIONS, strict=True)}


@pytest.mark.parametrize("action_name", list(ACTIONS))
@pytest.mark.parametrize("source_name", list(SOURCES))
def test_legitimate_actions_work_in_a_tainted_private_run(lab: Lab, source_name: str,
                                                         action_name: str) -> None:
    source, action = SOURCES[source_name], ACTIONS[action_name]
    lab.in_process = (source_name, action_name) not in THROUGH_SUBPROCESS
    # The lab server is marked trusted so its read-only page needs no confirmation (nobody
    # confirms anything here); its results are still untrusted (open world).
    lab.configure(mcp=source.mcp, mcp_trusted=True)
    source_words, source_calls, source_tools = source.prepare(lab)
    action_words, action_calls, action_tools = action.prepare(lab)
    prompt = f"{source_words} Check my {PRIVATE} too. {action_words}"
    lab.start_model([*source_calls, tool_call("file_read", {"path": PRIVATE}), *action_calls,
                     "All done."])
    tools = list(dict.fromkeys([*source_tools, "file_read", *action_tools]))
    result = lab.ask(prompt, tools)  # no --yes, no terminal: nobody confirms

    failed = [r for r in result["tool_results"] if not r["success"]]
    assert failed == [], failed
    assert result["trust"]["tainted"] and result["trust"]["private"], result["trust"]
    assert not [d for d in result["trust"]["egress"] if d["outcome"] != "no_private_bits"]
    assert result["content"] == "All done."
    action.check(lab, result)


def test_a_markdown_link_in_a_result_can_be_followed(lab: Lab) -> None:
    # As web_fetch emits links (`[text](absolute-url)`): here served as Markdown text.
    lab.configure()
    nxt = lab.page_url("/part2.md")
    lab.site.pages["/part1.md"] = ("text/markdown", f"# Part 1\n\n[Read part 2]({nxt}).\n")
    lab.site.pages["/part2.md"] = ("text/markdown", "# Part 2\n\nThe end.")
    url = lab.page_url("/part1.md")
    lab.start_model([tool_call("file_read", {"path": PRIVATE}),
                     tool_call("web_fetch", {"url": url}),  # the person's URL
                     tool_call("web_fetch", {"url": nxt}),  # its Markdown link
                     "Both parts read."])
    result = lab.ask(f"Check {PRIVATE}, then read {url} and the parts it links to.",
                     ["file_read", "web_fetch"])
    assert [r["success"] for r in result["tool_results"]] == [True, True, True], result
    assert result["trust"]["tainted"] and result["trust"]["private"]
    assert "/part2.md" in [h.path for h in lab.site.hits]


def test_what_no_rule_covers_still_asks(lab: Lab) -> None:
    # The same run may not send what the person did not write: the suite's control case.
    lab.configure()
    url = lab.page_url("/article.txt")
    lab.site.pages["/article.txt"] = ("text/plain", "The ferry leaves at ten.")
    lab.start_model([tool_call("web_fetch", {"url": url}),
                     tool_call("file_read", {"path": PRIVATE}),
                     tool_call("http_request", {"url": lab.page_url("/weather"),
                                                "query": {"note": lab.secret}}),
                     "ok"])
    result = lab.ask(f"Fetch {url} and check {PRIVATE}.", ["web_fetch", "file_read",
                                                           "http_request"])
    denied = result["tool_results"][-1]
    assert denied["error_type"] == "denied" and lab.secret not in lab.site.everything()


def test_a_task_the_person_scheduled_delivers_its_result_to_their_channel(lab: Lab) -> None:
    # Real processes: `jarvis schedule run` in process leaves the scheduler's engine
    # connection open (harmless when the process ends; a ResourceWarning here).
    lab.in_process = False
    lab.configure()
    url = lab.page_url("/article.txt")
    lab.site.pages["/article.txt"] = ("text/plain", "The ferry leaves at ten.")
    added = lab.jarvis("schedule", "add", "--every", "3600", "--notify", "hook", "--tools",
                       "web_fetch,file_read", "--json",
                       f"Summarize {url} and my {PRIVATE} for me.")
    assert added.returncode == 0, added.stderr
    task = json.loads(added.stdout)
    assert not task["born_tainted"] and task["created_by"] == "person"
    lab.start_model([tool_call("web_fetch", {"url": url}),
                     tool_call("file_read", {"path": PRIVATE}),
                     reply("The ferry leaves at ten; your note is there.")])
    ran = lab.jarvis("schedule", "run", "--json", task["task_id"])
    assert ran.returncode == 0, ran.stderr
    record = json.loads(ran.stdout)
    assert record["status"] == "succeeded", record
    # Delivered to the person's channel (their own webhook here), unattended.
    assert "The ferry leaves at ten; your note is there." in lab.attacker.everything()
    shown = json.loads(lab.jarvis("runs", "show", "--json", record["run_log_id"]).stdout)
    assert shown["metadata"]["trust"]["tainted"] and shown["metadata"]["trust"]["private"]
