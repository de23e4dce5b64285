"""From Debezium events to the changelog and the lake table.

* ``mark_duplicates`` names every duplicate by cause. A *redelivery* is the same change (key, op,
  ``source.txId``, ``source.lsn``) at a later offset. A *snapshot re-run* is an ``r`` event for a key
  that an earlier snapshot round (another snapshot transaction) already emitted; the newer round holds
  the newer state. Both land in the changelog flagged by ``duplicate_class``, as Kafka delivered them:
  the suite's event-uniqueness expectation fails on them and repair drops them (``repair``), so a
  downstream reader of the changelog sees every change exactly once after the run.
* ``fold_table`` folds each key's events in emission order: Kafka offset within the key's partition
  (Debezium emits in commit order; ``source.lsn`` alone is wrong), then a
  sub-position so that repair events sit right after the offset they were placed at. A snapshot round
  is a complete table image, so its first offset resets its partition: older events and older lake
  rows there no longer count. An incremental snapshot is not one: its reads are upserts. Unchanged
  TOAST columns are filled from the key's previous state.
* A ``TRUNCATE`` (op ``t``, no key) empties the table: every change before the newest truncate of
  the range, and every row of the previous lake table older than it, no longer count. Truncates stay
  in the changelog, so each fold (the table, the table as of a snapshot) applies the ones it sees.

All functions are pure DataFrame -> DataFrame transforms; reading and writing happen in the jobs.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from . import names
from .column_lineage import ColumnLineage
from .debezium.decoding import DECODE_ERRORS_FIELD, UNAVAILABLE_FIELD, is_unavailable, split_decoded, tag_decode_errors
from .debezium.envelope import QUARANTINE_COLUMNS
from .debezium.pgtypes import DEFAULT_OPTIONS, DecodeOptions, TableSpec

TRUNCATE = "t"
# what a truncate, which has no row key, shows where a key is expected (the audit, the suite's samples)
TRUNCATE_KEY = '"TRUNCATE"'
REDELIVERY = "redelivery"
SNAPSHOT_RERUN = "snapshot_rerun"
ORIGIN_DEBEZIUM = "debezium"
# ``source.snapshot`` of the reads of an incremental (chunked, signal-started) snapshot
INCREMENTAL_SNAPSHOT = "incremental"
# source.snapshot of a round's final record: the table's last (several tables), or the snapshot's last
COMPLETING_MARKS = ("last_in_data_collection", "last")
ORIGIN_RECONCILE = "reconcile"
FIRST_EMITTED = "_first_emitted"
IDENTITY = ("key", "op", "source_txid", "source_lsn")
# lake-table metadata column -> the changelog column it keeps
CDC_FIELDS = {
    "_cdc_op": "op",
    "_cdc_partition": "partition",
    "_cdc_offset": "offset",
    "_cdc_sub": "sub",
    "_cdc_txid": "source_txid",
    "_cdc_lsn": "source_lsn",
    "_cdc_origin": "origin",
}
CDC_COLUMNS = tuple(CDC_FIELDS)
# the fold's order of a key's events (see ``fold_order``): the previous table's row, then the range's
FOLD_PHASE = "_phase"
PREVIOUS_PHASE = 0
RANGE_PHASE = 1
# a changelog column: the first LSN of the run of the key's changes the row belongs to (``with_key_segments``)
SEGMENT = "segment"


def change_events(parsed: DataFrame) -> DataFrame:
    """Events that change the table: row changes and truncates. Tombstones are only log-compaction markers."""
    return parsed.filter(~F.col("is_tombstone") & F.col("op").isin("c", "u", "d", "r", TRUNCATE))


def _source_table() -> Column:
    return F.concat_ws(".", F.col("source_schema"), F.col("source_table"))


def of_table(events: DataFrame, table: str) -> DataFrame:
    """Events of ``table`` (``schema.table``); tombstones carry no source and are kept."""
    return events.filter(F.col("is_tombstone") | (_source_table() == F.lit(table)))


def foreign_events(events: DataFrame, table: str) -> DataFrame:
    """Quarantine rows for events of another table that reached ``table``'s topic.

    A misrouted record (a topic routing transform, a producer writing to the wrong topic) would
    otherwise be folded as a change of this table, with columns decoded by the wrong spec.
    """
    source = _source_table()
    return events.filter(~F.col("is_tombstone") & (source.isNull() | (source != F.lit(table)))).select(
        "topic",
        "partition",
        "offset",
        "key",
        "raw_value",
        F.concat(
            F.lit("event of "), F.coalesce(source, F.lit("an unnamed table")), F.lit(f" in the topic of {table}")
        ).alias("reason"),
    )


def table_image_event() -> Column:
    """An ``r`` event of a snapshot round that images the table (not an incremental snapshot's chunk)."""
    return (
        (F.col("op") == "r")
        & F.col("source_txid").isNotNull()
        & (F.coalesce(F.col("source_snapshot"), F.lit("")) != F.lit(INCREMENTAL_SNAPSHOT))
    )


def completed_rounds(events: DataFrame) -> DataFrame:
    """``source_txid`` of each table-image round whose final record is among ``events``.

    Debezium marks the last record of a table's snapshot ``source.snapshot`` = ``last_in_data_collection``
    (``last`` when it is the last table): a round without it was interrupted, or is still going.
    """
    return events.filter(table_image_event() & F.col("source_snapshot").isin(*COMPLETING_MARKS)).select("source_txid")


def mark_duplicates(events: DataFrame, history: DataFrame | None = None, state: DataFrame | None = None) -> DataFrame:
    """Add ``duplicate_class`` (null, ``redelivery`` or ``snapshot_rerun``) to this range's events.

    Earlier ranges are known either as ``history`` (what they landed: at least ``IDENTITY``,
    ``partition``, ``offset``) or as the per-key ``state`` that ``key_state`` keeps, which a run reads
    instead of every earlier range. A change already there is a redelivery. A table-image read is a
    snapshot re-run when the key's previous read came from another round that never completed: the
    connector snapshotted again after an interruption. A later round after a complete one (offsets
    reset, a slot re-created) images the table anew and is no duplicate.
    """
    current = events.withColumn("_new", F.lit(True))
    if history is not None:
        kept = [
            *IDENTITY,
            "partition",
            "offset",
            *(["source_snapshot"] if "source_snapshot" in history.columns else []),
        ]
        past = history.select(*kept).withColumn("_new", F.lit(False))
        current = current.unionByName(past, allowMissingColumns=True)
    # an earlier range's copy came first, whatever its partition
    first_seen = Window.partitionBy(*IDENTITY).orderBy(F.col("_new").asc(), *copy_order())
    ranked = with_first_emitted(current, IDENTITY).withColumn("_copy", F.row_number().over(first_seen))
    is_snapshot = F.col("op") == "r"
    before = Window.partitionBy("key").orderBy("partition", "offset").rowsBetween(Window.unboundedPreceding, -1)
    previous_round = F.last(
        F.when(table_image_event() & (F.col("_copy") == 1), F.col("source_txid")), ignorenulls=True
    ).over(before)
    completed = completed_rounds(current)
    seen_before = F.lit(False)
    if state is not None:
        from .key_state import STREAMED, completed_rounds_of, key_rows, state_key

        ranked = ranked.join(key_rows(state), state_key() == F.col("_state_key"), "left")
        previous_round = F.coalesce(previous_round, F.col("last_read_txid"))
        completed = completed.unionByName(completed_rounds_of(state))
        streamed_again = F.col("op").isin(*STREAMED) & (F.col("source_lsn") <= F.col("last_lsn"))
        read_again = (
            is_snapshot
            & (F.col("source_txid") == F.col("last_read_txid"))
            & (F.col("source_lsn") == F.col("last_read_lsn"))
        )
        seen_before = F.coalesce(streamed_again | read_again, F.lit(False))
    complete = completed.distinct().select(F.col("source_txid").alias("_previous_round"), F.lit(True).alias("_done"))
    ranked = ranked.withColumn("_previous_round", previous_round).join(F.broadcast(complete), "_previous_round", "left")
    rerun = table_image_event() & (F.col("_previous_round") != F.col("source_txid")) & F.col("_done").isNull()
    classified = ranked.withColumn(
        "duplicate_class",
        F.when((F.col("_copy") > 1) | seen_before, F.lit(REDELIVERY))
        .when(rerun, F.lit(SNAPSHOT_RERUN))
        .otherwise(F.lit(None).cast("string")),
    )
    dropped = ["_new", "_copy", "_previous_round", "_done", FIRST_EMITTED]
    if state is not None:
        dropped += ["_state_key", "last_lsn", "last_read_txid", "last_read_lsn"]
    return classified.filter("_new").drop(*dropped)


def with_first_emitted(events: DataFrame, identity: Sequence[str | Column]) -> DataFrame:
    """Add ``_first_emitted``: when Debezium emitted the first copy of the change in the row's partition.

    Offsets order a change's copies within one partition, but not across partitions: after partitions
    are added, a connector restart redelivers a key's changes to its new partition, which may have a
    lower number than the original's. A redelivered copy is made anew by the restarted connector, so
    its envelope ``ts_ms`` (``ts_us``) is later than the original's; only each partition's first copy
    is dated, so a clock that moved back never reorders copies within a partition. Null where the
    events carry no envelope time (the copies then fall back to partition and offset order).
    """
    times = [F.col(c) for c in ("ts_us",) if c in events.columns]
    times += [F.col(c) * 1000 for c in ("ts_ms",) if c in events.columns]
    emitted = F.coalesce(*times) if times else F.lit(None).cast("long")
    in_partition = Window.partitionBy(*identity, "partition").orderBy("offset")
    # clustered by the identity alone, the window over the change's copies needs no second shuffle
    return events.repartition(*identity).withColumn(FIRST_EMITTED, F.first(emitted).over(in_partition))


def copy_order() -> list[Column]:
    """The order of a change's copies (:func:`with_first_emitted`): first emitted, then partition and offset."""
    return [F.col(FIRST_EMITTED).asc_nulls_last(), F.col("partition"), F.col("offset")]


def without_redeliveries(changes: DataFrame) -> DataFrame:
    """The changes a fold applies: a redelivered event replayed at its later offset would roll a row back."""
    return changes.filter(F.col("duplicate_class").isNull() | (F.col("duplicate_class") != REDELIVERY))


def duplicate_counts(marked: DataFrame) -> dict[str, int]:
    """Duplicates of this range by class (one small action)."""
    rows = marked.filter(F.col("duplicate_class").isNotNull()).groupBy("duplicate_class").count().collect()
    counts = {REDELIVERY: 0, SNAPSHOT_RERUN: 0}
    counts.update({row["duplicate_class"]: row["count"] for row in rows})
    return counts


def key_columns(key: Sequence[str], *images: str) -> list[Column]:
    """Typed key columns, taken from whichever row image the event has."""
    return [F.coalesce(*(F.col(image).getField(k) for image in images)).alias(k) for k in key]


def decode_changes(
    marked: DataFrame,
    spec: TableSpec,
    key: Sequence[str],
    options: DecodeOptions = DEFAULT_OPTIONS,
    lineage: ColumnLineage | None = None,
) -> DataFrame:
    """Typed changes with ``decode_errors``, duplicates included and flagged.

    Only deletes need their before-image (for the key); other events' before-images are not decoded,
    which halves the cost with REPLICA IDENTITY FULL. ``lineage`` fills the columns of events older
    than a column's addition or rename.
    """
    kept = marked.withColumn("before", F.when(F.col("op") == "d", F.col("before")))
    return tag_decode_errors(kept, spec, options, lineage.image_fills(options) if lineage else None)


def without_raw_values(events: DataFrame) -> DataFrame:
    """Events without ``raw_value``, the whole Kafka message, for the shuffles and caches of compaction.

    With the JSON converter's schemas enabled (the stack's default) every message carries its full
    schema: about 4 KB of a 4.3 KB record, where the row images are a few hundred bytes. Duplicate
    marking shuffles the events twice and decoding caches them; only quarantined events need the
    message, and :func:`with_raw_values` puts it back for them. ``raw_value`` becomes null here.
    """
    return events.withColumn("raw_value", F.lit(None).cast("string"))


def with_raw_values(quarantined: DataFrame, events: DataFrame) -> DataFrame:
    """Quarantine rows (``QUARANTINE_COLUMNS``) with ``raw_value`` taken from ``events`` by Kafka position.

    A Kafka record is one row of its range's events, so every quarantined change finds exactly one.
    The quarantine side is broadcast: it is small, and the events are not shuffled for it.
    """
    position = ["topic", "partition", "offset"]
    raw = events.select(*position, "raw_value")
    return F.broadcast(quarantined.drop("raw_value")).join(raw, position, "inner").select(*QUARANTINE_COLUMNS)


def with_key_segments(
    changes: DataFrame, by: Sequence[str | Column] = ("key",), applied: Column | None = None
) -> DataFrame:
    """Add ``segment``: the first LSN of the run of the key's changes, in one partition, the row belongs to.

    Debezium's producer sends a key to ``hash(key) % partitions``, so a key's changes stay in one
    partition until partitions are added; then its later changes go to another partition, where
    offsets start small again, and after another growth possibly back to one it used before (3 -> 5
    -> 7 partitions: partition 0, then 3, then 0 again). Offsets order a key's changes only within one
    uninterrupted run in a partition. PostgreSQL writes a row's change only after the previous one
    committed, so in LSN order a key's changes switch partitions exactly where the producer re-routed
    the key: a run starts where a change's partition differs from that of the key's change before it,
    and the runs' first LSNs order them (:func:`fold_order` sorts by segment, then offset).
    Redelivered copies stay out of the runs (they sit where their original's partition may not be);
    they take the segment of the run their LSN falls in. ``by``: the columns naming a key; ``applied``:
    the rows that make runs (by default all but redeliveries).
    """
    if applied is None:
        applied = F.col("duplicate_class").isNull() | (F.col("duplicate_class") != REDELIVERY)
    by_lsn = Window.partitionBy(*by).orderBy("source_lsn", "partition", "offset")
    before = F.last(F.when(applied, F.col("partition")), ignorenulls=True).over(
        by_lsn.rowsBetween(Window.unboundedPreceding, -1)
    )
    starts = applied & (before.isNull() | (before != F.col("partition")))
    run_start = F.last(F.col("_run_start"), ignorenulls=True).over(by_lsn.rowsBetween(Window.unboundedPreceding, 0))
    return (
        changes.withColumn("_run_start", F.when(starts, F.col("source_lsn")))
        .withColumn(SEGMENT, run_start)
        .drop("_run_start")
    )


def changelog_rows(decoded: DataFrame, key: Sequence[str], *, segments: bool = True) -> tuple[DataFrame, DataFrame]:
    """Split decoded changes into changelog rows and quarantine rows.

    ``segments``: whether the range may hold a key in several partitions (a topic of one partition
    cannot); without, ``segment`` is null and offsets alone order a key's changes.
    """
    ok, quarantined = split_decoded(decoded)
    ok = with_key_segments(ok) if segments else ok.withColumn(SEGMENT, F.lit(None).cast("long"))
    changelog = ok.select(
        *key_columns(key, "after_row", "before_row"),
        "key",
        "op",
        "partition",
        "offset",
        F.lit(0).alias("sub"),
        SEGMENT,
        "source_txid",
        "source_lsn",
        "source_ts_ms",
        "source_snapshot",
        "duplicate_class",
        F.lit(ORIGIN_DEBEZIUM).alias("origin"),
        "after_row",
    )
    return changelog, quarantined


def _snapshot_read() -> Column:
    return (F.col("op") == "r") & (F.col("origin") == ORIGIN_DEBEZIUM)


def _table_image_read() -> Column:
    """A read of a snapshot round that images the whole table (the initial snapshot, or its re-run).

    An incremental snapshot's reads (``source.snapshot`` = ``incremental``, no txId) are not: Debezium
    emits each chunk after the changes streamed during the chunk's window and leaves out the keys those
    changed, so the reads fold as ordinary upserts in emission order and reset nothing.
    """
    return _snapshot_read() & (F.coalesce(F.col("source_snapshot"), F.lit("")) != F.lit(INCREMENTAL_SNAPSHOT))


def snapshot_resets(changelog: DataFrame, history: DataFrame | None = None) -> DataFrame:
    """Per partition, the first offset of the newest snapshot round that starts in this range.

    With any such round, partition -1 too (offset 0): the repairs that sit before the range's changes.

    ``history`` (earlier changelog rows) tells which rounds were already folded; a round that began
    in an earlier range has already reset the lake table then. Repair events (op ``r``, origin
    ``reconcile``) are single rows, not snapshot rounds: they never reset anything.
    """
    rounds = (
        changelog.filter(_table_image_read()).groupBy("partition", "source_txid").agg(F.min("offset").alias("start"))
    )
    if history is not None:
        seen = history.filter(_snapshot_read()).select("partition", "source_txid").distinct()
        rounds = rounds.join(seen, ["partition", "source_txid"], "left_anti")
    newest = Window.partitionBy("partition").orderBy(F.col("start").desc())
    resets = (
        rounds.withColumn("_n", F.row_number().over(newest))
        .filter("_n = 1")
        .select("partition", F.col("start").alias("reset_offset"))
    )
    # a round images the whole table: repairs placed before the range (partition -1) go with it
    unplaced = resets.limit(1).select(F.lit(-1).alias("partition"), F.lit(0).cast("long").alias("reset_offset"))
    return resets.unionByName(unplaced)


def newest_truncate(changelog: DataFrame) -> DataFrame:
    """The range's newest truncate as one row (``t_partition``, ``t_offset``, ``t_lsn``), or no row.

    A TRUNCATE holds an ACCESS EXCLUSIVE lock until it commits, so no change of the table is
    concurrent with it: every change before it has a smaller LSN, every change after it a larger one.
    That makes LSN order exact for truncates across partitions; within the truncate's own partition
    the offset is used, which also places repair events (no LSN) correctly.
    """
    truncates = without_redeliveries(changelog).filter(F.col("op") == TRUNCATE)
    newest = truncates.agg(F.max(F.struct("source_lsn", "partition", "offset")).alias("_t"))
    return newest.filter(F.col("_t").isNotNull()).select(
        F.col("_t.partition").alias("t_partition"),
        F.col("_t.offset").alias("t_offset"),
        F.col("_t.source_lsn").alias("t_lsn"),
    )


def after_truncate(events: DataFrame, truncate: DataFrame) -> DataFrame:
    """``events`` (``partition``, ``offset``, ``source_lsn``, fold order) that the newest truncate did not empty.

    The previous table's rows all precede it. A repair of a key with no known position sits at
    partition -1, before everything of the range: a truncate empties it too (a visible one has already
    moved this range's repairs after it, see ``repair``). A repair placed after a change carries that
    change's LSN, which orders it against a truncate in another partition.
    """
    joined = events.join(F.broadcast(truncate), F.lit(True), "left")
    same_partition = F.col("partition") == F.col("t_partition")
    lsn = F.col("source_lsn")
    survives = F.col("t_offset").isNull() | (
        (F.col(FOLD_PHASE) == RANGE_PHASE)
        & (F.col("partition") >= 0)
        & (
            (same_partition & (F.col("offset") >= F.col("t_offset")))
            | (~same_partition & F.coalesce(lsn > F.col("t_lsn"), F.lit(True)))
        )
    )
    return joined.filter(survives).drop("t_partition", "t_offset", "t_lsn")


def fold_order(*, descending: bool = False) -> list[Column]:
    """A key's events in the order they happened: the previous table's row, then the range's.

    The range's by segment (:func:`with_key_segments`; null first: a repair placed before the range's
    changes), then offset and sub-position.
    """
    if descending:
        return [F.col(FOLD_PHASE).desc(), F.col(SEGMENT).desc_nulls_last(), F.col("offset").desc(), F.col("sub").desc()]
    return [F.col(FOLD_PHASE).asc(), F.col(SEGMENT).asc_nulls_first(), F.col("offset").asc(), F.col("sub").asc()]


def spec_image(row: Column, spec: TableSpec) -> Column:
    """A decoded image with exactly the spec's columns.

    The changelog dataset's schema is the union of every run's columns (a run adds the columns it
    knows), so a run reading its own partition gets the fields of columns since dropped or renamed too.
    """
    return F.when(
        row.isNotNull(),
        F.struct(
            *(row.getField(c).alias(c) for c in spec),
            row.getField(UNAVAILABLE_FIELD).alias(UNAVAILABLE_FIELD),
            row.getField(DECODE_ERRORS_FIELD).alias(DECODE_ERRORS_FIELD),
        ),
    )


def table_as_changelog(table: DataFrame, spec: TableSpec, key: Sequence[str]) -> DataFrame:
    """The previous lake table as one pseudo-event per row, at the position of its last change."""
    after = F.struct(
        *(names.column(c).alias(c) for c in spec),
        F.array().cast("array<string>").alias(UNAVAILABLE_FIELD),
        F.array().cast("array<string>").alias(DECODE_ERRORS_FIELD),
    )
    return table.select(
        *names.columns(key),
        *(F.col(lake).alias(change) for lake, change in CDC_FIELDS.items()),
        after.alias("after_row"),
    )


def _known_value(column: str, key: Sequence[str]) -> Column:
    """struct(v): the key's newest available value of ``column`` up to this event; null when none is known."""
    so_far = (
        Window.partitionBy(*names.columns(key))
        .orderBy(*fold_order())
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    available = F.col("after_row").isNotNull() & ~is_unavailable("after_row", column)
    return F.last(F.when(available, F.struct(F.col("after_row").getField(column).alias("v"))), ignorenulls=True).over(
        so_far
    )


def with_key_change_values(events: DataFrame, spec: TableSpec, key: Sequence[str]) -> DataFrame:
    """Creates of a key change with the unchanged TOASTed values of the old key filled in.

    An ``UPDATE`` that changes the key reaches Debezium as a delete of the old key and a create of the
    new one, both from the same WAL record (same LSN and transaction). Under ``REPLICA IDENTITY
    DEFAULT`` the create's unchanged TOASTed columns are placeholders; the old key's state just before
    its delete (from this range's events or the previous table) holds their values. A value still
    unknown stays unavailable (a key moved twice in one range, or a delete sealed into an earlier
    range than its create): the fold leaves it null and the diff finds the row stale.
    """
    values = [c for c in spec if c not in key]
    if not values:
        return events
    waiting = F.coalesce(
        (F.col("op") == "c")
        & F.col("source_lsn").isNotNull()
        & (F.size(F.col("after_row").getField(UNAVAILABLE_FIELD)) > 0),
        F.lit(False),
    )
    old_keys = [f"_old_{i}" for i in range(len(key))]
    change = ["source_lsn", "source_txid"]
    creates = events.filter(waiting)
    moves = (
        events.filter((F.col("op") == "d") & F.col("source_lsn").isNotNull())
        .select(*change, *(names.column(k).alias(o) for k, o in zip(key, old_keys, strict=True)))
        .join(creates.select(*change).distinct(), change, "left_semi")
    )
    old_key_events = events.join(
        moves.select(*(F.col(o).alias(k) for k, o in zip(key, old_keys, strict=True))).distinct(),
        [*key],
        "left_semi",
    )
    carried_as = {c: f"_carried_{i}" for i, c in enumerate(values)}
    carried = (
        old_key_events.select("op", *change, *(_known_value(c, key).alias(carried_as[c]) for c in values))
        .filter(F.col("op") == "d")
        .drop("op")
    )
    patched = creates.join(carried, change, "left")
    row = F.col("after_row")

    def value(c: str) -> Column:
        if c in key:
            return row.getField(c).alias(c)
        known = F.col(carried_as[c])
        return (
            F.when(is_unavailable(row, c) & known.isNotNull(), known.getField("v")).otherwise(row.getField(c)).alias(c)
        )

    still = F.array_compact(
        F.array(*(F.when(is_unavailable(row, c) & F.col(carried_as[c]).isNull(), F.lit(c)) for c in values))
    )
    patched = patched.withColumn(
        "after_row",
        F.struct(
            *(value(c) for c in spec),
            still.alias(UNAVAILABLE_FIELD),
            row.getField(DECODE_ERRORS_FIELD).alias(DECODE_ERRORS_FIELD),
        ),
    ).select(*names.columns(events.columns))
    return events.filter(~waiting).unionByName(patched)


def fold_table(
    changelog: DataFrame,
    spec: TableSpec,
    key: Sequence[str],
    *,
    previous: DataFrame | None = None,
    resets: DataFrame | None = None,
) -> DataFrame:
    """Latest state per key, deletes removed: the lake table.

    ``previous`` is the lake table of the last run (folded incrementally: its rows come before every
    new event of their key, whatever their offsets: after partitions are added, a key's new changes
    sit at smaller offsets of another partition); ``resets`` comes from :func:`snapshot_resets`.
    Redeliveries still in the changelog (before repair) are skipped; the newest truncate empties what
    came before it.
    """
    fields = ["op", "partition", "offset", "sub", SEGMENT, "source_txid", "source_lsn", "origin", "after_row"]
    if SEGMENT not in changelog.columns:
        changelog = changelog.withColumn(SEGMENT, F.lit(None).cast("long"))
    rows = without_redeliveries(changelog)
    events = (
        rows.filter(F.col("op") != TRUNCATE)
        .withColumn("after_row", spec_image(F.col("after_row"), spec))
        .select(*names.columns(key), *fields, F.lit(RANGE_PHASE).alias(FOLD_PHASE))
    )
    if previous is not None:
        earlier = table_as_changelog(previous, spec, key).withColumn(SEGMENT, F.lit(None).cast("long"))
        earlier = earlier.select(*names.columns(key), *fields)
        events = events.unionByName(earlier.withColumn(FOLD_PHASE, F.lit(PREVIOUS_PHASE)))
    events = after_truncate(events, newest_truncate(rows))
    if resets is not None:
        events = (
            events.join(F.broadcast(resets), "partition", "left")
            .filter(F.col("reset_offset").isNull() | (F.col("offset") >= F.col("reset_offset")))
            .drop("reset_offset")
        )
    events = with_key_change_values(events, spec, key)
    filled = [_known_value(c, key).getField("v").alias(c) for c in spec if c not in key]
    latest = Window.partitionBy(*names.columns(key)).orderBy(*fold_order(descending=True))
    state = events.select(
        *names.columns(key),
        *filled,
        *(F.col(change).alias(lake) for lake, change in CDC_FIELDS.items()),
        F.row_number().over(latest).alias("_rank"),
    )
    ordered = [*names.columns(spec), *CDC_COLUMNS]
    return state.filter((F.col("_rank") == 1) & (F.col("_cdc_op") != "d")).select(*ordered)
