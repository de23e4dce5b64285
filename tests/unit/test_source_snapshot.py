"""The key check of the snapshot's catalog step, on column descriptions as the catalog returns them."""

from __future__ import annotations

import pytest

from cdc_reconcile.config import TableConfig
from cdc_reconcile.errors import InputError
from cdc_reconcile.source_snapshot import SourceColumn, require_not_null_key

TABLE = TableConfig(name="public.order lines", key=("order.id", "line no"))


def columns(*nullable: str) -> tuple[SourceColumn, ...]:
    names = ("order.id", "line no", "qty")
    return tuple(SourceColumn(name, "bigint", name not in nullable) for name in names)


def test_a_key_of_not_null_columns_is_accepted():
    require_not_null_key(TABLE, columns("qty"))


def test_a_nullable_key_column_is_refused_naming_table_columns_and_the_fix():
    with pytest.raises(InputError) as refused:
        require_not_null_key(TABLE, columns("line no", "qty"))
    message = str(refused.value)
    assert "['order.id', 'line no'] of public.order lines has nullable column(s) ['line no']" in message
    assert 'ALTER TABLE "public"."order lines" ALTER COLUMN "line no" SET NOT NULL' in message
    assert "'qty'" not in message
