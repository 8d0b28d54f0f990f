"""Every server message of the pinned schema is mapped or diagnostics-only, with a reason."""

from __future__ import annotations

from adapters.codex import coverage
from adapters.codex.mapper import MAPPED_NOTIFICATIONS


def test_the_schema_lists_what_the_notes_measured() -> None:
    assert len(coverage.schema_notifications()) == 86
    assert len(coverage.schema_requests()) == 10


def test_every_schema_entry_is_covered() -> None:
    assert coverage.uncovered() == {"notifications": [], "requests": [], "item_types": []}


def test_no_entry_is_both_mapped_and_diagnostics_only() -> None:
    assert not MAPPED_NOTIFICATIONS & coverage.DIAGNOSTICS_ONLY_NOTIFICATIONS.keys()
    assert not coverage.MAPPED_REQUESTS & coverage.DIAGNOSTICS_ONLY_REQUESTS.keys()


def test_lists_name_only_methods_of_the_schema() -> None:
    # A stale entry (a method a pin bump removed) must be deleted, not kept forever.
    notes, reqs = set(coverage.schema_notifications()), set(coverage.schema_requests())
    assert notes >= MAPPED_NOTIFICATIONS
    assert coverage.DIAGNOSTICS_ONLY_NOTIFICATIONS.keys() <= notes
    assert coverage.MAPPED_REQUESTS | coverage.DIAGNOSTICS_ONLY_REQUESTS.keys() <= reqs
    assert coverage.DIAGNOSTICS_ONLY_ITEM_TYPES.keys() <= set(coverage.schema_item_types())


def test_every_diagnostics_only_entry_has_a_reason() -> None:
    for table in (
        coverage.DIAGNOSTICS_ONLY_NOTIFICATIONS,
        coverage.DIAGNOSTICS_ONLY_REQUESTS,
        coverage.DIAGNOSTICS_ONLY_ITEM_TYPES,
    ):
        for method, reason in table.items():
            assert len(reason.strip()) > 10, method


def test_summary_counts_add_up() -> None:
    for family in coverage.summary().values():
        assert family["mapped"] + family["diagnostics_only"] == family["total"]
