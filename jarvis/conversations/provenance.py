"""A conversation's provenance across its runs: the adapter to the trust design (jarvis.trust).

A conversation keeps the trust state of its runs (`RunTrust.to_dict()`): what made it tainted
(untrusted content read: a web page, a forwarded mail, an attachment) or private, and the
person's own words so far. The next run starts from it, so a taint from an earlier turn
carries into every later one (its content is in the history), and the person's earlier
messages keep counting as theirs. A new conversation (`/clear` in `jarvis chat`) starts clean.

Everything that touches the trust package goes through here: `Provenance.run_options()` is what
a run gets, `Provenance.after(result)` takes the run's state back.
"""

from __future__ import annotations

import time
from typing import Any

# Bounds of what a conversation keeps of the state (the trust package bounds its own too);
# dropping person texts only makes the guard stricter, never looser.
MAX_PERSON_TEXTS = 200
MAX_PERSON_CHARS = 1_000_000
MAX_REASONS = 50
# The parts of a run's trust state that carry into the next turn.
CARRIED = ("tainted_by", "private_by", "person_texts", "public_links")


class Provenance:
    """The trust state a conversation carries from run to run (JSON-safe, bounded)."""

    def __init__(self, state: dict[str, Any] | None = None) -> None:
        state = dict(state or {})
        self.state: dict[str, Any] = state
        state.setdefault("tainted_by", [])
        state.setdefault("private_by", [])
        state.setdefault("person_texts", [])

    # --- what the caller knows about the next run -----------------------------------------
    @property
    def tainted(self) -> bool:
        return bool(self.state["tainted_by"])

    @property
    def private(self) -> bool:
        return bool(self.state["private_by"])

    def add_person_text(self, text: str | None) -> None:
        """The person's own words (a typed question, an allow-listed sender's message)."""
        if text and text.strip():
            texts = self.state["person_texts"]
            texts.append(text)
            while len(texts) > MAX_PERSON_TEXTS or (
                    len(texts) > 1 and sum(map(len, texts)) > MAX_PERSON_CHARS):
                texts.pop(0)

    def mark_tainted(self, reason: str, *, tool: str = "inbound") -> None:
        """Untrusted content entered the conversation outside a tool call."""
        self._add("tainted_by", {"call_id": None, "tool": tool, "reason": reason,
                                 "at": time.time()})

    def _add(self, key: str, entry: dict[str, Any]) -> None:
        entries = self.state[key]
        if any(e.get("reason") == entry["reason"] and e.get("tool") == entry["tool"]
               for e in entries):
            return
        entries.append(entry)
        del entries[:-MAX_REASONS]

    # --- the run -----------------------------------------------------------------------------
    def run_options(self, jarvis: Any) -> dict[str, Any]:
        """Keyword arguments for `jarvis.ask_full` that start the run from this state: a
        RunTrust made from it (`trust=`), so the run's executor guards its egress from the
        first call on."""
        from jarvis.trust import run as trust
        # What the content of the conversation carries, not what one run was allowed:
        # egress rules a person gave one ask (--allow-egress), its decisions and its count of
        # unconfirmed calls stay with that run; the limit of such calls is the config's.
        seed = {k: v for k, v in self.state.items() if k in CARRIED}
        limit = getattr(getattr(jarvis.config, "egress", None), "max_unconfirmed_per_run", None)
        if isinstance(limit, int):
            seed["max_unconfirmed"] = limit
        return {"trust": trust.RunTrust.from_dict(seed)}

    def after(self, result: dict[str, Any] | None, options: dict[str, Any] | None = None) -> None:
        """Take the finished run's state back: its RunTrust (grown by its tool calls) when
        there was one, else what the run log recorded of it."""
        run_trust = (options or {}).get("trust")
        recorded = None
        if run_trust is not None and hasattr(run_trust, "to_dict"):
            recorded = run_trust.to_dict()
        elif result is not None:
            recorded = (result.get("metadata") or {}).get("trust")
        if isinstance(recorded, dict):
            merged = dict(recorded)
            for key in ("tainted_by", "private_by"):
                seen = {(e.get("tool"), e.get("reason")) for e in merged.get(key) or []}
                extra = [e for e in self.state[key] if (e.get("tool"), e.get("reason")) not in seen]
                merged[key] = (extra + list(merged.get(key) or []))[-MAX_REASONS:]
            texts = list(merged.get("person_texts") or [])
            merged["person_texts"] = texts or list(self.state["person_texts"])
            self.state = Provenance(merged).state

    def to_dict(self) -> dict[str, Any]:
        return self.state

    def summary(self) -> str:
        """One line for people: clean, or what tainted it / made it private."""
        parts = []
        if self.tainted:
            reasons = "; ".join(str(e.get("reason")) for e in self.state["tainted_by"][:3])
            parts.append(f"tainted ({reasons})")
        if self.private:
            reasons = "; ".join(str(e.get("reason")) for e in self.state["private_by"][:3])
            parts.append(f"holds private data ({reasons})")
        return ", ".join(parts) or "clean"


def merged_state(stored: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """`new` with every mark of `stored` it lacks (a state only grows: marks are never
    dropped, whoever wrote last)."""
    if not stored:
        return new
    merged = dict(new)
    for key in ("tainted_by", "private_by"):
        have = {(e.get("tool"), e.get("reason")) for e in merged.get(key) or []}
        extra = [e for e in stored.get(key) or [] if (e.get("tool"), e.get("reason")) not in have]
        merged[key] = (extra + list(merged.get(key) or []))[-MAX_REASONS:]
    return merged
