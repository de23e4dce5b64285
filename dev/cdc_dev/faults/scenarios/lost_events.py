"""Scenario 5: changes made while the table is out of the publication never reach Kafka."""

from __future__ import annotations

from cdc_reconcile import run_state, state_store
from cdc_reconcile.phase import Phase

from ..checks import TABLE
from ..harness import FaultRunner
from ..result import ScenarioResult


def lost_events(runner: FaultRunner) -> ScenarioResult:
    """4 inserts, 3 updates and 2 deletes Debezium never sees: missing, stale and extra rows in the lake."""
    result = ScenarioResult("lost_events", "5. Lost events (table out of the publication)")
    runner.ensure_baseline()
    start_state, start_offsets = runner.begin()
    publication = runner.config.publication_name
    with runner.pg() as conn:
        keys = [r[0] for r in conn.execute(f"SELECT id FROM {TABLE} ORDER BY id LIMIT 5").fetchall()]
        stale, extra = keys[:3], keys[3:]
        conn.execute(f"ALTER PUBLICATION {publication} DROP TABLE {TABLE}")
        try:
            with conn.transaction():
                conn.execute(
                    f"INSERT INTO {TABLE} (name, email, balance) "
                    "SELECT 'lost ' || g, NULL, -g - 0.25 FROM generate_series(1, 4) g"
                )
                conn.execute(
                    f"UPDATE {TABLE} SET name = name || ' (changed unseen)', balance = balance + 1000 "
                    "WHERE id = ANY(%s)",
                    (stale,),
                )
                conn.execute(f"DELETE FROM {TABLE} WHERE id = ANY(%s)", (extra,))
        finally:
            conn.execute(f"ALTER PUBLICATION {publication} ADD TABLE {TABLE}")
    result.injected = {"lost_inserts": 4, "lost_updates": len(stale), "lost_deletes": len(extra)}
    first = runner.measure(result, independent_of=runner.independent_from(start_state, start_offsets))
    # the events never reached Kafka: every difference arose between the source and the topic
    lost = sum(result.injected.values())
    found = (runner.outcome(first.run_id, Phase.BEFORE_REPAIR) or {}).get("counts", {})
    arose = {stage: found.get(f"stage {stage}", 0) for stage in ("source->topic", "topic->lake", "lake")}
    with state_store.connect(runner.config.state_dsn) as conn:
        audited = run_state.audit_stages(conn, first.run_id, TABLE)
    audit_arose = {stage for kind in ("missing", "extra", "stale") for stage in audited.get(kind, {})}
    result.checks = {
        "suite: every difference arose source->topic": arose == {"source->topic": lost, "topic->lake": 0, "lake": 0},
        "audit: every repair arose source->topic": audit_arose == {"source->topic"},
    }
    result.notes.append(f"suite's stages {arose}; audit by kind and stage {audited}")
    return result
