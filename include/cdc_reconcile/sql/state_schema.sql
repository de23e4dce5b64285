-- Pipeline state in PostgreSQL: offset ranges and run state keyed by DAG run,
-- snapshot metadata, expectation results and the repair audit. Idempotent; applied in one
-- transaction under an advisory lock by state_store.ensure_state_schema(), because concurrent
-- CREATE ... IF NOT EXISTS statements can still collide on the catalog.

SELECT pg_advisory_xact_lock(hashtextextended('cdc_reconcile.state_schema', 0));

CREATE SCHEMA IF NOT EXISTS cdc_reconcile;

CREATE TABLE IF NOT EXISTS cdc_reconcile.runs (
    run_id      text        PRIMARY KEY,
    started_at  timestamptz NOT NULL DEFAULT now(),
    status      text        NOT NULL DEFAULT 'running'
);

-- One row per (run, table, partition). end_offset stays NULL until the range is sealed; a range is
-- the half-open interval [start_offset, end_offset) of Kafka offsets, which has gaps (transaction
-- markers, aborted records), so end_offset - start_offset is not a record count.
CREATE TABLE IF NOT EXISTS cdc_reconcile.offset_ranges (
    run_id        text        NOT NULL,
    table_name    text        NOT NULL,
    topic         text        NOT NULL,
    partition     integer     NOT NULL CHECK (partition >= 0),
    start_offset  bigint      NOT NULL CHECK (start_offset >= 0),
    end_offset    bigint,
    opened_at     timestamptz NOT NULL DEFAULT now(),
    sealed_at     timestamptz,
    watermark_id  bigint,
    watermark_txid bigint,
    compacted_at  timestamptz,
    PRIMARY KEY (run_id, table_name, partition),
    CHECK (end_offset IS NULL OR end_offset >= start_offset),
    CHECK ((end_offset IS NULL) = (sealed_at IS NULL)),
    CHECK (compacted_at IS NULL OR sealed_at IS NOT NULL)
);
-- Migration: ranges once recorded neither the watermark's transaction (which proves the seal came
-- after the snapshot) nor when compact_cdc finished with them. Ranges sealed before then had already
-- been opened past by the next run, so they count as compacted: the next run keeps opening after them.
ALTER TABLE cdc_reconcile.offset_ranges ADD COLUMN IF NOT EXISTS watermark_txid bigint;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'cdc_reconcile'
                   AND table_name = 'offset_ranges' AND column_name = 'compacted_at') THEN
        ALTER TABLE cdc_reconcile.offset_ranges ADD COLUMN compacted_at timestamptz;
        UPDATE cdc_reconcile.offset_ranges SET compacted_at = sealed_at WHERE sealed_at IS NOT NULL;
        ALTER TABLE cdc_reconcile.offset_ranges
            ADD CONSTRAINT offset_ranges_compacted_after_seal CHECK (compacted_at IS NULL OR sealed_at IS NOT NULL);
    END IF;
END
$$;

-- The next run opens at the latest compacted end per table and partition.
CREATE INDEX IF NOT EXISTS offset_ranges_latest_sealed
    ON cdc_reconcile.offset_ranges (table_name, topic, partition, sealed_at DESC)
    WHERE sealed_at IS NOT NULL;

-- The PostgreSQL snapshot the source side was read in (pg_current_snapshot(), 64-bit xids). xmin and
-- xmax are system column names in PostgreSQL, hence the prefix.
CREATE TABLE IF NOT EXISTS cdc_reconcile.snapshots (
    run_id         text        NOT NULL,
    table_name     text        NOT NULL,
    snapshot_id    text,
    snapshot_xmin  bigint      NOT NULL,
    snapshot_xmax  bigint      NOT NULL,
    xip            bigint[]    NOT NULL DEFAULT '{}',
    wal_lsn        pg_lsn,
    taken_at       timestamptz NOT NULL DEFAULT now(),
    row_count      bigint,
    PRIMARY KEY (run_id, table_name),
    CHECK (snapshot_xmin <= snapshot_xmax)
);

-- Every Delta commit a run made to the lake, per dataset: which version it committed and, for the lake
-- table, the version it folded onto. Operators read it to see what a run published; retention reads it
-- to say which runs can no longer be re-run.
CREATE TABLE IF NOT EXISTS cdc_reconcile.lake_commits (
    run_id         text        NOT NULL,
    table_name     text        NOT NULL,
    dataset        text        NOT NULL,
    location       text        NOT NULL,
    version        bigint      NOT NULL CHECK (version >= 0),
    base_version   bigint,
    rows_written   bigint,
    bytes_written  bigint,
    committed_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (location, version)
);
CREATE INDEX IF NOT EXISTS lake_commits_run ON cdc_reconcile.lake_commits (run_id, table_name, dataset);

-- Runs whose lake datasets retention removed (by their lake name): they can no longer be re-run.
CREATE TABLE IF NOT EXISTS cdc_reconcile.pruned_runs (
    run_name    text        NOT NULL,
    table_name  text        NOT NULL,
    pruned_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_name, table_name)
);

CREATE TABLE IF NOT EXISTS cdc_reconcile.expectation_results (
    id          bigserial   PRIMARY KEY,
    run_id      text        NOT NULL,
    table_name  text        NOT NULL,
    phase       text        NOT NULL CHECK (phase IN ('before_repair', 'after_repair')),
    suite       text        NOT NULL,
    success     boolean     NOT NULL,
    results     jsonb       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
-- Migration: results once carried an integer ``attempt`` (1 before repair, 2 after), a name that
-- clashed with Airflow's try number. Rename it to ``phase`` with the words the code uses.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'cdc_reconcile'
               AND table_name = 'expectation_results' AND column_name = 'attempt') THEN
        ALTER TABLE cdc_reconcile.expectation_results ADD COLUMN IF NOT EXISTS phase text;
        UPDATE cdc_reconcile.expectation_results
           SET phase = CASE attempt WHEN 1 THEN 'before_repair' ELSE 'after_repair' END;
        DROP INDEX IF EXISTS cdc_reconcile.expectation_results_run;
        ALTER TABLE cdc_reconcile.expectation_results DROP COLUMN attempt;
        ALTER TABLE cdc_reconcile.expectation_results ALTER COLUMN phase SET NOT NULL;
        ALTER TABLE cdc_reconcile.expectation_results
            ADD CONSTRAINT expectation_results_phase_check CHECK (phase IN ('before_repair', 'after_repair'));
    END IF;
END
$$;
CREATE INDEX IF NOT EXISTS expectation_results_run
    ON cdc_reconcile.expectation_results (run_id, table_name, phase);

CREATE TABLE IF NOT EXISTS cdc_reconcile.repair_audit (
    id           bigserial   PRIMARY KEY,
    run_id       text        NOT NULL,
    table_name   text        NOT NULL,
    key          jsonb       NOT NULL,
    kind         text        NOT NULL,
    before_hash  text,
    after_hash   text,
    dry_run      boolean     NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS repair_audit_run ON cdc_reconcile.repair_audit (run_id, table_name);
-- where the repaired difference arose: source->topic, topic->lake or lake (null: audited before this column)
ALTER TABLE cdc_reconcile.repair_audit ADD COLUMN IF NOT EXISTS stage text;
