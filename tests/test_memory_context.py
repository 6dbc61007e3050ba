"""The memory context's relevance threshold, measured on a labelled set (issue 25, item 6):
small talk and questions the store cannot help with pull nothing; questions about a note pull
that note. tests/fixtures/context/labelled.json holds the notes and the questions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jarvis.memory.context import memory_context
from jarvis.memory.sqlite import SQLiteMemory
from jarvis.testing import FakeOpenAIServer

REPO = Path(__file__).resolve().parent.parent
LABELLED = json.loads((REPO / "tests" / "fixtures" / "context" / "labelled.json").read_text())
# Measured with the default threshold ([memory] context_min_match = 0.5); docs/memory.md
# quotes these figures. A question whose note lacks one of its two key words ("Which flowers
# does Anna like?": the note says orchids) is missed: precision first.
MIN_ON_TOPIC = 17


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    memory = SQLiteMemory(db_path=tmp_path_factory.mktemp("context") / "memory.db")
    for source, text in LABELLED["notes"].items():
        memory.store(text, source=source)
    yield memory
    memory.close()


def test_small_talk_and_off_topic_questions_pull_nothing(store) -> None:
    pulled = {q: memory_context(store, q)[1] for q in LABELLED["off_topic"]}
    assert {q: s for q, s in pulled.items() if s} == {}
    assert len(pulled) >= 30


def test_questions_about_a_note_pull_it(store) -> None:
    found = [q for q, source in LABELLED["on_topic"] if source in memory_context(store, q)[1]]
    assert len(found) >= MIN_ON_TOPIC, sorted(set(q for q, _ in LABELLED["on_topic"]) - set(found))


def test_the_old_threshold_failed_this_set(store) -> None:
    """The measure is meaningful: one shared word (the old 'half the key words' of a two-word
    question, matched as a word's beginning) pulled notes for 14 of the 35 (measured with the
    old module; this is its rule, restated)."""
    import math
    import re

    def old_relevant(terms, text):
        needed = max(1, math.ceil(0.5 * min(len(terms), 6) - 1e-9))
        return sum(bool(re.search(r"(?<!\w)" + re.escape(t), text.lower())) for t in terms) >= needed

    hits = 0
    for question in LABELLED["off_topic"]:
        terms = [t for t in re.findall(r"[^\W_]+", question.lower()) if len(t) > 1
                 and t not in {"you", "me", "what", "is", "the", "how", "are", "can", "a", "it"}]
        if terms and any(old_relevant(terms, r.content) for r in store.retrieve(" ".join(terms))):
            hits += 1
    assert hits >= 10


@pytest.mark.parametrize(("question", "pulled"), [
    ("hi", False), ("tell me a joke", False), ("how are you today?", False),
    ("When is Anna's birthday?", True), ("Where is the spare key?", True)])
def test_jarvis_ask_adds_context_only_for_a_relevant_question(cli_env, tmp_path, question,
                                                              pulled) -> None:
    env = dict(cli_env)
    notes = tmp_path / "notes"
    notes.mkdir()
    for source, text in LABELLED["notes"].items():
        (notes / source).write_text(text + "\n")
    subprocess.run([sys.executable, "-m", "jarvis.cli", "memory", "index", str(notes)], env=env,
                   cwd=tmp_path, capture_output=True, check=True)
    with FakeOpenAIServer(default="Sure.") as fake:
        env.update(JARVIS_ENGINE="vllm", VLLM_HOST=fake.url, JARVIS_MODEL="test-model")
        out = subprocess.run([sys.executable, "-m", "jarvis.cli", "ask", question], env=env,
                             cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        system = [m for m in fake.requests[0]["messages"] if m["role"] == "system"]
    assert ("[memory] context from: " in out.stderr) is pulled
    assert bool(system and "Relevant passages from the user's memory" in system[0]["content"]) \
        is pulled
