"""What a streamed delta does to its item is defined once, in the projector.

The store's read of a streaming item, ingest's view of its own decision and the
API's tracker of streamed fields all fold deltas; each must use the projector's
definition, so none of them can drift from what ``t3orch check`` rebuilds.
"""

from __future__ import annotations

import ast
from pathlib import Path

from t3orch.core import open_core
from t3orch.domain.turn_items import CommandExecution
from t3orch.projections import projector
from t3orch.projections.check import compare, compare_chunks, rebuild
from t3orch.provider_events import ItemDelta, ItemStarted
from tests.store.support import new_thread, started_turn

ROOT = Path(__file__).resolve().parents[2] / "t3orch"
FOLDS = {"DELTA_FIELD", "delta_target", "apply_delta", "fold_item", "fold_chunks"}


def test_only_the_projector_defines_how_a_delta_folds() -> None:
    defined: dict[str, list[str]] = {}
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names = [node.name]
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [t.id for t in targets if isinstance(t, ast.Name)]
            for name in names:
                if name in FOLDS:
                    defined.setdefault(name, []).append(str(path.relative_to(ROOT)))
    assert defined == {name: ["projections/projector.py"] for name in FOLDS}


async def test_a_streaming_item_reads_as_the_projector_folds_it(tmp_path: Path) -> None:
    async with open_core(tmp_path / "e.db") as core:
        tid = await new_thread(core.service)
        b = await started_turn(core.service, tid)
        await core.service.ingest(
            b,
            [
                ItemStarted(native_item_ref="c1", content=CommandExecution(input="ls")),
                ItemDelta(native_item_ref="c1", text="a\n"),
                ItemDelta(native_item_ref="c1", text="b\n"),
            ],
        )
        with core.reader.snapshot():
            (row,) = [
                core.reader.folded(r)
                for r in core.reader.rows("turn_item", thread_id=tid)
                if r.status == "running"
            ]
            stored = core.store.all_rows()
            chunks = core.store.all_chunks()
            rebuilt, _, _ = rebuild(core.store.iter_events())
    item = row.decode()
    assert type(item) is CommandExecution and item.output == "a\nb\n"
    unfolded = rebuilt.rows[("turn_item", item.id)]
    assert projector.fold_chunks(unfolded, list(rebuilt.chunks.values())).decode() == item
    assert compare(stored, rebuilt) == [] and compare_chunks(chunks, rebuilt) == []
