"""The state store without a database: DSN descriptions, offset ranges as Spark JSON, snapshot fields, errors."""

from __future__ import annotations

import json
import socket

import psycopg
import pytest

from cdc_reconcile import state_store
from cdc_reconcile.errors import InputError, UnreachableError


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_describe_dsn_names_user_host_port_and_database_never_the_password():
    described = state_store.describe_dsn("host=db.example port=6543 dbname=state user=pipeline password=s3cret")
    assert described == "pipeline@db.example:6543/state"
    assert state_store.describe_dsn("postgresql://u:s3cret@10.0.0.5/cdc") == "u@10.0.0.5:5432/cdc"
    assert state_store.describe_dsn("hostaddr=10.1.2.3 dbname=x") == "?@10.1.2.3:5432/x"
    assert state_store.describe_dsn("host='unterminated") == "<unparseable DSN>"


def test_unreachable_state_database_is_named_without_its_password():
    dsn = f"host=127.0.0.1 port={closed_port()} dbname=state user=pipeline password=s3cret"
    with pytest.raises(state_store.StateStoreUnavailable) as raised:
        state_store.connect(dsn, connect_timeout=3)
    assert isinstance(raised.value, UnreachableError)
    assert "pipeline@127.0.0.1:" in str(raised.value)
    assert "s3cret" not in str(raised.value)


def test_only_a_sealed_range_becomes_spark_offsets():
    opened = state_store.OffsetRange("run", "public.t", "cdc.public.t", start={1: 4, 0: 0})
    assert not opened.sealed and opened.partitions == [0, 1]
    with pytest.raises(state_store.RangeNotOpen, match="not sealed") as raised:
        opened.as_spark_json()
    assert isinstance(raised.value, InputError)
    sealed = state_store.OffsetRange("run", "public.t", "cdc.public.t", start={1: 4, 0: 0}, end={0: 12, 1: 4})
    starting, ending = sealed.as_spark_json()
    assert json.loads(starting) == {"cdc.public.t": {"0": 0, "1": 4}}
    assert json.loads(ending) == {"cdc.public.t": {"0": 12, "1": 4}}


def test_snapshot_fields_of_a_dataset_sidecar():
    sidecar = {"xmin": 100, "xmax": 120, "xip": [103], "lsn": "0/16B3748", "rows": 5, "taken_at": "t", "other": 1}
    fields = state_store.snapshot_fields(sidecar)
    assert fields == {
        "xmin": 100,
        "xmax": 120,
        "xip": [103],
        "snapshot_id": None,
        "wal_lsn": "0/16B3748",
        "taken_at": "t",
        "row_count": 5,
    }
    assert set(fields) <= state_store.SNAPSHOT_FIELDS


def test_missing_state_tables_point_at_ensure_state_schema():
    error = state_store.state_schema_missing(psycopg.errors.UndefinedTable('relation "x" does not exist'))
    assert isinstance(error, state_store.StateSchemaMissing) and isinstance(error, InputError)
    assert "state_store.ensure_state_schema(conn)" in str(error)
    assert issubclass(state_store.RangeConflict, InputError)
