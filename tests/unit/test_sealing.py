"""Sealing without a broker: reading watermark events, snapshot visibility, an unreachable broker, error kinds."""

from __future__ import annotations

import json
import socket
import time

import pytest

from cdc_reconcile import kafka_offsets, sealing
from cdc_reconcile.errors import InputError, UnreachableError
from cdc_reconcile.state_store import OffsetRange


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def event(op: str, after: object, *, envelope: bool = True) -> bytes:
    payload = {"op": op, "before": None, "after": after, "source": {"table": "cdc_watermark"}}
    return json.dumps({"schema": {}, "payload": payload} if envelope else payload).encode()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (event("c", {"id": 42, "run_id": "r"}), 42),
        (event("r", {"id": 7}, envelope=False), 7),
        (event("u", {"id": 9}), 9),
        (event("d", None), None),
        (event("c", {"id": "42"}), None),
        (None, None),
        (b"\xff not json", None),
        (b"[1, 2]", None),
    ],
)
def test_watermark_id_of_an_event(raw, expected):
    assert sealing._watermark_id_of(raw) == expected


def test_a_transaction_is_visible_only_if_it_finished_before_the_snapshot():
    snapshot = {"xmin": 100, "xmax": 120, "xip": [105, 110]}
    assert sealing._visible_in(99, snapshot)
    assert sealing._visible_in(104, snapshot)
    assert not sealing._visible_in(105, snapshot)
    assert not sealing._visible_in(120, snapshot)
    assert not sealing._visible_in(500, snapshot)


def test_a_snapshot_that_sees_the_seal_watermark_was_taken_after_the_seal():
    snapshot = {"xmin": 100, "xmax": 120, "xip": [105]}

    def sealed(watermark_txid: int | None) -> OffsetRange:
        return OffsetRange("run", "public.t", "t", {0: 0}, {0: 9}, watermark_id=3, watermark_txid=watermark_txid)

    assert sealing.seal_predates(sealed(99), snapshot)
    assert not sealing.seal_predates(sealed(105), snapshot)
    assert not sealing.seal_predates(sealed(130), snapshot)
    # cannot be told: no snapshot, a range not sealed, or sealed without the watermark's transaction
    assert not sealing.seal_predates(sealed(99), None)
    assert not sealing.seal_predates(OffsetRange("run", "public.t", "t", {0: 0}), snapshot)
    assert not sealing.seal_predates(sealed(None), snapshot)


def test_error_kinds():
    assert issubclass(sealing.SealTimeout, UnreachableError)
    assert issubclass(sealing.WatermarkBeforeSnapshot, InputError)


def test_unreachable_broker_ends_the_wait_for_a_watermark_and_the_end_offsets():
    bootstrap = f"127.0.0.1:{closed_port()}"
    began = time.monotonic()
    with pytest.raises(kafka_offsets.BrokerUnavailable, match=bootstrap):
        sealing.wait_for_watermark(bootstrap, "cdc.public.cdc_watermark", 1, timeout=2)
    with pytest.raises(kafka_offsets.BrokerUnavailable, match=bootstrap):
        sealing.end_offsets(bootstrap, "cdc.public.customers", [0], timeout=2)
    assert time.monotonic() - began < 20
