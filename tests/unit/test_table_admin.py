"""Adding a table: the configuration merge, the connector update and the checks, as pure functions."""

from __future__ import annotations

import json

import pytest

from cdc_reconcile import table_admin as admin
from cdc_reconcile.config import DEFAULT_VALUE_MODES, ConfigError, parse_config
from cdc_reconcile.config.tables import TABLES
from cdc_reconcile.tables_cli import parse_args

CONNECTOR = {
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "database.password": "secret",
    "topic.prefix": "cdc",
    "table.include.list": "public.customers,public.order_lines,public.cdc_watermark,public.debezium_signal",
    "signal.data.collection": "public.debezium_signal",
    "publication.autocreate.mode": "filtered",
}


def test_a_table_is_added_to_the_built_in_configuration_when_there_is_no_file_yet():
    document, changed = admin.with_table(None, "public.orders", ["id"], "cdc")
    assert changed
    assert parse_config(document).names == ["public.customers", "public.order_lines", "public.orders"]
    assert document["tables"][-1] == {"name": "public.orders", "key": ["id"]}
    assert len(TABLES["tables"]) == 2, "the built-in configuration itself is left alone"


def test_adding_the_same_entry_again_changes_nothing():
    first, _ = admin.with_table(None, "public.orders", ["order_id", "line_no"], "cdc")
    again, changed = admin.with_table(first, "public.orders", ["order_id", "line_no"], "cdc")
    assert not changed and again == first


def test_a_configured_table_with_another_key_is_refused():
    with pytest.raises(admin.Refused, match=r"already configured with key \['id'\].*edit its entry"):
        admin.with_table(None, "public.customers", ["email"], "cdc")


def test_a_connector_with_its_own_topic_prefix_gives_the_entry_that_prefix():
    document, _ = admin.with_table({"tables": [{"name": "a.b", "key": ["id"]}]}, "sales.orders", ["id"], "shop")
    assert parse_config(document).table("sales.orders").topic == "shop.sales.orders"
    assert parse_config(document).table("a.b").topic == "cdc.a.b"


def test_a_broken_configuration_is_refused_before_anything_is_added():
    with pytest.raises(Exception, match="non-empty 'tables'"):
        admin.with_table({"tables": []}, "public.orders", ["id"], "cdc")


def test_the_connector_gets_the_table_on_its_include_list_and_keeps_every_other_setting():
    updated, added = admin.with_captured(CONNECTOR, ["public.debezium_signal", "public.orders"])
    assert added == ["public.orders"]
    assert updated["table.include.list"] == CONNECTOR["table.include.list"] + ",public.orders"
    assert {k: v for k, v in updated.items() if k != "table.include.list"} == {
        k: v for k, v in CONNECTOR.items() if k != "table.include.list"
    }
    again, added_again = admin.with_captured(updated, ["public.debezium_signal", "public.orders"])
    assert added_again == [] and again == updated


def test_include_list_entries_are_regular_expressions_matched_whole():
    connector = {**CONNECTOR, "table.include.list": "sales\\..*"}
    assert admin.captures(connector, "sales.orders")
    assert not admin.captures(connector, "public.sales")
    assert admin.captures({}, "public.anything"), "no include list: the connector captures every table"


def test_a_table_the_exclude_list_holds_is_refused():
    connector = {"table.exclude.list": "public.audit_.*"}
    with pytest.raises(admin.Refused, match=r"table\.exclude\.list excludes public\.audit_log"):
        admin.with_captured(connector, ["public.audit_log"])


def test_value_modes_that_differ_from_the_decoder_name_the_setting_and_the_fix():
    assert admin.mode_mismatches(CONNECTOR, DEFAULT_VALUE_MODES) == []
    problems = admin.mode_mismatches(
        {**CONNECTOR, "decimal.handling.mode": "double", "hstore.handling.mode": "map"}, DEFAULT_VALUE_MODES
    )
    assert len(problems) == 2
    assert "decimal.handling.mode is 'double' but the decoder reads 'precise'" in problems[0]
    assert "set decimal.handling.mode=precise" in problems[0]
    assert "value_modes: {decimal.handling.mode: double} in the table configuration" in problems[0]
    assert "hstore.handling.mode is 'map'" in problems[1]
    assert "value_modes" not in problems[1]  # the decoder cannot read hstore as a map


def test_a_connector_in_interval_string_mode_suits_a_configuration_that_says_so():
    modes = parse_config({**TABLES, "value_modes": {"interval.handling.mode": "string"}}).value_modes
    connector = {**CONNECTOR, "interval.handling.mode": "string"}
    assert admin.mode_mismatches(connector, modes) == []
    assert len(admin.mode_mismatches(CONNECTOR, modes)) == 1


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"interval.handling.mode": "iso"}, r"value_modes.interval.handling.mode: 'iso' cannot be decoded"),
        ({"hstore.handling.mode": "map"}, r"'map' cannot be decoded.*\['json'\]"),
        ({"column.propagate.source.type": "x"}, r"not a value mode the decoder reads"),
        (["string"], r"a mapping of connector settings"),
    ],
)
def test_a_value_mode_the_decoder_cannot_read_is_a_configuration_error(section, message):
    with pytest.raises(ConfigError, match=message):
        parse_config({**TABLES, "value_modes": section})


def test_a_connector_without_a_signal_table_is_refused_with_how_to_make_one():
    assert admin.signal_table(CONNECTOR) == "public.debezium_signal"
    with pytest.raises(admin.Refused, match=r"no signal.data.collection.*CREATE TABLE public.debezium_signal"):
        admin.signal_table({k: v for k, v in CONNECTOR.items() if k != "signal.data.collection"})


def test_the_snapshot_signal_is_the_same_row_for_the_same_table():
    signal = admin.snapshot_signal("public.orders")
    assert signal == admin.snapshot_signal("public.orders") != admin.snapshot_signal("public.other")
    assert signal.type == "execute-snapshot" and len(signal.id) <= 64
    assert json.loads(signal.data) == {"data-collections": ["public.orders"], "type": "incremental"}
    assert json.loads(admin.snapshot_signal("public.orders", "code").data)["surrogate-key"] == "code"


def source(identity, primary_key=("id",), columns=("id", "note")):
    return admin.SourceTable("public.orders", identity, tuple(primary_key), tuple(columns))


def test_replica_identity_full_or_a_primary_key_is_usable():
    assert admin.surrogate_key(source(admin.IDENTITY_FULL), ["id"]) is None
    assert admin.surrogate_key(source(admin.IDENTITY_DEFAULT), ["id"]) is None
    assert admin.surrogate_key(source(admin.IDENTITY_INDEX, primary_key=()), ["id"]) == "id"


@pytest.mark.parametrize(
    "table, key, message",
    [
        (source(None), ["id"], "does not exist"),
        (source(admin.IDENTITY_FULL), ["order_id"], "has no column order_id"),
        (source(admin.IDENTITY_NOTHING), ["id"], "REPLICA IDENTITY NOTHING.*ALTER TABLE public.orders REPLICA"),
        (source(admin.IDENTITY_DEFAULT, primary_key=()), ["id"], "DEFAULT and no primary key.*IDENTITY FULL"),
        (source(admin.IDENTITY_FULL, primary_key=(), columns=("a", "b")), ["a", "b"], "add a primary key"),
    ],
)
def test_a_table_whose_changes_would_carry_no_usable_key_is_refused(table, key, message):
    with pytest.raises(admin.Refused, match=message):
        admin.surrogate_key(table, key)


def test_the_command_needs_a_configuration_file_and_takes_compound_keys(monkeypatch, capsys):
    monkeypatch.delenv("CDC_TABLES_CONFIG", raising=False)
    with pytest.raises(SystemExit):
        parse_args(["add", "public.orders", "--key", "id", "--connect-url", "http://c", "--source-dsn", "x"])
    assert "--config (or $CDC_TABLES_CONFIG) is required" in capsys.readouterr().err
    monkeypatch.setenv("CDC_TABLES_CONFIG", "/tmp/tables.yaml")
    args = parse_args(
        ["add", "public.lines", "--key", "order_id,line_no", "--connect-url", "http://c", "--source-dsn", "x"]
    )
    assert args.key == ["order_id", "line_no"] and str(args.config) == "/tmp/tables.yaml"
    with pytest.raises(SystemExit):
        parse_args(["add", "orders; DROP", "--key", "id", "--connect-url", "http://c", "--source-dsn", "x"])
