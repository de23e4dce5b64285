"""The JDBC snapshot against the real PostgreSQL: equal to the table, one point in time, while writers run."""

from __future__ import annotations

import datetime as dt
import importlib
import json
import os
import random
import subprocess
import sys
import threading
import time
from decimal import Decimal

import psycopg
import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.testing import assertDataFrameEqual

from cdc_reconcile import snapshot as snap_mod
from cdc_reconcile import source_snapshot as source_mod
from cdc_reconcile.config import ConfigError, TableConfig, load_config
from tests.support.lake import commit_metadata, delta_rows, spark_rows
from tests.support.polling import eventually

from .conftest import take_snapshot as take

pytestmark = pytest.mark.integration

INVARIANT_ROWS = 20_000
INITIAL_BALANCE = Decimal("1000.00")
CUSTOMERS_AS_SPARK_READS_THEM = "SELECT id, name, email, balance, attrs::text, updated_at FROM public.customers"


@pytest.fixture(scope="module")
def tables() -> dict[str, TableConfig]:
    return {t.name: t for t in load_config().tables}


def read_args(config) -> dict:
    return {"jdbc_url": config.pg_jdbc_url, "user": config.pg_user, "password": config.pg_password}


def imported_rows(config, snapshot_id: str, query: str) -> list[tuple]:
    """Run ``query`` in a transaction that imported the exported snapshot (the reference answer)."""
    with psycopg.connect(config.pg_dsn, autocommit=True) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        conn.execute(psycopg.sql.SQL("SET TRANSACTION SNAPSHOT {}").format(psycopg.sql.Literal(snapshot_id)))
        rows = conn.execute(query).fetchall()
        conn.execute("ROLLBACK")
    return rows


# --------------------------------------------------------------------------------------------------
# (a) equal to the table at rest, compound key, metadata


def load_order_lines(pg: psycopg.Connection) -> None:
    pg.execute("TRUNCATE public.order_lines")
    pg.execute(
        """
        INSERT INTO public.order_lines (order_id, line_no, sku, quantity, unit_price, note, created_at)
        SELECT g / 4, g % 4, 'SKU-' || g || CASE WHEN g % 5 = 0 THEN ' ünï 李 🙂' ELSE '' END, g % 17,
               ((g * 7919) % 19999999 - 9999999) / 10000.0,
               CASE WHEN g % 3 = 0 THEN NULL ELSE 'note ' || g END,
               timestamptz '2024-02-29 23:59:59.999999+00' + g * interval '37 minutes 1.000001 seconds'
        FROM generate_series(0, 7999) g
        """
    )
    pg.execute(
        "INSERT INTO public.order_lines VALUES "
        "(-5, 0, 'edge-max', 0, 999999.9999, '', '0001-01-02 00:00:00+00'),"
        "(9000000000, 1, 'edge-min', -1, -999999.9999, E'tab\\tnew\\nline', '9999-12-30 23:59:59.999999+00'),"
        "(9000000000, 2, 'edge-tiny', 2147483647, 0.0001, NULL, '1970-01-01 00:00:00+00')"
    )


def test_order_lines_snapshot_equals_table_at_rest(spark, config, pg, tables, tmp_path):
    load_order_lines(pg)
    table = tables["public.order_lines"]

    result = take(spark, config, table, tmp_path, "scheduled__2024-03-01T00:00:00+00:00", partitions=4)

    data = spark_rows(spark, snap_mod.dataset_path(tmp_path, table.name), run=result.version)
    assert data.schema.simpleString() == (
        "struct<order_id:bigint,line_no:int,sku:string,quantity:int,unit_price:decimal(10,4),"
        "note:string,created_at:timestamp>"
    )
    at_rest = pg.execute("SELECT * FROM public.order_lines").fetchall()
    assertDataFrameEqual(data, spark.createDataFrame(at_rest, data.schema))
    assert result.rows == len(at_rest) == 8003

    meta = commit_metadata(snap_mod.dataset_path(tmp_path, table.name), result.version)
    assert meta["table"] == "public.order_lines" and meta["key"] == ["order_id", "line_no"]
    assert meta["jdbc_partitions"] == 4
    assert meta["xmin"] <= meta["xmax"]
    assert all(meta["xmin"] <= x < meta["xmax"] for x in meta["xip"])
    assert meta["snapshot"] == f"{meta['xmin']}:{meta['xmax']}:{','.join(map(str, meta['xip']))}"
    assert meta["lsn_int"] > 0 and meta["lsn_int"] == source_mod.parse_lsn(meta["lsn"])
    current_lsn = pg.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
    assert meta["lsn_int"] <= source_mod.parse_lsn(current_lsn)
    assert meta["key_range"] == [-5, 9000000000]
    assert [(c["name"], c["type"], c["not_null"]) for c in meta["columns"]] == [
        ("order_id", "bigint", True),
        ("line_no", "integer", True),
        ("sku", "text", True),
        ("quantity", "integer", True),
        ("unit_price", "numeric(10,4)", True),
        ("note", "text", False),
        ("created_at", "timestamp with time zone", True),
    ]
    taken_at = dt.datetime.fromisoformat(meta["taken_at"])
    assert abs(dt.datetime.now(dt.UTC) - taken_at) < dt.timedelta(minutes=10)
    print(f"\nsnapshot public.order_lines: {result.rows} rows in {result.seconds:.1f}s (4 JDBC partitions)")

    # Same run, same data: the run's partition is replaced by the same rows, never added to.
    again = take(spark, config, table, tmp_path, "scheduled__2024-03-01T00:00:00+00:00", partitions=3)
    assert again.version == result.version and again.commit.version == result.commit.version + 1
    everything = delta_rows(snap_mod.dataset_path(tmp_path, table.name))
    assert len(everything) == 8003 and {r["_cdc_run"] for r in everything} == {result.version}


# --------------------------------------------------------------------------------------------------
# (b) one point in time while a writer moves money between rows


class Transfers(threading.Thread):
    """Moves amounts between random rows, and re-keys rows (delete + insert), one transaction each.

    Every transaction keeps ``count(*)`` and ``sum(balance)`` of the invariant rows unchanged, so a
    reader that mixes two points in time sees them change.
    """

    def __init__(self, dsn: str, ids: list[int]) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.ids = list(ids)
        self.stop = threading.Event()
        self.commits = 0
        self.error: BaseException | None = None
        self.random = random.Random(7)

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self.stop.is_set():
                    with conn.transaction():
                        if self.random.random() < 0.8:
                            self._transfer(conn)
                        else:
                            self._rekey(conn)
                    self.commits += 1
        except BaseException as exc:
            self.error = exc

    def _transfer(self, conn: psycopg.Connection) -> None:
        a, b = self.random.sample(self.ids, 2)
        amount = Decimal(self.random.randint(1, 50_000)).scaleb(-2)
        conn.execute("UPDATE public.customers SET balance = balance - %s WHERE id = %s", (amount, a))
        conn.execute("UPDATE public.customers SET balance = balance + %s WHERE id = %s", (amount, b))

    def _rekey(self, conn: psycopg.Connection) -> None:
        index = self.random.randrange(len(self.ids))
        balance = conn.execute(
            "DELETE FROM public.customers WHERE id = %s RETURNING balance", (self.ids[index],)
        ).fetchone()[0]
        new_id = conn.execute(
            "INSERT INTO public.customers (name, balance, attrs) VALUES ('invariant', %s, %s) RETURNING id",
            (balance, json.dumps({"moved_from": self.ids[index]})),
        ).fetchone()[0]
        self.ids[index] = new_id


@pytest.fixture
def invariant_rows(pg) -> list[int]:
    pg.execute("TRUNCATE public.customers")
    rows = pg.execute(
        "INSERT INTO public.customers (name, email, balance, attrs) "
        "SELECT 'invariant', 'c' || g || '@example.com', %s, jsonb_build_object('g', g) "
        "FROM generate_series(1, %s) g RETURNING id",
        (INITIAL_BALANCE, INVARIANT_ROWS),
    ).fetchall()
    return [r[0] for r in rows]


def test_partitions_read_one_snapshot_under_concurrent_transfers(spark, config, pg, tables, tmp_path, invariant_rows):
    table = tables["public.customers"]
    writer = Transfers(config.pg_dsn, invariant_rows)
    writer.start()
    try:
        eventually(lambda: writer.commits >= 50 or writer.error, timeout=60, what="the writer commits transfers")
        began = time.monotonic()
        with source_mod.exported_snapshot(config.pg_dsn, table) as snap:
            commits_at_export = writer.commits
            # Each partition reports the snapshot it reads, through the same connection properties.
            probe = spark.read.jdbc(
                config.pg_jdbc_url,
                "(SELECT pg_current_snapshot()::text AS seen, current_setting('transaction_isolation') AS iso) p",
                predicates=["TRUE"] * 4,
                properties=snap_mod.jdbc_properties(snap.snapshot_id, user=config.pg_user, password=config.pg_password),
            ).collect()
            assert [(r.seen, r.iso) for r in probe] == [(snap.snapshot_text, "repeatable read")] * 4

            df = snap_mod.transform(snap_mod.read_snapshot(spark, snap, partitions=4, **read_args(config)), snap.spec)
            assert df.rdd.getNumPartitions() == 4
            version = snap_mod.load(df, snap, lake_root=tmp_path, run_id="concurrent").metadata["run"]
            commits_after_read = writer.commits
            seconds = time.monotonic() - began
            reference = imported_rows(
                config,
                snap.snapshot_id,
                "SELECT id, name, email, balance, attrs::text, updated_at FROM public.customers",
            )
    finally:
        writer.stop.set()
        writer.join(timeout=30)
    assert writer.error is None, writer.error
    assert commits_after_read - commits_at_export >= 10, "the writer must commit while the snapshot is read"
    print(
        f"\nsnapshot public.customers: {INVARIANT_ROWS} rows in {seconds:.1f}s (4 JDBC partitions, probe included) "
        f"while {commits_after_read - commits_at_export} transfers committed"
    )

    data = spark_rows(spark, snap_mod.dataset_path(tmp_path, table.name), run=version)
    totals = data.agg(F.count("*").alias("n"), F.sum("balance").alias("total")).first()
    assert (totals.n, totals.total) == (INVARIANT_ROWS, INITIAL_BALANCE * INVARIANT_ROWS)
    assertDataFrameEqual(data, spark.createDataFrame(reference, data.schema))
    assert len(delta_rows(snap_mod.dataset_path(tmp_path, table.name), columns=["id"], run=version)) == INVARIANT_ROWS

    # The writer went on after the export: the table now differs from the snapshot.
    now = pg.execute("SELECT count(*), sum(balance) FROM public.customers").fetchone()
    assert now == (INVARIANT_ROWS, INITIAL_BALANCE * INVARIANT_ROWS)
    changed = pg.execute("SELECT array_agg(id ORDER BY id), array_agg(balance ORDER BY id) FROM public.customers")
    ids_now, balances_now = changed.fetchone()
    snapshot_pairs = sorted((r.id, r.balance) for r in data.select("id", "balance").collect())
    assert snapshot_pairs != list(zip(ids_now, balances_now, strict=True))


def test_rows_committed_after_the_snapshot_are_absent(spark, config, pg, tables, tmp_path):
    table = tables["public.customers"]
    pg.execute("TRUNCATE public.customers")
    with pg.transaction():
        kept, updated, deleted = (
            pg.execute(
                "INSERT INTO public.customers (name, balance) VALUES (%s, 10.00) RETURNING id, pg_current_xact_id()",
                (name,),
            ).fetchone()
            for name in ("kept", "updated", "deleted")
        )
    before_txid = int(kept[1])

    with (
        psycopg.connect(config.pg_dsn, autocommit=True) as writer,
        source_mod.exported_snapshot(config.pg_dsn, table) as snap,
    ):
        with writer.transaction():
            later_id, later_txid = writer.execute(
                "INSERT INTO public.customers (name, balance) VALUES ('after', 1.00) RETURNING id, pg_current_xact_id()"
            ).fetchone()
            writer.execute("UPDATE public.customers SET balance = 99.99, name = 'changed' WHERE id = %s", (updated[0],))
            writer.execute("DELETE FROM public.customers WHERE id = %s", (deleted[0],))
        df = snap_mod.transform(snap_mod.read_snapshot(spark, snap, partitions=4, **read_args(config)), snap.spec)
        snap_mod.load(df, snap, lake_root=tmp_path, run_id="after-commit")

    later_txid = int(later_txid)
    assert snap.snapshot.xmax <= later_txid
    assert not snap.snapshot.is_visible(later_txid)
    assert snap.snapshot.is_visible(before_txid)
    data = spark_rows(spark, snap_mod.dataset_path(tmp_path, table.name), run="after-commit")
    rows = {r.id: (r.name, r.balance) for r in data.collect()}
    assert later_id not in rows
    assert rows == {
        kept[0]: ("kept", Decimal("10.00")),
        updated[0]: ("updated", Decimal("10.00")),
        deleted[0]: ("deleted", Decimal("10.00")),
    }
    assert pg.execute("SELECT count(*) FROM public.customers WHERE id = %s", (later_id,)).fetchone()[0] == 1


# --------------------------------------------------------------------------------------------------
# hash partitions (non-integer key) and the decoder's types


def test_text_key_is_split_by_hash_and_typed_like_the_decoder(spark, config, pg, tmp_path):
    pg.execute("DROP TABLE IF EXISTS public.snapshot_types")
    pg.execute(
        """
        CREATE TABLE public.snapshot_types (
            region text, code text, payload jsonb, amount numeric(12, 2), ratio numeric, at timestamp,
            day date, t time, raw bytea, tags text[], id uuid, PRIMARY KEY (region, code))
        """
    )
    pg.execute(
        """
        INSERT INTO public.snapshot_types
        SELECT CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'üs' END, 'k-' || g, jsonb_build_object('g', g, 'ü', 'ß'),
               g * 1.25, g / 7.0, timestamp '2024-01-01 00:00:00.000001' + g * interval '1 hour',
               date '2000-02-29' + g, time '00:00:00.5' + g * interval '1 second',
               decode(lpad(to_hex(g), 4, '0'), 'hex'),
               ARRAY['a' || g, NULL], md5(g::text)::uuid
        FROM generate_series(1, 999) g
        """
    )
    table = TableConfig("public.snapshot_types", ("region", "code"))
    with source_mod.exported_snapshot(config.pg_dsn, table) as snap:
        predicates = snap_mod.partition_predicates(snap, 3)
        assert snap.key_range is None and all("hashtext" in p for p in predicates)
        df = snap_mod.transform(snap_mod.read_snapshot(spark, snap, partitions=3, **read_args(config)), snap.spec)
        snap_mod.load(df, snap, lake_root=tmp_path, run_id="types")
        per_partition = df.groupBy(F.spark_partition_id().alias("p")).count().collect()
    assert len(per_partition) == 3 and all(r["count"] > 200 for r in per_partition)

    data = spark_rows(spark, snap_mod.dataset_path(tmp_path, table.name), run="types")
    assert [(f.name, f.dataType) for f in data.schema.fields] == [
        ("region", T.StringType()),
        ("code", T.StringType()),
        ("payload", T.StringType()),
        ("amount", T.DecimalType(12, 2)),
        ("ratio", T.DecimalType(38, 18)),
        ("at", T.TimestampNTZType()),
        ("day", T.DateType()),
        ("t", T.LongType()),
        ("raw", T.BinaryType()),
        ("tags", T.ArrayType(T.StringType())),
        ("id", T.StringType()),
    ]
    source = pg.execute(
        "SELECT region, code, payload::text, amount, round(ratio, 18), at, day, "
        "(EXTRACT(EPOCH FROM t) * 1000000)::bigint, raw, tags, id::text FROM public.snapshot_types"
    ).fetchall()
    assert len(source) == 999
    assertDataFrameEqual(data, spark.createDataFrame([tuple(r) for r in source], data.schema))
    sample = data.where("code = 'k-3'").first()
    assert sample.payload == '{"g": 3, "ü": "ß"}'
    assert sample.at == dt.datetime(2024, 1, 1, 3, 0, 0, 1)
    assert sample.t == 3_500_000


@pytest.mark.parametrize(
    ("low", "high", "partitions"),
    [(0, 0, 4), (1, 10, 4), (1, 3, 8), (-5, 9_000_000_000, 4), (-(2**63), 2**63 - 1, 3), (7, 1_000, 1)],
)
def test_range_predicates_cover_every_key_once(pg, low, high, partitions):
    clauses = snap_mod.range_clauses('"v"', low, high, partitions)
    assert 1 <= len(clauses) <= partitions
    edges = [int(c.split(">= ")[1].split()[0]) for c in clauses[1:]]
    probes = {low, high, *(e + d for e in edges for d in (-1, 0, 1))}
    probes |= {v for v in (low - 1, high + 1) if -(2**63) <= v < 2**63}
    hits = " + ".join(f"coalesce(({c})::int, 0)" for c in clauses)
    counted = pg.execute(
        f"SELECT v, {hits} FROM unnest(%s::bigint[] || NULL::bigint) AS t(v)", (sorted(probes),)
    ).fetchall()
    assert len(counted) == len(probes) + 1
    assert all(n == 1 for _, n in counted), counted


def test_lsn_text_to_integer():
    assert source_mod.parse_lsn("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert source_mod.parse_lsn("0/0") == 0
    with pytest.raises(ValueError, match="not a pg_lsn"):
        source_mod.parse_lsn("16B374D848")


# --------------------------------------------------------------------------------------------------
# errors a user can act on


def _snapshot_sessions(pg) -> set[int]:
    rows = pg.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (source_mod.APPLICATION_NAME,)
    ).fetchall()
    return {pid for (pid,) in rows}


def test_errors_name_the_problem(config, pg, tmp_path):
    # Sessions of other tests' Spark jobs may still be closing; only the ones opened here count.
    before = _snapshot_sessions(pg)
    with pytest.raises(ConfigError, match=r"'public.nope' is not configured.*public.customers"):
        load_config().table("public.nope")

    missing = tmp_path / "tables.yaml"
    missing.write_text("tables:\n  - name: public.not_there\n    key: [id]\n")
    with (
        pytest.raises(source_mod.SnapshotError, match=r"public.not_there does not exist"),
        source_mod.exported_snapshot(config.pg_dsn, load_config(missing).table("public.not_there")),
    ):
        pass

    with (
        pytest.raises(source_mod.SnapshotError, match=r"no column\(s\) customer_id .*Fix 'key'"),
        source_mod.exported_snapshot(config.pg_dsn, TableConfig("public.customers", ("customer_id",))),
    ):
        pass

    with (
        pytest.raises(source_mod.SnapshotError, match=r"\['email'\] of public.customers is not its primary key"),
        source_mod.exported_snapshot(config.pg_dsn, TableConfig("public.customers", ("email",))),
    ):
        pass

    unreachable = config.pg_dsn.replace(f"port={config.pg_port}", "port=1")
    with (
        pytest.raises(source_mod.SnapshotError, match=r"cannot connect to PostgreSQL at \S+@127\.0\.0\.1:1/cdc_demo"),
        source_mod.exported_snapshot(unreachable, TableConfig("public.customers", ("id",))),
    ):
        pass

    with pytest.raises(ValueError, match="fetch_size must be positive"):
        snap_mod.jdbc_properties("x", user="u", password=None, fetch_size=0)

    # The exporting session is closed after each failure; its backend exits asynchronously, hence the wait.
    eventually(
        lambda: not (_snapshot_sessions(pg) - before),
        timeout=15,
        what="the failed snapshots' sessions have ended",
    )


def test_a_partition_outside_the_snapshot_fails_loudly(spark, config, pg, tables):
    """With fetchsize 0 the dialect leaves autocommit on; the guard turns that silent bug into an error."""
    table = tables["public.customers"]
    with source_mod.exported_snapshot(config.pg_dsn, table) as snap:
        pg.execute("SELECT pg_current_xact_id()")  # a later transaction, so "now" differs from the snapshot
        properties = snap_mod.jdbc_properties(snap.snapshot_id, user=config.pg_user, password=config.pg_password)
        properties["fetchsize"] = "0"
        reader = spark.read.jdbc(
            config.pg_jdbc_url,
            snap_mod.source_query(snap),
            predicates=snap_mod.partition_predicates(snap, 2),
            properties=properties,
        )
        with pytest.raises(Exception, match="does not read the exported snapshot"):
            reader.count()


# --------------------------------------------------------------------------------------------------
# the spark-submit entry point


def load_job():
    return importlib.import_module("cdc_reconcile.jobs.snapshot_source")


def test_job_refuses_unknown_table_before_starting_spark(capsys):
    code = load_job().main(
        [
            *("--table", "public.nope", "--run-id", "r", "--lake-root", "/nonexistent"),
            *("--jdbc-url", "jdbc:x", "--dsn", "host=x", "--user", "u"),
        ]
    )
    assert code == 2
    assert "public.nope' is not configured" in capsys.readouterr().err


def test_job_prints_a_one_line_summary(config, pg, tmp_path):
    load_order_lines(pg)
    env = {**os.environ, "CDC_PG_PASSWORD": config.pg_password, "CDC_SPARK_DRIVER_MEMORY": "1g"}
    argv = [sys.executable, "-m", "cdc_reconcile.jobs.snapshot_source", "--table", "public.order_lines"]
    argv += ["--run-id", "manual__2024-03-01T10:00:00+00:00", "--lake-root", str(tmp_path)]
    argv += ["--jdbc-url", config.pg_jdbc_url, "--dsn", config.pg_dsn.replace(" password=cdc", "")]
    argv += ["--user", config.pg_user, "--partitions", "2", "--master", "local[2]", "--keep", "1"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, done.stdout
    summary = json.loads(lines[0])
    assert summary["rows"] == 8003 and summary["table"] == "public.order_lines"
    assert summary["xmin"] <= summary["xmax"] and summary["lsn_int"] == source_mod.parse_lsn(summary["lsn"])
    assert isinstance(summary["xip"], list) and summary["seconds"] > 0
    dataset = snap_mod.dataset_path(tmp_path, "public.order_lines")
    assert commit_metadata(dataset, "manual__2024-03-01T10:00:00+00:00")["xmax"] == summary["xmax"]
    print(f"\nsnapshot job: {summary['rows']} rows in {summary['seconds']}s (spark-submit style process)")
