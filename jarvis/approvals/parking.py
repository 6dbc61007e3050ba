"""Parking a run that needs the person, and continuing it: what `Jarvis.ask_full` and
`Jarvis.resume` call (the SDK keeps a few lines; the logic is here).

While a run goes, `Parking.hook` is its executor's person-needed hook (jarvis.tools.gate): a
call whose tool and destinations a grant covers never reaches it (grants are person-written
rules of the run's RunTrust, `add_grants`); a continued run's calls the person answered get
their answer (approved only for exactly the call the person saw: same tool, same hash of
what it sends); confirmation-gated tools approved by name, and the caller's own approvers,
answer as before; anything else is parked (`on_approval="defer"`, scheduled runs), or
refused as before.

A run with a parked call stops after that turn (jarvis.agents.base). `Parking.settle` then
stores its state and one request per parked call (expiring after `[approvals]
expire_after`), tells the person on `[approvals] notify`, and makes the result say
`status: "parked"` with `pending_approvals`. `resume_arguments` claims a parked run whose
requests are answered (once: a compare-and-set in the store) and gives ask_full what it
needs to continue it where it stopped.
"""

from __future__ import annotations

import getpass
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from jarvis.approvals.records import (
    APPROVED,
    CLI,
    DENIED,
    EXPIRED,
    INBOUND,
    PARKED,
    READY,
    RESUMED,
    SCHEDULER,
    SDK,
    SERVE,
    Approval,
    ParkedRun,
)
from jarvis.errors import JarvisError, UserError
from jarvis.trust.request import CONFIRMATION, Verdict

log = logging.getLogger("jarvis.approvals")

ON_APPROVAL = (None, "deny", "defer")


@dataclass(slots=True)
class ResumePlan:
    """A claimed parked run: its state, the person's answers by call id, and the epoch that
    fences its writes."""

    run: ParkedRun
    answers: dict[str, Approval] = field(default_factory=dict)

    @property
    def state(self) -> dict[str, Any]:
        return self.run.state


def person() -> str:
    """Who is answering, as recorded: the user name of this process."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return f"uid {os.geteuid()}"


def add_grants(config: Any, trust: Any, task_id: str | None = None) -> int:
    """Put the person's active grants (all tasks', and `task_id`'s) into the run's rules, so
    the executor lets the calls they cover through before asking; returns how many. No
    store yet: none. A store that cannot be read: a warning, and none (every call asks)."""
    try:
        from jarvis.approvals.stores import open_approvals

        store = open_approvals(config, create=False)
    except JarvisError as exc:
        log.warning("jarvis: warning: grants not applied, the approvals store cannot be "
                    "opened: %s", exc)
        return 0
    if store is None:
        return 0
    try:
        grants = [g for g in store.grants() if g.task_id in (None, task_id)]
    except Exception as exc:  # noqa: BLE001 - fail closed: without grants every call asks
        log.warning("jarvis: warning: grants not applied: %s", exc)
        return 0
    finally:
        store.close()
    if grants:
        from jarvis.trust.run import EgressRules

        trust.rules = trust.rules.merged(EgressRules(grants=tuple(g.rule() for g in grants)))
    return len(grants)


class Parking:
    """One ask's part in approvals: its RunTrust (with the person's grants), its hook, and
    what happens when it parks (see the module docstring).

    Args:
        system: the Jarvis asking (its config).
        query, history, trust, allow_egress: what the run's RunTrust starts from (as
            RunTrust.for_ask takes them).
        on_approval: "defer" (park what nobody may answer now), "deny" or None (deny).
        approved_tools, run_metadata: as ask_full takes them.
        people: (on_person_needed, approver, egress_approver) of the caller.
        resume: the claimed parked run this ask continues (`resume_arguments`), or None.
    """

    def __init__(self, system: Any, query: str, history: Any, trust: Any, allow_egress: Any,
                 on_approval: str | None, approved_tools: Any, run_metadata: Any,
                 people: tuple[Any, Any, Any], resume: ResumePlan | None = None) -> None:
        from jarvis.runlog import new_run_id
        from jarvis.trust.run import RunTrust

        if on_approval not in ON_APPROVAL:
            raise UserError(f"on_approval must be 'defer' (park the run until the person "
                            f"answers) or 'deny', not {on_approval!r}")
        self.system = system
        self.resume = resume
        self.on_approval = on_approval
        self.run_id = resume.run.run_id if resume is not None else new_run_id()
        self.trust = RunTrust.for_ask(system.config, query, history=history, run_id=self.run_id,
                                      given=trust, allow_egress=allow_egress)
        self.defer = on_approval == "defer" or (resume is not None and on_approval != "deny")
        self.user_hook, self.approver, self.egress_approver = people
        self.approved = frozenset(approved_tools or ())
        self.run_metadata = dict(run_metadata or {})
        scheduled = self.run_metadata.get("scheduled_run") or {}
        self.task_id = scheduled.get("task_id")
        self.sched_run_id = scheduled.get("run_id")
        self.requests: dict[str, Any] = {}
        add_grants(system.config, self.trust, self.task_id)

    def check(self, structured: Any) -> str:
        """Refuse what cannot park (a structured answer is checked in one go); the run id."""
        if self.on_approval == "defer" and structured is not None:
            raise UserError("on_approval='defer' cannot be combined with output_schema: a "
                            "structured answer is checked in one go")
        return self.run_id

    @property
    def options(self) -> dict[str, Any]:
        """The ToolExecutor arguments that are the run's: its metadata, its trust, and who
        answers when a person is needed."""
        return {"metadata": self.run_metadata, "trust": self.trust,
                "egress_approver": self.egress_approver, "on_person_needed": self.hook}

    @property
    def hook(self) -> Any:
        """The executor's on_person_needed: this object's, when the run may park (it parks
        or continues a run, or the caller's own hook may answer PARK); else None (the
        executor's defaults: approver, egress_approver)."""
        if self.defer or self.resume is not None or self.user_hook is not None:
            return self._decide
        return None

    def _decide(self, request: Any) -> Verdict:
        answer = self.resume.answers.get(request.call_id) if self.resume else None
        if answer is not None:
            if (answer.status == APPROVED and answer.tool == request.tool
                    and answer.request.get("digest") == request.digest):
                return Verdict.APPROVE
            if answer.status == DENIED:
                return Verdict.DENY
        if self.user_hook is not None:
            verdict = Verdict.of(self.user_hook(request))
            return self._park(request) if verdict is Verdict.PARK else verdict
        if request.kind == CONFIRMATION:
            if request.tool in self.approved:
                return Verdict.APPROVE
            if self.approver is not None and _ask(self.approver, request, confirmation=True):
                return Verdict.APPROVE
        elif self.egress_approver is not None and _ask(self.egress_approver, request):
            return Verdict.APPROVE
        return self._park(request) if self.defer else Verdict.DENY

    def _park(self, request: Any) -> Verdict:
        self.requests[str(request.call_id)] = request
        return Verdict.PARK

    def run(self, runner: Any, query: str, history: Any) -> Any:
        """The agent's run: from the start, or (resuming) from where it parked."""
        if self.resume is None:
            return runner.run(query, history=history)
        from jarvis.approvals.state import restore_messages, result_from_dict

        state = self.resume.state
        fence = getattr(getattr(runner, "executor", None), "fence", None)
        if fence is not None and hasattr(fence, "restore_positions"):
            # The continuation's effects follow the parked part's: same occurrence, next keys.
            fence.restore_positions(state.get("effects"))
        run = dict(state.get("run") or {})
        run["tool_results"] = [result_from_dict(r) for r in run.get("tool_results") or []]
        return runner.resume(restore_messages(state), run, state.get("pending") or [])

    def settle(self, out: dict[str, Any], status: str, result: Any, record: dict[str, Any],
               runner: Any) -> str:
        """After the run: park it (store its state and requests, tell the person) when a call
        waits; record how a continuation ended. Returns the run's status. `record` (the run
        log's: query, agent, model, tools, source) and `runner` (the agent: its limits) are
        what a continuation rebuilds the ask from."""
        pending = out["metadata"].pop("parked", None)
        if not pending:
            if self.resume is not None:
                self._finish(status)
            return status
        from jarvis.approvals.state import snapshot
        from jarvis.approvals.stores import open_approvals

        config = self.system.config
        now = time.time()
        expires = now + config.approvals.expire_seconds
        approvals = []
        for item in pending:
            request = self.requests.get(str(item["call_id"]))
            if request is None:  # parked by a hook of the caller's that kept no request
                raise JarvisError(f"call {item['call_id']} was parked without a request")
            item["approval_id"] = request.id
            approvals.append(Approval(
                id=request.id, run_id=self.run_id, call_id=str(item["call_id"]),
                tool=request.tool, kind=request.kind, request=request.to_dict(),
                created_at=now, expires_at=expires, task_id=self.task_id))
        result.metadata["parked"] = pending
        ask = {"query": record.get("query"), "agent": record.get("agent"),
               "tools": list(record.get("tools") or []), "model": record.get("model"),
               "source": record.get("source"), "approved_tools": sorted(self.approved),
               "run_metadata": self.run_metadata, "max_turns": runner.max_turns,
               "temperature": runner.temperature, "max_tokens": runner.max_tokens,
               "on_approval": self.on_approval or "defer",
               "budget": _budget_left(runner)}
        state = snapshot(ask=ask, result=result, trust=self.trust)
        fence = getattr(getattr(runner, "executor", None), "fence", None)
        if fence is not None and hasattr(fence, "positions"):
            state["effects"] = fence.positions()  # the effect keys the run used so far
        parked = ParkedRun(run_id=self.run_id, state=state,
                           resumer=_resumer(self.sched_run_id, record.get("source"),
                                            self.run_metadata),
                           task_id=self.task_id, sched_run_id=self.sched_run_id,
                           created_at=self.resume.run.created_at if self.resume else now,
                           expires_at=expires)
        store = open_approvals(config)
        try:
            stored = store.park(parked, approvals,
                                epoch=self.resume.run.epoch if self.resume else None)
            if stored is None:
                raise JarvisError(f"run {self.run_id} was taken over by another continuation "
                                  f"while this one ran; nothing was recorded from it")
            if parked.resumer != INBOUND:  # an inbound's run asks in its own chat instead
                from jarvis.approvals.notify import notify

                notify(config, store, approvals)
        finally:
            store.close()
        out["status"] = "parked"
        out["pending_approvals"] = [a.to_dict() for a in approvals]
        out["metadata"]["approvals"] = [a.id for a in approvals]
        return "parked"

    def _finish(self, status: str) -> None:
        from jarvis.approvals.stores import open_approvals

        store = open_approvals(self.system.config)
        try:
            store.finish(self.run_id, self.resume.run.epoch, status)
        finally:
            store.close()


def _resumer(sched_run_id: Any, source: Any, run_metadata: dict[str, Any]) -> str:
    """Who continues a run that parks (jarvis.approvals.records)."""
    if sched_run_id is not None:
        return SCHEDULER
    if isinstance(run_metadata.get("inbound"), dict):
        return INBOUND
    return {"serve": SERVE, "cli": CLI}.get(str(source), SDK)


def _ask(approver: Any, request: Any, confirmation: bool = False) -> bool:
    try:
        ask = getattr(approver, "approve_request", None)
        if callable(ask):
            return bool(ask(request))
        if confirmation:
            return bool(approver(request.spec, request.arguments))
        return bool(approver(request))
    except Exception:  # noqa: BLE001 - an approver that breaks does not approve
        return False


def _answer(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("approve", "approved", "yes", "y", "allow"):
        return True
    if text in ("deny", "denied", "no", "n", "refuse"):
        return False
    raise UserError(f"a decision is 'approve' or 'deny' (or True / False), not {value!r}")


def resume(self: Any, run_id: str, decisions: dict[str, Any] | None = None,
           **kwargs: Any) -> dict[str, Any]:
    """Continue a run that parked (`ask_full(on_approval="defer")`), once, where it stopped:
    `decisions` maps approval ids to "approve" / "deny" (answers given elsewhere, e.g.
    `jarvis approvals approve ID`, count too). Returns what ask_full returns (the run may
    park again). Other ask_full arguments (on_token, approvers) may be given. This is
    `Jarvis.resume`."""
    out = self.ask_full(**resume_arguments(self, run_id, decisions, kwargs), **kwargs)
    # A run that parked as a conversation's turn (`jarvis ask`, an inbound message): the turn
    # gets its answer now.
    from jarvis.conversations.session import answer_parked_turn

    answer_parked_turn(self, out)
    return out


def resume_arguments(system: Any, run_id: str, decisions: dict[str, Any] | None = None,
                     options: dict[str, Any] | None = None) -> dict[str, Any]:
    """ask_full's arguments that continue the parked run `run_id`, which this call claims
    (once). `decisions` ({approval id: "approve" | "deny"}) are recorded first; requests
    answered already (the CLI, the link, a chat) keep their answers. UserError when the run
    is unknown, still waits for an answer, was continued already, or expired. `options`:
    the caller's other ask_full arguments; `_scheduled` (taken out of them) is the
    scheduler continuing a run its ledger gave it."""
    from jarvis.approvals.store import ApprovalError
    from jarvis.approvals.stores import open_approvals

    scheduled = bool((options or {}).pop("_scheduled", False))
    # serve continuing its chat run: its claim is the store's compare-and-set alone (no
    # ledger decided it first), so a run continued already is never taken again.
    served = bool((options or {}).pop("_served", False))
    # the inbound listener continuing its message's run (jarvis.inbound.parked).
    inbound = bool((options or {}).pop("_inbound", False))

    store = open_approvals(system.config)
    try:
        expire_due(system.config, store)
        found = store.get_run(str(run_id), with_state=False)
        if found is None:
            raise UserError(f"no parked run {str(run_id)[:40]!r}; `jarvis approvals list` shows "
                            f"the runs waiting for you")
        if found.resumer == SCHEDULER and not scheduled:
            raise UserError(f"run {found.run_id} belongs to scheduled task {found.task_id}: "
                            f"the scheduler continues it once its requests are answered")
        if found.resumer == SERVE and not served:
            raise UserError(f"run {found.run_id} is a chat run of jarvis serve: the server "
                            f"continues it once its requests are answered")
        if found.resumer == INBOUND and not inbound:
            raise UserError(f"run {found.run_id} answers a message to `jarvis listen`: the "
                            f"listener continues it once its requests are answered and sends "
                            f"its answer where the message came from")
        for approval_id, value in (decisions or {}).items():
            approve = _answer(value)
            try:
                store.decide(str(approval_id), approve, by=f"{person()} (sdk)")
            except ApprovalError as exc:
                same = APPROVED if approve else DENIED
                if exc.approval is None or exc.approval.status != same:
                    raise UserError(str(exc)) from None
        claimed = store.claim(found.run_id, again=scheduled)
        if claimed is None:
            raise UserError(_not_claimable(store, found.run_id))
        by_id = {a.id: a for a in store.of_run(found.run_id)}
    finally:
        store.close()
    state = claimed.state
    answers = {}
    for item in state.get("pending") or []:
        approval = by_id.get(str(item.get("approval_id")))
        if approval is not None:
            answers[str(item["call_id"])] = approval
    ask = dict(state.get("ask") or {})
    return {"query": ask.get("query") or "", "agent": ask.get("agent"),
            "tools": list(ask.get("tools") or []), "model": ask.get("model"),
            "approved_tools": list(ask.get("approved_tools") or []), "context": False,
            "source": ask.get("source") or "sdk", "run_metadata": ask.get("run_metadata"),
            "trust": state.get("trust"), "max_turns": ask.get("max_turns"),
            "temperature": ask.get("temperature"), "max_tokens": ask.get("max_tokens"),
            "on_approval": ask.get("on_approval") or "defer", "budget": ask.get("budget"),
            "_resume": ResumePlan(claimed, answers)}


def _budget_left(runner: Any) -> dict[str, Any] | None:
    """What the parked run's budget leaves for its continuation (jarvis.tools.budget)."""
    meter = getattr(getattr(runner, "executor", None), "budget", None)
    return meter.remaining() if meter is not None else None


def _not_claimable(store: Any, run_id: str) -> str:
    current = store.get_run(run_id, with_state=False)
    if current is None:
        return f"no parked run {run_id!r}"
    if current.status == PARKED:
        waiting = [a.id for a in store.of_run(run_id) if a.status == "pending"]
        return (f"run {run_id} still waits for approval {', '.join(waiting)}: answer it "
                f"(`jarvis approvals approve ID` / `deny ID`, or pass decisions=)")
    if current.status == RESUMED:
        return f"run {run_id} was continued already (a parked run continues once)"
    if current.status == EXPIRED:
        return f"run {run_id} expired waiting for approval; it ended recorded 'expired'"
    if current.status == READY:
        return f"run {run_id} could not be claimed; try again"
    return f"run {run_id} is {current.status}"


def expire_due(config: Any, store: Any) -> list[ParkedRun]:
    """Requests past their time become `expired`, their runs with them; each such run's
    entry in this machine's run log is recorded `expired`. Returns the runs (the scheduler
    records its own side)."""
    runs = store.expire_due()
    if not runs:
        return runs
    from jarvis.runlog import RunLog, run_log_enabled, run_log_path

    if run_log_enabled(config):
        log_ = RunLog(run_log_path(config))
        try:
            for run in runs:
                try:
                    log_.set_status(run.run_id, EXPIRED, "expired: nobody answered its approval "
                                    "request in time ([approvals] expire_after)")
                except JarvisError as exc:
                    log.warning("approvals: could not record run %s as expired: %s", run.run_id,
                                exc)
        finally:
            log_.close()
    return runs
