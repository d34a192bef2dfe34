"""Deciding proposed tool calls with the rules, and the approvals that follow.

`CallApprovals` is the part of the run loop (`runtime.engine.Driver`) that plans a model
answer's calls (an execution key each, a rule verdict each, approval requests for those that
need one, suspending the run until they are answered) and brings the answers into the state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_harness.models.base import ModelResponse
from pytest_harness.runtime.boundaries import Boundary
from pytest_harness.runtime.call_keys import approval_id, args_digest, execution_key
from pytest_harness.runtime.driver_base import DriverBase
from pytest_harness.runtime.results import RunResult, RunStatus
from pytest_harness.runtime.rules import evaluate_rules
from pytest_harness.runtime.state import call_approvals
from pytest_harness.spec.schema import Effect
from pytest_harness.store.base import ApprovalRow, EventDraft, NewApproval

__all__ = ["CallApprovals"]


class CallApprovals(DriverBase):
    """The rules' verdicts on proposed calls, and the answers to their approval requests."""

    async def _plan_calls(self, response: ModelResponse, step: int) -> RunResult | None:
        """Decide every proposed call with the rules; suspend when one needs an approval."""
        state = self.state
        run_id = self.record.run_id
        approvals: list[NewApproval] = []
        state.calls = []
        for index, proposed in enumerate(response.calls):
            key = execution_key(run_id, step, index)
            call: dict[str, Any] = {
                "id": proposed.id,
                "name": proposed.name,
                "args": dict(proposed.args),
                "key": key,
                "status": "planned",
                "attempt": 0,
            }
            if self.journal.recording:
                self.journal.note(
                    "tool.started",
                    {"name": proposed.name, "args": dict(proposed.args), "call_id": proposed.id},
                    step=step,
                    execution_key=key,
                )
            if proposed.name not in self.plan.tools:
                call["verdict"] = "unknown"
            else:
                verdict = evaluate_rules(
                    self.plan.rules,
                    self.plan.rule_programs,
                    self._rule_variables(proposed.name, proposed.args),
                    step=step,
                )
                self._decide(*verdict.decisions)
                call["verdict"] = verdict.effect.value
                if verdict.rule is not None:
                    call["rule"] = verdict.rule.id
                    call["message"] = verdict.rule.message
                if verdict.effect is Effect.APPROVE:
                    call["requested_by"] = self.principal.id
                    call["decision"] = None
                    call["approvals"] = []
                    for rule in verdict.approvals:
                        entry: dict[str, Any] = {
                            "approval_id": approval_id(key, rule.id, first=not call["approvals"]),
                            "rule": rule.id,
                            "approvers": list(rule.approvers),
                            "self_approve": rule.self_approve,
                            "decision": None,
                        }
                        call["approvals"].append(entry)
                        approvals.append(
                            NewApproval(
                                approval_id=entry["approval_id"],
                                execution_key=key,
                                args_digest=args_digest(proposed.args),
                                tool=proposed.name,
                                args=dict(proposed.args),
                                rule_id=rule.id,
                                approvers=tuple(rule.approvers),
                                requested_by=self.principal.id,
                                self_approve=rule.self_approve,
                            )
                        )
                        self.journal.note(
                            "approval.requested",
                            {
                                "approval_id": entry["approval_id"],
                                "tool": proposed.name,
                                "args": dict(proposed.args),
                                "rule": rule.id,
                                "approvers": list(rule.approvers),
                            },
                            step=step,
                            execution_key=key,
                        )
            state.calls.append(call)
        state.phase = "tools"
        if not approvals:
            return None
        events = [
            EventDraft(
                "approval_required",
                {"approval_id": a.approval_id, "tool": a.tool, "rule": a.rule_id},
            )
            for a in approvals
        ]
        return await self._suspend(
            RunStatus.AWAITING_APPROVAL, events, approvals, phase=Boundary.APPROVAL_REQUESTED
        )

    def apply_decisions(self, decided: Mapping[str, ApprovalRow]) -> None:
        """Bring the answered approvals (by approval id) into the state.

        A call runs when every one of its requests is approved; one `decline` declines it at
        once, and its requests still open close as `moot`. Each answer is an `approval`
        decision, in the order of the rules that asked.
        """
        state = self.state
        for call in state.calls:
            if call.get("verdict") != "approve" or call.get("decision"):
                continue
            entries = call_approvals(call)
            changed = False
            for entry in entries:
                row = decided.get(entry["approval_id"])
                if entry.get("decision") is not None or row is None:
                    continue
                changed = True
                entry["decision"] = row.status
                detail = {"decision": row.status, "approver": row.approver, "rule": entry["rule"]}
                self._decision(state.steps, "approval", call["name"], detail)
                self.journal.note(
                    "tool.resolved",
                    {
                        "how": "approval",
                        "approval_id": entry["approval_id"],
                        "tool": call["name"],
                        "args": call["args"],
                        "rule": entry["rule"],
                        "decision": row.status,
                        "approver": {"id": row.approver, "roles": list(row.approver_roles)},
                        "reason": row.reason,
                    },
                    step=state.steps,
                    execution_key=call["key"],
                )
            if any(e.get("decision") == "decline" for e in entries):
                for entry in entries:
                    if entry.get("decision") is None:
                        changed = True
                        entry["decision"] = "moot"
                        detail = {"decision": "moot", "rule": entry["rule"]}
                        self._decision(state.steps, "approval", call["name"], detail)
                call["decision"] = "decline"
            elif entries and all(e.get("decision") == "approve" for e in entries):
                call["decision"] = "approve"
            if changed:
                call["approvals"] = entries
