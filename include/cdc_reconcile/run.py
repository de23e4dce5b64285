"""One table, one run: the steps of the hourly run, written once.

``TableRun`` is what the Airflow tasks, the Spark jobs, the integration tests and the bench call::

    run = TableRun(table, run_id, settings, spark=spark)
    run.open()          # checkpoint_offsets: the run's Kafka offset range opens at the previous end
    run.snapshot()      # snapshot_source: a consistent JDBC snapshot of the source table
    run.seal()          # seal_offsets: the snapshot recorded, the range sealed at a watermark after it
    run.compact()       # compact_cdc: exactly the sealed range -> events, changelog, lake table
    run.check()         # the point-in-time diff (what validate and reconcile are built on)
    run.validate(phase) # the expectation suite, recorded in the state database
    run.reconcile()     # repair events, duplicates resolved, the table re-folded, the audit recorded

Every step is keyed by the run id, so running it again for the same run replaces what it wrote
before and never adds to it. The inputs a step reads (the snapshot's metadata and rows, the previous
table, earlier ranges) are loaded once per object and dropped when a step writes.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from . import kafka_offsets, run_state, sealing, state_store, storage
from .config import PipelineConfig, TableConfig, load_config
from .debezium.pgtypes import DecodeOptions
from .errors import InputError
from .kafka_client import KafkaClient
from .lake import (
    PipelineError,
    SnapshotInfo,
    TableLake,
    TableVersions,
    previous_table,
    run_changelog,
    run_partition,
    run_table,
    run_versions,
    snapshot_info,
    source_rows,
    table_versions,
    version_name,
)
from .offline_docs import configured_assets_dir
from .phase import Phase
from .spark import kept
from .spark_steps import described, read_kafka_range

log = logging.getLogger(__name__)
# how far the transaction topic is read back before the predecessor's snapshot: the clocks of the
# database (the snapshot's time) and of the Connect worker (the records' timestamps) may differ
TRANSACTION_CLOCK_SKEW = timedelta(minutes=5)
# the state database's advisory lock over the Great Expectations project's stores and Data Docs
GX_LOCK = "cdc_reconcile.great_expectations"

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql import DataFrame, SparkSession

    from .column_lineage import ColumnLineage
    from .diff import DiffReport
    from .snapshot import SnapshotResult
    from .suite import SuiteOutcome


_Step = TypeVar("_Step", bound=Callable[..., Any])


def _step(method: _Step) -> _Step:
    """A step of the run: the datasets' histories it reads are read once (see ``storage.histories_kept``)."""

    @functools.wraps(method)
    def run_step(*args: Any, **kwargs: Any) -> Any:
        with storage.histories_kept():
            return method(*args, **kwargs)

    return run_step  # type: ignore[return-value]


@dataclass(frozen=True)
class SourceDatabase:
    """How the snapshot reaches the source database: libpq for the exported snapshot, JDBC for Spark."""

    dsn: str
    jdbc_url: str
    user: str
    password: str | None = None


@dataclass(frozen=True)
class RunSettings:
    """Where this deployment's services and stores are. Each step needs only some of them."""

    lake_root: str
    state_dsn: str | None = None
    kafka: KafkaClient | None = None
    source: SourceDatabase | None = None
    gx_root: str | None = None
    data_docs_assets: Path | None = field(default_factory=configured_assets_dir)
    decode_options: DecodeOptions | None = None  # None: the configuration's value_modes
    pipeline: PipelineConfig = field(default_factory=load_config)

    def __post_init__(self) -> None:
        if self.decode_options is None:
            object.__setattr__(self, "decode_options", DecodeOptions.from_modes(self.pipeline.value_modes))

    @staticmethod
    def require(value: Any, what: str) -> Any:
        """``value``, or an error naming the setting the step needs."""
        if value is None:
            raise InputError(f"this step needs {what}, which was not given (see the job's --help)")
        return value


# differences whose keys every task of the attribution gets a copy of (see ``attribution.attribute``)
FEW_DIFFERENCES = 200_000


class _Inputs:
    """What the diff-based steps read, loaded once: the snapshot and its rows; the previous table and
    the earlier snapshot rounds when a step first folds (reconcile on validate's findings does not)."""

    def __init__(
        self,
        snapshot: SnapshotInfo,
        source: DataFrame,
        previous: Callable[[], DataFrame | None],
        history: Callable[[], DataFrame | None],
    ) -> None:
        self.snapshot, self.source = snapshot, source
        self._load_previous, self._load_history = previous, history

    @cached_property
    def previous(self) -> DataFrame | None:
        return self._load_previous()

    @cached_property
    def history(self) -> DataFrame | None:
        return self._load_history()

    def forget(self) -> None:
        """Let the previous table go, if it was loaded."""
        previous = self.__dict__.pop("previous", None)
        if previous is not None:
            previous.unpersist()


class TableRun:
    """This table, this run: loads the run's inputs once and offers the run's steps."""

    def __init__(
        self, table: TableConfig, run_id: str, settings: RunSettings, *, spark: SparkSession | None = None
    ) -> None:
        self.table = table
        self.run_id = run_id
        self.settings = settings
        self._spark = spark
        self.lake = TableLake(settings.lake_root, table.name)
        self._published: storage.Commit | None = None

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            raise InputError(f"{self.table.name}: this step runs on Spark; create the TableRun with a session")
        return self._spark

    @property
    def version(self) -> str:
        return version_name(self.run_id)

    # -- state database and Kafka (no Spark) -----------------------------------------------------------

    @contextlib.contextmanager
    def state(self) -> Iterator[Any]:
        """A connection to the state database, its schema ensured."""
        with state_store.open_state(self.settings.require(self.settings.state_dsn, "the state database")) as conn:
            yield conn

    @property
    def kafka(self) -> KafkaClient:
        """The Kafka connection (bootstrap servers and client properties) sealing and compaction both use."""
        return self.settings.require(
            self.settings.kafka, "the Kafka connection (--bootstrap-servers, client properties in $CDC_KAFKA_CONFIG)"
        )

    def open(self, *, full_rescan: bool = False) -> dict[int, int]:
        """``checkpoint_offsets``: open (or, for a cleared task, reuse) the run's offset range.

        It opens at the end of the previous compacted range, and refuses while a run sealed a newer
        range that its compact_cdc never finished (naming it; see ``state_store.open_range``). A
        full rescan opens it at the topic's earliest offsets.
        """
        self._refuse_if_expired()
        partitions = kafka_offsets.list_partitions(self.kafka, self.table.topic)
        earliest = kafka_offsets.earliest_offsets(self.kafka, self.table.topic, partitions) if full_rescan else None
        with self.state() as conn:
            return state_store.open_range(
                conn, self.run_id, self.table.name, self.table.topic, partitions, start_offsets=earliest
            )

    def seal(self, *, timeout: float = 300.0, watermark_topic: str | None = None) -> state_store.OffsetRange:
        """``seal_offsets``: record the snapshot, then seal the range at a watermark committed after it.

        A snapshot taken again after the seal gets the range sealed again (see ``sealing.seal_offsets``).
        """
        pipeline = self.settings.pipeline
        with self.state() as conn:
            if state_store.get_snapshot(conn, self.run_id, self.table.name) is None:
                raise PipelineError(
                    f"{self.table.name}: no snapshot of run {self.run_id!r} is recorded in the state database; "
                    "snapshot_source must run first (with --state-dsn)"
                )
            with self._source_connection() as source:
                return sealing.seal_offsets(
                    conn,
                    kafka=self.kafka,
                    run_id=self.run_id,
                    table=self.table.name,
                    watermark_table=pipeline.watermark_table,
                    watermark_topic=watermark_topic or f"{self.table.topic_prefix}.{pipeline.watermark_table}",
                    timeout=timeout,
                    source=source,
                )

    @contextlib.contextmanager
    def _source_connection(self) -> Iterator[psycopg.Connection | None]:
        """The captured database, where the watermark is written; None: it is the state database."""
        from .source_snapshot import connect_source

        source = self.settings.source
        if source is None:
            yield None
            return
        with connect_source(source.dsn, user=source.user, password=source.password) as conn:
            yield conn

    def sealed_range(self) -> state_store.OffsetRange:
        """The range ``seal`` recorded; compaction reads exactly it."""
        with self.state() as conn:
            offset_range = state_store.get_range(conn, self.run_id, self.table.name)
        if offset_range is None or not offset_range.sealed:
            raise PipelineError(f"run {self.run_id!r} has no sealed range for {self.table.name}; run seal_offsets")
        return offset_range

    # -- Spark steps -----------------------------------------------------------------------------------------

    @_step
    def snapshot(
        self, *, partitions: int | None = None, fetch_size: int | None = None, output_files: int = 1
    ) -> SnapshotResult:
        """``snapshot_source``: a consistent JDBC snapshot of the table, read in ``partitions`` parallel reads."""
        from .snapshot import DEFAULT_FETCH_SIZE, DEFAULT_PARTITIONS, snapshot_table

        source = self.settings.require(self.settings.source, "the source database (--dsn, --jdbc-url, --user)")
        self._refuse_if_expired()
        if self.settings.state_dsn:  # seal must never see an earlier try's snapshot beside this try's rows
            with self.state() as conn:
                state_store.forget_snapshot(conn, self.run_id, self.table.name)
        result = snapshot_table(
            self.spark,
            self.table,
            dsn=source.dsn,
            jdbc_url=source.jdbc_url,
            user=source.user,
            password=source.password,
            lake_root=self.settings.lake_root,
            run_id=self.run_id,
            options=self.settings.decode_options,
            partitions=partitions or DEFAULT_PARTITIONS,
            fetch_size=fetch_size or DEFAULT_FETCH_SIZE,
            output_files=output_files,
        )
        self._forget_inputs()
        if self.settings.state_dsn:
            with self.state() as conn:
                state_store.record_snapshot(
                    conn, self.run_id, self.table.name, state_store.snapshot_fields(result.metadata)
                )
                state_store.record_commit(
                    conn, self.run_id, self.table.name, "snapshot", self.lake.snapshot, result.commit
                )
        return result

    @_step
    def compact(
        self,
        *,
        full_rescan: bool = False,
        offsets: tuple[str, str] | None = None,
        kafka_min_partitions: int | None = None,
    ) -> dict[str, Any]:
        """``compact_cdc``: the sealed range (or ``offsets``, Spark offset JSON) into the lake.

        Kafka range -> events, quarantine, changelog (duplicates marked), duplicates, and the new lake
        table. ``full_rescan``: the range is the whole topic, so the table is folded from it alone and
        duplicates are found within it (earlier ranges hold the same records again). Once a run was a
        rescan it stays one: a re-run must rebuild the same table, whatever it is told.
        ``kafka_min_partitions``: read tasks for the range (see :func:`read_kafka_range`).
        """
        from pyspark.sql import functions as F

        from .compaction import (
            change_events,
            changelog_rows,
            decode_changes,
            duplicate_counts,
            foreign_events,
            mark_duplicates,
            of_table,
            with_raw_values,
            without_raw_values,
        )
        from .debezium.decoding import has_fixed_scales, with_decimal_scales
        from .debezium.envelope import split_envelopes, tag_envelopes

        began = time.monotonic()
        self._refuse_if_expired()
        starting, ending = offsets or self.sealed_range().as_spark_json()
        spark, lake, name = self.spark, self.lake, self.table.name
        versions = table_versions(spark, lake, self.run_id)  # the lake table is not written until the fold
        full_rescan = full_rescan or versions.full_rescan
        snapshot = snapshot_info(spark, lake, self.run_id)
        spec = snapshot.spec
        previous = None if full_rescan else previous_table(spark, lake, self.run_id, versions)[0]
        lineage = self._lineage(snapshot, previous)
        records = read_kafka_range(spark, self.kafka, starting, ending, min_partitions=kafka_min_partitions)
        tagged = kept(tag_envelopes(records))
        parsed, bad_records = split_envelopes(tagged)
        self._write(parsed, lake.events, "events")
        # Counted now, while the records are in memory: later steps' caches push them out to disk.
        records_read = tagged.count()
        events = run_partition(spark, lake.events, self.run_id)
        with described(spark, f"compact_cdc {name}: transactions"):
            transactions = self._record_transactions(
                events, snapshot, versions, full_rescan=full_rescan, starting=starting
            )
        state = None if full_rescan else self._key_state_before()
        changes = change_events(of_table(events, name))
        if has_fixed_scales(spec, self.settings.decode_options) and (previous is None or lineage.retyped):
            # Only a range that may hold a decimal column's change of scale pays for each event's own
            # (its schema's) scale: the first run, a full rescan, a run after a column was retyped.
            changes = with_decimal_scales(changes)
        marked = kept(mark_duplicates(without_raw_values(changes), state=state))
        decoded = kept(decode_changes(marked, spec, self.table.key, self.settings.decode_options, lineage))
        changelog, undecodable = changelog_rows(decoded, self.table.key, segments=_several_partitions(ending))
        quarantined, foreign = bad_records, foreign_events(events, name)
        # The first action on the decoded changes: marking and decoding run here.
        with described(spark, f"compact_cdc {name}: marks, decodes and failed events"):
            # Their messages are most of the events' bytes: the events are read back with them only
            # when some events failed, which is seldom.
            if foreign.select("offset").limit(1).count():
                quarantined = quarantined.unionByName(foreign)
            if undecodable.limit(1).count():
                quarantined = quarantined.unionByName(with_raw_values(undecodable, events))
        self._write(quarantined, lake.quarantine, "quarantine")
        # The records (with their messages) are not read again: let them go before the folds. Kept to
        # the summary, a 1M-record initial load of a 2 GiB driver died reading them back from disk.
        tagged.unpersist()
        self._write(changelog, lake.changelog, "changelog")
        duplicates = marked.filter(F.col("duplicate_class").isNotNull()).select(
            "key", "partition", "offset", "op", "source_txid", "source_lsn", "duplicate_class"
        )
        self._write(duplicates, lake.duplicates, "duplicates")
        with described(spark, f"compact_cdc {name}: key state"):
            self._commit_key_state(marked, rebuild=full_rescan)
        with described(spark, f"compact_cdc {name}: fold and publish the table"):
            self._publish_fold(snapshot, full_rescan=full_rescan, versions=versions)
        with described(spark, f"compact_cdc {name}: summary"):
            summary = {
                "table": name,
                "run_id": self.run_id,
                "records": records_read,
                "quarantined": run_partition(spark, lake.quarantine, self.run_id).count(),
                "changes": marked.count(),
                "transactions": "not checked" if transactions is None else transactions,
                "duplicates": duplicate_counts(run_partition(spark, lake.duplicates, self.run_id)),
                "table_rows": run_table(spark, lake, self.run_id).count(),
                "table_version": getattr(self._published, "version", None),
                "table_bytes_written": getattr(self._published, "bytes_written", 0),
                "seconds": round(time.monotonic() - began, 2),
            }
        for cached in (marked, decoded):
            cached.unpersist()
        self._forget_inputs()
        if self.settings.state_dsn:  # the next run opens after this range only once it is in the lake
            with self.state() as conn:
                state_store.record_compaction(conn, self.run_id, name, (starting, ending))
        if self._published is not None:  # a run superseded by later ones leaves retention to them
            summary["retention"] = self.apply_retention()
        return summary

    def _record_transactions(
        self, events: DataFrame, snapshot: SnapshotInfo, versions: TableVersions, *, full_rescan: bool, starting: str
    ) -> dict[str, int] | None:
        """Write each transaction this run checks, its END's count against the events that arrived.

        See ``transaction_completeness``. Returns the count per status; None, said in the log, when
        there is nothing to check against (the connector writes no transaction topic) or the
        predecessor's range was pruned.
        """
        from .compaction import change_events, of_table
        from .transaction_completeness import (
            arrived_events,
            check_transactions,
            expected_counts,
            first_transactions,
            transaction_counts,
        )

        spark, lake, name, topic = self.spark, self.lake, self.table.name, self.table.transaction_topic
        partitions = kafka_offsets.existing_partitions(self.kafka, topic)
        if partitions is None:
            log.warning(
                "%s: no transaction topic %r, so no transaction is checked for completeness; set "
                "provide.transaction.metadata=true on the connector",
                name,
                topic,
            )
            return None
        own = change_events(of_table(events, name))
        predecessor = None if full_rescan else versions.base_run
        if predecessor is None:
            before, arrivals = None, own
            range_starts = next(iter(json.loads(starting).values()))
            unprovable = first_transactions(own, {int(p): int(o) for p, o in range_starts.items()})
            starts = kafka_offsets.earliest_offsets(self.kafka, topic, partitions)
        else:
            earlier = run_partition(spark, lake.events, predecessor)
            try:
                previous = snapshot_info(spark, lake, predecessor)
            except PipelineError:
                previous = None
            if earlier is None or previous is None:
                log.warning(
                    "%s: the range of run %s, before this one, was pruned: this run's transactions are not checked",
                    name,
                    predecessor,
                )
                return None
            before, arrivals, unprovable = (
                previous.visibility,
                own.unionByName(change_events(of_table(earlier, name))),
                None,
            )
            since = datetime.fromisoformat(str(previous.metadata["taken_at"])) - TRANSACTION_CLOCK_SKEW
            starts = kafka_offsets.offsets_since(self.kafka, topic, partitions, int(since.timestamp() * 1000))
        ends = sealing.end_offsets(self.kafka, topic, partitions)  # every END written by now, committed
        log.info(
            "%s: checking the transactions whose END records are in %s, offsets %s up to %s",
            name,
            topic,
            {p: starts[p] for p in partitions},
            {p: ends[p] for p in partitions},
        )
        records = read_kafka_range(
            spark,
            self.kafka,
            json.dumps({topic: {str(p): starts[p] for p in partitions}}),
            json.dumps({topic: {str(p): ends[p] for p in partitions}}),
        )
        expected = kept(expected_counts(records, name))  # small, and read twice by the check
        checked = check_transactions(
            expected, arrived_events(arrivals), snapshot.visibility, before, unprovable=unprovable
        )
        self._replace(checked, lake.transactions, "transactions", sort_by=["txid", "end_lsn"])
        expected.unpersist()
        return transaction_counts(run_partition(spark, lake.transactions, self.run_id))

    @_step
    def apply_retention(self) -> dict[str, Any]:
        """Prune runs beyond the configured retention from the lake and record them (see ``retention``)."""
        from .retention import apply_retention

        with described(self.spark, f"retention {self.table.name}"):
            done = apply_retention(self.spark, self.lake, self.settings.pipeline.retention, self.run_id)
        if done["pruned_runs"] and self.settings.state_dsn:
            with self.state() as conn:
                run_state.record_pruned(conn, done["pruned_runs"], self.table.name)
        return done

    def _refuse_if_expired(self) -> None:
        """A run that retention removed from the lake cannot run again: say so before reading what is gone."""
        from .retention import RunExpired, expired_message

        if not self.settings.state_dsn:
            return
        with self.state() as conn:
            pruned = run_state.pruned_at(conn, self.version, self.table.name)
        if pruned is not None:
            raise RunExpired(expired_message(self.table.name, self.run_id, pruned, self.settings.pipeline.retention))

    def _write(self, df: DataFrame, path: str, what: str) -> None:
        """Replace this run's partition of a dataset (Spark jobs named after it)."""
        with described(self.spark, f"compact_cdc {self.table.name}: {what}"):
            self._replace(df, path, what.split(" ")[0], sort_by=["partition", "offset"])

    def _replace(
        self, df: DataFrame, path: str, dataset: str, *, sort_by: list[str], metadata: dict[str, Any] | None = None
    ) -> storage.Commit:
        """Replace this run's partition of a per-run dataset in one commit, recorded in the state database."""
        commit = storage.replace_partition(df, path, self.version, sort_by=sort_by, metadata=metadata)
        self._record_commit(dataset, path, commit)
        return commit

    def _key_state_before(self) -> DataFrame | None:
        """The key state as this run's predecessor committed it (never this run's own or a later run's)."""
        base = run_versions(self.spark, self.lake.key_state, self.run_id).base
        return None if base is None else storage.read(self.spark, self.lake.key_state, base)

    def _rounds_before(self) -> DataFrame | None:
        """Snapshot rounds earlier runs folded, as ``compaction.snapshot_resets`` reads them."""
        from .key_state import rounds_history

        state = self._key_state_before()
        # a few rows, read by every window of the fold: kept, so the key state is scanned once
        return None if state is None else kept(rounds_history(state))

    def _commit_key_state(self, marked: DataFrame, *, rebuild: bool) -> None:
        """Fold this range into the key state, unless a later run already built on this run's."""
        from . import key_state

        versions = run_versions(self.spark, self.lake.key_state, self.run_id)
        if versions.superseded:
            return
        commit = key_state.commit(
            self.spark, self.lake.key_state, self.version, marked, base=versions.base, rebuild=rebuild
        )
        self._record_commit("key_state", self.lake.key_state, commit)

    def _record_commit(self, dataset: str, path: str, commit: storage.Commit) -> None:
        if self.settings.state_dsn:
            with self.state() as conn:
                state_store.record_commit(conn, self.run_id, self.table.name, dataset, path, commit)

    def _lineage(self, snapshot: SnapshotInfo, previous: DataFrame | None) -> ColumnLineage:
        """The run's columns (its snapshot's) against those of the table its predecessor published."""
        from .column_lineage import ColumnLineage

        return ColumnLineage.of(
            snapshot.metadata["columns"],
            None if previous is None else previous.schema,
            self.settings.decode_options,
        )

    def _conformed(self, previous: DataFrame | None, lineage: ColumnLineage) -> DataFrame | None:
        """The previous table with the run's columns (see ``column_lineage``)."""
        from .column_lineage import conform
        from .compaction import CDC_COLUMNS

        if previous is None:
            return None
        return conform(previous, lineage, CDC_COLUMNS, self.settings.decode_options)

    def _publish_fold(
        self, snapshot: SnapshotInfo, *, full_rescan: bool | None = None, versions: TableVersions | None = None
    ) -> storage.Commit | None:
        """Fold the run's changelog (repairs included) onto the table version its predecessor published.

        One commit naming this run and its base (see ``publication``). A run whose table a later run
        already built on publishes nothing: moving the live table back would undo the later runs' changes.
        ``versions`` are the table's as the caller read them, when nothing wrote the table since.
        """
        from .column_lineage import columns_changed
        from .compaction import CDC_COLUMNS, snapshot_resets
        from .publication import FoldInputs, publish_fold

        versions = versions or table_versions(self.spark, self.lake, self.run_id)
        if versions.superseded:
            log.warning(
                "%s: run %s published table version %s; later runs published up to version %s, so its "
                "table is not published again (the live table never moves back)",
                self.table.name,
                self.run_id,
                versions.own.version if versions.own else None,
                versions.latest,
            )
            return None
        full_rescan = versions.full_rescan if full_rescan is None else full_rescan or versions.full_rescan
        changelog = self._range_changelog(with_repairs=True)
        if full_rescan:
            previous, base = None, versions.base
        else:
            previous, base = previous_table(self.spark, self.lake, self.run_id, versions)
        earlier = None if full_rescan else self._rounds_before()
        lineage = self._lineage(snapshot, previous)
        inputs = FoldInputs(
            changelog=changelog,
            spec=lineage.spec,
            key=self.table.key,
            previous=self._conformed(previous, lineage),
            base=base,
            latest=versions.latest,
            resets=snapshot_resets(changelog, earlier),
            columns_changed=previous is not None
            and columns_changed(previous.schema, lineage, CDC_COLUMNS, self.settings.decode_options),
            lineage=lineage,
            decode_options=self.settings.decode_options,
        )
        commit, written_as = publish_fold(inputs, self.lake.table, self.version, full_rescan=full_rescan)
        changelog.unpersist()
        log.info(
            "%s: run %s published table version %s onto version %s as %s: %s rows, %s bytes written",
            self.table.name,
            self.run_id,
            commit.version,
            base,
            written_as,
            commit.rows_written,
            commit.bytes_written,
        )
        self._record_commit("table", self.lake.table, commit)
        self._published = commit
        return commit

    @cached_property
    def _inputs(self) -> _Inputs:
        versions = table_versions(self.spark, self.lake, self.run_id)
        snapshot = snapshot_info(self.spark, self.lake, self.run_id)

        def previous() -> DataFrame | None:
            table, _ = previous_table(self.spark, self.lake, self.run_id, versions)
            conformed = self._conformed(table, self._lineage(snapshot, table))
            # the fold reads the previous table in several branches, and on Spark Connect each branch
            # lists its files again when the query is planned (31 times in a demo-size check): kept
            return None if conformed is None else kept(conformed)

        return _Inputs(
            snapshot=snapshot,
            source=source_rows(self.spark, self.lake, self.run_id),
            previous=previous,
            history=lambda: None if versions.full_rescan else self._rounds_before(),
        )

    def _forget_inputs(self) -> None:
        inputs = self.__dict__.pop("_inputs", None)
        if inputs is not None:
            inputs.forget()

    def _range_changelog(self, *, with_repairs: bool) -> DataFrame:
        """The run's changelog range (repairs included when asked), kept for the fold that reads it.

        The fold's windows, joins and unions each read their input again: planned from the Delta
        tables, one fold scanned the changelog and the repairs 20 times each, and every scan cost a
        Delta file-listing job before the query ran. Kept, the range is read once.
        """
        return kept(run_changelog(self.spark, self.lake, self.run_id, with_repairs=with_repairs))

    def _as_of(self, changelog: DataFrame) -> DataFrame:
        from .diff import lake_as_of

        inputs = self._inputs
        return lake_as_of(
            changelog,
            inputs.snapshot.visibility,
            inputs.snapshot.spec,
            self.table.key,
            previous=inputs.previous,
            history=inputs.history,
        )

    def _topic_changes(self) -> DataFrame:
        """The range's change records as Kafka holds them (the bronze ``events``), keys typed (:mod:`attribution`)."""
        from .attribution import topic_changes

        events = run_partition(self.spark, self.lake.events, self.run_id)
        if events is None:
            raise PipelineError(f"{self.table.name}: no events for run {self.run_id!r}; run compact_cdc first")
        spec = {k: self._inputs.snapshot.spec[k] for k in self.table.key}
        return topic_changes(events, self.table.name, self.table.key, spec, self.settings.decode_options)

    def _differences(self, as_of: DataFrame, changelog: DataFrame, *, step: str) -> DataFrame:
        """Per differing key: ``kind`` and the ``stage`` where it arose (:mod:`attribution`), persisted.

        The lake as of the snapshot against the snapshot, and the published table against the lake as
        of the snapshot (stage ``lake``). Only a run with differences reads its events again. ``step``
        names the Spark jobs (``validate``, ``reconcile``...).
        """
        from pyspark.sql import functions as F

        from .attribution import attribute, changed_after_snapshot, lake_drift, reset_lsn, topic_words
        from .diff import diff_rows

        inputs, key, columns = self._inputs, self.table.key, list(self._inputs.snapshot.spec)
        visibility = inputs.snapshot.visibility
        found = kept(diff_rows(as_of, inputs.source, key, columns))
        with described(self.spark, f"{step} {self.table.name}: the lake as of the snapshot, and its diff"):
            differing = found.count()
        if differing:
            changes = kept(self._topic_changes())
            words = topic_words(changes, visibility, key)
            reset = reset_lsn(changes, visibility)
            diff = attribute(found, as_of, inputs.previous, words, key, reset=reset, few=differing <= FEW_DIFFERENCES)
        else:
            changes, diff = None, found.withColumn("stage", F.lit(None).cast("string"))
        published = run_table(self.spark, self.lake, self.run_id)
        later = None if published is None else changed_after_snapshot(changelog, visibility, key)
        if later is not None:
            drift = lake_drift(published, as_of, inputs.source, key, columns, changed_after=later, differing=found)
            diff = diff.unionByName(drift)
        with described(self.spark, f"{step} {self.table.name}: where the differences arose, the published table"):
            diff = kept(diff)
            diff.count()
        found.unpersist()
        if changes is not None:
            changes.unpersist()
        return diff

    @_step
    def check(self, *, with_repairs: bool = True, step: str = "check") -> tuple[DiffReport, DataFrame]:
        """The point-in-time diff: the lake as of the run's snapshot against the snapshot.

        Returns the report and the persisted per-key diff (the caller unpersists it). ``step`` names
        the Spark jobs.
        """
        from .diff import summarise

        inputs = self._inputs
        changelog = self._range_changelog(with_repairs=with_repairs)
        as_of = kept(self._as_of(changelog))
        diff = self._differences(as_of, changelog, step=step)
        with described(self.spark, f"{step} {self.table.name}: the report"):
            report = summarise(diff, as_of, inputs.source, self.table.key)
        as_of.unpersist()
        changelog.unpersist()
        return report, diff

    @_step
    def validate(self, phase: Phase) -> SuiteOutcome:
        """``validate``: the expectation suite on this run's datasets, recorded in the state database."""
        from pyspark.sql import functions as F

        from . import names
        from .attribution import STAGES, stage_count
        from .compaction import CDC_COLUMNS, TRUNCATE_KEY, duplicate_counts
        from .diff import counts_by_kind_and_stage
        from .suite import (
            CHANGE_IDENTITY,
            DIFFERENCE_COLUMNS,
            DUPLICATE_COLUMNS,
            STAGE_COLUMNS,
            lake_keys_dataset,
            quarantine_dataset,
            run_suite,
            source_values_dataset,
            transactions_dataset,
        )
        from .transaction_completeness import NO_END_OR_INCOMPLETE, transaction_counts

        gx_root = self.settings.require(self.settings.gx_root, "the Great Expectations project (--gx-root)")
        inputs, key, spec = self._inputs, self.table.key, self._inputs.snapshot.spec
        table = run_table(self.spark, self.lake, self.run_id)
        if table is None:
            raise PipelineError(f"{self.table.name}: no lake table for run {self.run_id!r}; run compact_cdc first")
        changelog = self._range_changelog(with_repairs=True)
        as_of = kept(self._as_of(changelog))
        diff = self._differences(as_of, changelog, step=f"validate ({phase.label})")
        key_text = F.to_json(F.struct(*names.columns(key)))
        differences = diff.select(
            *names.columns(key),
            *(F.when(F.col("kind") == kind, key_text).alias(column) for kind, column in DIFFERENCE_COLUMNS.items()),
            *(F.when(F.col("stage") == stage, key_text).alias(column) for stage, column in STAGE_COLUMNS.items()),
        )
        range_changelog = run_partition(self.spark, self.lake.changelog, self.run_id)
        changes = range_changelog.select(
            *CHANGE_IDENTITY,
            *(
                F.when(F.col("duplicate_class") == cause, F.coalesce(F.col("key"), F.lit(TRUNCATE_KEY))).alias(column)
                for cause, column in DUPLICATE_COLUMNS.items()
            ),
        )
        with described(self.spark, f"validate {self.table.name} ({phase.label}): counts"):
            kinds, stages = counts_by_kind_and_stage(diff)
            counts = {**kinds, **{stage_count(stage): stages.get(stage, 0) for stage in STAGES}}
            counts.update(duplicate_counts(range_changelog))
            counts["snapshot_rows"] = inputs.source.count()
            unrepresentable = inputs.snapshot.metadata.get("unrepresentable") or {}
            counts["unrepresentable"] = sum(unrepresentable.values())
            quarantined = quarantine_dataset(self.spark, run_partition(self.spark, self.lake.quarantine, self.run_id))
            counts["quarantined"] = quarantined.count()
            checked = run_partition(self.spark, self.lake.transactions, self.run_id)
            by_status = transaction_counts(checked)
            counts["incomplete_transactions"] = sum(by_status.get(status, 0) for status in NO_END_OR_INCOMPLETE)
            counts["transactions_checked"] = sum(by_status.values())
        with described(self.spark, f"validate {self.table.name} ({phase.label})"):
            outcome = run_suite(
                {
                    "lake_as_of": as_of,
                    "lake_table": table,
                    "lake_keys": lake_keys_dataset(table, key),
                    "changelog": changes,
                    "differences": differences,
                    "source_values": source_values_dataset(self.spark, unrepresentable),
                    "transactions": transactions_dataset(self.spark, checked),
                    "quarantine": quarantined,
                },
                table=self.table.name,
                run_id=self.run_id,
                phase=phase.value,
                key=key,
                parameters={"snapshot_row_count": counts["snapshot_rows"], "lake_columns": [*spec, *CDC_COLUMNS]},
                counts=counts,
                gx_root=gx_root,
                data_docs_assets=self.settings.data_docs_assets,
                lock=state_store.held_lock(self.settings.state_dsn, GX_LOCK) if self.settings.state_dsn else None,
            )
        if phase is Phase.BEFORE_REPAIR and not outcome.success:
            self._keep_findings(diff, as_of, counted=(kinds, stages, counts["snapshot_rows"]))
        as_of.unpersist()
        diff.unpersist()
        changelog.unpersist()
        self._forget_inputs()
        if self.settings.state_dsn:
            with self.state() as conn:
                run_state.record_suite_outcome(conn, outcome.as_dict(), phase)
        return outcome

    def _findings_inputs(self) -> dict[str, Any]:
        """What the run's differences are computed from: the versions of the datasets the check reads,
        the key and the decoding settings. Findings are taken up only while all of these are the same.

        The per-run datasets are read at their newest version, so any commit to them counts, another
        writer's too; the lake table and the key state are read at versions the run pinned.
        """
        lake = self.lake
        own_repairs = storage.run_commit(self.spark, lake.repairs, self.version)
        table = table_versions(self.spark, lake, self.run_id)
        return {
            **{
                dataset: storage.latest_version(self.spark, getattr(lake, dataset))
                for dataset in ("snapshot", "events", "changelog", "repairs")
            },
            "own_repairs": None if own_repairs is None else own_repairs.version,
            "table": None if table.own is None else table.own.version,
            "previous_table": None if table.full_rescan else table.base,
            "key_state_base": run_versions(self.spark, lake.key_state, self.run_id).base,
            "key": list(self.table.key),
            "decode_options": repr(self.settings.decode_options),
        }

    def _keep_findings(
        self, diff: DataFrame, as_of: DataFrame, *, counted: tuple[dict[str, int], dict[str, int], int]
    ) -> None:
        """Store the differences (and their report) of a failed suite before repair, with the inputs
        they were computed from, so that ``reconcile`` need not compute them again. ``counted``: the
        counts validate took (see :func:`diff.summarise`)."""
        from .diff import summarise

        with described(self.spark, f"validate {self.table.name}: the findings kept for reconcile"):
            report = summarise(diff, as_of, self._inputs.source, self.table.key, counted=counted)
            self._replace(
                diff,
                self.lake.findings,
                "findings",
                sort_by=list(self.table.key),
                metadata={"inputs": self._findings_inputs(), "report": report.as_dict()},
            )

    def _taken_findings(self) -> tuple[DiffReport, DataFrame] | None:
        """``validate``'s findings before repair, when nothing they were computed from has changed since
        and no repair is in the range yet (validate reads the range with its repairs, reconcile without)."""
        from . import names
        from .diff import DiffReport

        commit = storage.run_commit(self.spark, self.lake.findings, self.version)
        if commit is None:
            return None
        recorded, now = commit.metadata.get("inputs"), self._findings_inputs()
        if recorded != now or now["own_repairs"] is not None:
            changed = sorted(k for k in now if not isinstance(recorded, dict) or recorded.get(k) != now[k])
            log.info(
                "%s: run %s: validate's findings are not taken (changed since: %s); computing them again",
                self.table.name,
                self.run_id,
                ", ".join(changed) or "repairs in the range",
            )
            return None
        stored = run_partition(self.spark, self.lake.findings, self.run_id)
        # the dataset's schema is the union of its runs' columns: this run's key and the diff's own
        diff = stored.select(*names.columns(self.table.key), "kind", "lake_hash", "source_hash", "stage")
        report = DiffReport.from_dict(commit.metadata["report"])
        log.info(
            "%s: run %s: validate's findings taken (Delta version %s of %s): %s",
            self.table.name,
            self.run_id,
            commit.version,
            self.lake.findings,
            report.counts,
        )
        return report, kept(diff)

    @_step
    def reconcile(self, *, dry_run: bool = False) -> dict[str, Any]:
        """Repair events for every difference, duplicates dropped from the changelog, the table re-folded.

        The diff is taken without this run's earlier repairs, so running reconcile again writes the
        same repairs, not none. It is ``validate``'s (``findings``) while nothing it was computed from
        changed, else computed again. ``dry_run`` writes only the audit. With a state database the audit
        rows also go to ``cdc_reconcile.repair_audit``, replacing what an earlier try wrote.
        """
        from .diff import visible_changes
        from .repair import audit_rows, repair_events, resolve_duplicates

        began = time.monotonic()
        self._refuse_if_expired()
        inputs, key, lake = self._inputs, self.table.key, self.lake
        taken = self._taken_findings()
        report, diff = taken or self.check(with_repairs=False, step="reconcile")
        base = run_changelog(self.spark, lake, self.run_id, with_repairs=False)
        repairs = repair_events(
            diff,
            inputs.source,
            visible_changes(base, inputs.snapshot.visibility),
            inputs.snapshot.spec,
            key,
        )
        duplicates = run_partition(self.spark, lake.duplicates, self.run_id)
        audit = audit_rows(diff, duplicates, key, run_id=self.run_id, table_name=lake.name, dry_run=dry_run)
        with described(self.spark, f"reconcile {lake.name}"):
            self._replace(audit, lake.audit, "audit", sort_by=["kind", "key"])
            if not dry_run:
                self._replace(repairs, lake.repairs, "repairs", sort_by=list(key))
                resolved = resolve_duplicates(base)
                self._replace(resolved, lake.changelog, "changelog", sort_by=["partition", "offset"])
                self._publish_fold(inputs.snapshot)
        diff.unpersist()
        self._forget_inputs()
        audit_written = run_partition(self.spark, lake.audit, self.run_id)
        summary = {
            "table": lake.name,
            "run_id": self.run_id,
            "dry_run": dry_run,
            "found": report.as_dict(),
            "findings": "validate's" if taken else "computed",
            "audit": {r["kind"]: r["count"] for r in audit_written.groupBy("kind").count().collect()},
            "repair_events": 0 if dry_run else run_partition(self.spark, lake.repairs, self.run_id).count(),
            "seconds": round(time.monotonic() - began, 2),
        }
        if self.settings.state_dsn:
            with self.state() as conn:
                summary["audit_rows_recorded"] = run_state.replace_repair_audit(
                    conn, self.run_id, lake.name, (row.asDict() for row in audit_written.toLocalIterator())
                )
        return summary


def _several_partitions(ending: str) -> bool:
    """Whether a range (Spark's ``endingOffsets`` JSON) spans more than one partition: a key may then move."""
    try:
        topics = json.loads(ending)
    except ValueError:
        return True
    return not isinstance(topics, dict) or sum(len(partitions) for partitions in topics.values()) > 1
