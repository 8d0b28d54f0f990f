from __future__ import annotations

from typing import Any

import msgspec

from t3orch.domain.base import Wire
from t3orch.domain.vocab import PlanKind, PlanStatus, PlanStepStatus
from t3orch.ids import NodeId, PlanId, RunId, ThreadId


class PlanStep(Wire):
    id: str
    text: str
    status: PlanStepStatus


class UserInputQuestion(Wire):
    id: str
    question: str
    header: str | None = None
    options: list[dict[str, Any]] = msgspec.field(default_factory=list)


class PlanArtifact(Wire):
    id: PlanId
    thread_id: ThreadId
    run_id: RunId | None
    node_id: NodeId
    kind: PlanKind
    status: PlanStatus
    markdown: str | None = None
    steps: list[PlanStep] | None = None
    questions: list[UserInputQuestion] | None = None
