"""The trend report's rows from the state database, and the page written next to the Data Docs.

Every figure is one the run already recorded: the suite's outcomes (counts by class before and after
repair), the repair audit, the offset range (when the run opened it, how many offsets it spans) and
the snapshot (when the source was read).
"""

from __future__ import annotations

import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from ..shared_storage import is_url, write_text
from ..state_store import state_schema_missing
from ..suite import data_docs_index
from .page import REPORT_NAME, RunPoint, render

RUNS_PER_TABLE = 48

# The newest result per run, table and phase (a re-run validate task appends; readers take the newest).
HISTORY_SQL = """
WITH results AS (
    SELECT DISTINCT ON (run_id, table_name, phase) run_id, table_name, phase, success, results -> 'counts' AS counts
      FROM cdc_reconcile.expectation_results ORDER BY run_id, table_name, phase, id DESC
), finished AS (
    SELECT run_id, table_name, max(created_at) AS finished_at
      FROM cdc_reconcile.expectation_results GROUP BY run_id, table_name
), ranges AS (
    SELECT run_id, table_name, min(opened_at) AS started_at, sum(end_offset - start_offset) AS offsets
      FROM cdc_reconcile.offset_ranges GROUP BY run_id, table_name
), audit AS (
    SELECT run_id, table_name, jsonb_object_agg(kind, n) AS repaired, bool_or(dry_run) AS dry_run
      FROM (SELECT run_id, table_name, kind, bool_or(dry_run) AS dry_run, count(*) AS n
              FROM cdc_reconcile.repair_audit GROUP BY run_id, table_name, kind) by_kind
     GROUP BY run_id, table_name
), points AS (
    SELECT b.run_id, b.table_name, r.started_at, f.finished_at, s.taken_at, b.success, b.counts,
           a.success AS success_after, a.counts AS counts_after, au.repaired, au.dry_run, r.offsets,
           row_number() OVER (PARTITION BY b.table_name
                              ORDER BY coalesce(r.started_at, f.finished_at) DESC, b.run_id DESC) AS newest
      FROM results b
      JOIN finished f USING (run_id, table_name)
      LEFT JOIN results a ON a.run_id = b.run_id AND a.table_name = b.table_name AND a.phase = 'after_repair'
      LEFT JOIN ranges r ON r.run_id = b.run_id AND r.table_name = b.table_name
      LEFT JOIN cdc_reconcile.snapshots s ON s.run_id = b.run_id AND s.table_name = b.table_name
      LEFT JOIN audit au ON au.run_id = b.run_id AND au.table_name = b.table_name
     WHERE b.phase = 'before_repair'
)
SELECT run_id, table_name, started_at, finished_at, taken_at, success, counts, success_after, counts_after,
       repaired, dry_run, offsets
  FROM points WHERE newest <= %(runs)s ORDER BY table_name, newest DESC
"""


def _ints(counts: dict[str, Any] | None) -> dict[str, int]:
    return {k: int(v) for k, v in (counts or {}).items() if isinstance(v, int | float)}


def run_points(conn: psycopg.Connection, runs_per_table: int = RUNS_PER_TABLE) -> list[RunPoint]:
    """The newest ``runs_per_table`` runs of every table that has a suite result before repair."""
    try:
        with conn.transaction():
            rows = conn.execute(HISTORY_SQL, {"runs": runs_per_table}).fetchall()
    except psycopg.errors.UndefinedTable as exc:
        raise state_schema_missing(exc) from exc
    return [
        RunPoint(
            table=table,
            run_id=run_id,
            started_at=started,
            finished_at=finished,
            snapshot_at=snapshot,
            passed=bool(success),
            found=_ints(counts),
            remaining=None if counts_after is None else _ints(counts_after),
            passed_after_repair=success_after,
            repaired=_ints(repaired),
            dry_run=bool(dry_run),
            offsets=None if offsets is None else int(offsets),
        )
        for (
            run_id,
            table,
            started,
            finished,
            snapshot,
            success,
            counts,
            success_after,
            counts_after,
            repaired,
            dry_run,
            offsets,
        ) in rows
    ]


def report_path(gx_root: str | Path) -> Path | str:
    """Where the trend report of a GX project is written: beside the Data Docs' index page (a URL for a URL root)."""
    index = data_docs_index(gx_root)
    if isinstance(index, str):
        return f"{index.rsplit('/', 1)[0]}/{REPORT_NAME}"
    return index.with_name(REPORT_NAME)


def write_report(conn: psycopg.Connection, path: str | Path, runs_per_table: int = RUNS_PER_TABLE) -> Path | str:
    """Render the report from the state database to ``path``, replacing the old page in one rename.

    Concurrent runs of different tables each write the whole page; a reader sees one or the other.
    A URL is written in one write through fsspec (shared storage has no rename that replaces).
    """
    page = render(run_points(conn, runs_per_table), generated_at=datetime.now(UTC))
    if is_url(path):
        return write_text(str(path), page)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(page)
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target
