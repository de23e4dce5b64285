"""The table configuration refuses what would reach SQL unchecked."""

from __future__ import annotations

import pytest

from cdc_reconcile.config import ConfigError, default_config, load_config, parse_config
from cdc_reconcile.config.tables import TABLES


def test_the_shipped_configuration_loads():
    config = load_config()
    assert config.names == ["public.customers", "public.order_lines"]
    assert config.table("public.order_lines").key == ("order_id", "line_no")
    assert config.table("public.customers").topic == "cdc.public.customers"


@pytest.mark.parametrize(
    "document, message",
    [
        ({}, "non-empty 'tables'"),
        ({"tables": [{"name": "customers; DROP TABLE x", "key": ["id"]}]}, "schema.table"),
        ({"tables": [{"name": "public.t", "key": []}]}, "primary-key columns"),
        ({"tables": [{"name": "public.t", "key": ["id"]}, {"name": "public.t", "key": ["id"]}]}, "listed twice"),
        ({"tables": [{"name": "public.t", "key": ["id) OR (1=1"]}]}, "primary-key columns"),
    ],
)
def test_bad_configuration_is_refused_with_a_message(document, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(document)


def test_unknown_table_is_refused():
    with pytest.raises(ConfigError, match="not configured"):
        load_config().table("public.secrets")


def test_a_table_may_come_from_another_connector():
    config = parse_config({"tables": [{"name": "public.big", "key": ["id"], "topic_prefix": "big"}]})
    assert config.table("public.big").topic == "big.public.big"


def test_a_yaml_file_of_the_same_shape_overrides_the_default(tmp_path, monkeypatch):
    path = tmp_path / "tables.yaml"
    path.write_text("topic_prefix: shop\ntables:\n  - name: sales.orders\n    key: [order_id]\n")
    monkeypatch.setenv("CDC_TABLES_CONFIG", str(path))
    config = load_config()
    assert config.names == ["sales.orders"]
    assert config.table("sales.orders").topic == "shop.sales.orders"
    assert default_config().names == ["public.customers", "public.order_lines"]


def test_an_unreadable_configuration_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.yaml: cannot read"):
        load_config(tmp_path / "nope.yaml")


def test_every_job_decodes_in_the_value_modes_of_the_configuration():
    from cdc_reconcile.run import RunSettings

    configured = parse_config({**TABLES, "value_modes": {"interval.handling.mode": "string"}})
    assert configured.value_modes["interval.handling.mode"] == "string"
    assert configured.value_modes["decimal.handling.mode"] == "precise"  # the connector's default
    assert RunSettings(lake_root="lake", pipeline=configured).decode_options.interval_handling_mode == "string"
    default = RunSettings(lake_root="lake", pipeline=parse_config(TABLES))
    assert default.decode_options.interval_handling_mode == "numeric"
