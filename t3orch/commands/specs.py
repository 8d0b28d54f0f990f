"""Command payloads as they arrive from clients (API, CLI)."""

from __future__ import annotations

import msgspec

from t3orch.domain.vocab import InteractionMode, ProviderKind, RuntimeMode


class CreateThread(
    msgspec.Struct, rename="camel", kw_only=True, frozen=True, forbid_unknown_fields=True
):
    provider: ProviderKind
    cwd: str
    title: str = "New thread"
    model: str | None = None
    runtime_mode: RuntimeMode = "approval-required"
    interaction_mode: InteractionMode = "default"
    project_id: str | None = None


class SendMessage(
    msgspec.Struct, rename="camel", kw_only=True, frozen=True, forbid_unknown_fields=True
):
    thread_id: str
    text: str


class RespondToRequest(
    msgspec.Struct, rename="camel", kw_only=True, frozen=True, forbid_unknown_fields=True
):
    request_id: str
    decision: str
    message: str | None = None
    answers: dict[str, str] | None = None
