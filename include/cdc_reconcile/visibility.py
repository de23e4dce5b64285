"""PostgreSQL snapshot visibility for change events.

The snapshot job records `pg_current_snapshot()` (`xmin:xmax:xip1,xip2,...`, 64-bit xid8). The CDC
side is folded only over events whose transaction that snapshot saw, so both sides describe the
same point in time while writers keep going.

A transaction id is visible in a snapshot iff it is below `xmin`, or in `[xmin, xmax)` and not in
`xip`: such a transaction had finished (committed or aborted; aborted ones never reach the stream)
when the snapshot was taken. Everything at or above `xmax` started later.

Debezium's `source.txId` is the 64-bit id for snapshot-phase reads but the 32-bit xid for streamed
changes (pgoutput only sends 32 bits), so streamed ids are widened first, see `widen_xid`. On a topic
that spans more than 2^31 transactions (a full rescan of a long-lived or compacted topic) the low 32
bits alone cannot tell an old transaction from one that started after the snapshot; the commit time
Debezium puts in `source.ts_ms` can, see `visible_in_snapshot`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import Column
from pyspark.sql import functions as F

XID32_MODULUS = 1 << 32
_HALF = 1 << 31
# A transaction whose 32-bit xid reads as "after the snapshot" but that committed this long before the
# snapshot's clock is from an earlier xid epoch: 2^31 transactions take hours even at PostgreSQL's
# highest rates, and a transaction that really started after the snapshot cannot commit before it
# unless the server's clock stepped back by this much.
EARLIER_EPOCH_MARGIN_MS = 10 * 60 * 1000


@dataclass(frozen=True)
class PgSnapshot:
    """A parsed `pg_current_snapshot()`; `xip` is sorted and holds 64-bit ids.

    `taken_at_ms`: when the exporting transaction started (`now()`, epoch millis), which precedes the
    snapshot; without it, 32-bit ids are judged by their low bits alone.
    """

    xmin: int
    xmax: int
    xip: tuple[int, ...] = ()
    taken_at_ms: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.xmin <= self.xmax:
            raise ValueError(f"invalid snapshot: xmin={self.xmin} xmax={self.xmax}")
        if any(not self.xmin <= x < self.xmax for x in self.xip):
            raise ValueError(f"invalid snapshot: xip {self.xip} outside [{self.xmin}, {self.xmax})")
        object.__setattr__(self, "xip", tuple(sorted(set(self.xip))))

    @classmethod
    def parse(cls, text: str, taken_at: datetime | None = None) -> PgSnapshot:
        """Parse the text form `xmin:xmax:xip1,xip2` (the xip list may be empty); `taken_at` is when the
        exporting transaction started (an aware datetime)."""
        parts = text.strip().split(":")
        if len(parts) != 3:
            raise ValueError(f"not a pg_snapshot: {text!r}")
        try:
            xmin, xmax = int(parts[0]), int(parts[1])
            xip = tuple(int(x) for x in parts[2].split(",") if x.strip())
        except ValueError as e:
            raise ValueError(f"not a pg_snapshot: {text!r}") from e
        return cls(xmin, xmax, xip, None if taken_at is None else round(taken_at.timestamp() * 1000))

    def __str__(self) -> str:
        return f"{self.xmin}:{self.xmax}:{','.join(str(x) for x in self.xip)}"

    @property
    def epoch(self) -> int:
        """The xid epoch of `xmax` (how many times the 32-bit counter has wrapped)."""
        return self.xmax >> 32

    def widen(self, xid: int) -> int:
        """`widen_xid` for one Python int."""
        if xid >= XID32_MODULUS:
            return xid
        candidate = (self.xmax & ~(XID32_MODULUS - 1)) | xid
        if candidate - self.xmax >= _HALF and candidate >= XID32_MODULUS:
            return candidate - XID32_MODULUS
        if self.xmax - candidate > _HALF:
            return candidate + XID32_MODULUS
        return candidate

    def is_visible(self, txid: int, commit_ms: int | None = None) -> bool:
        """Whether a (64-bit or 32-bit) transaction id was finished when the snapshot was taken;
        `commit_ms`, the transaction's commit time, places a 32-bit id of an earlier epoch."""
        full = self.widen(txid)
        if full < self.xmin or (full < self.xmax and full not in self.xip):
            return True
        return self.earlier_epoch(txid, commit_ms)

    def earlier_epoch(self, txid: int, commit_ms: int | None) -> bool:
        """Whether a 32-bit id that widens to a running or later transaction committed long before the
        snapshot, so it is the same low bits of an earlier epoch (visible)."""
        return (
            txid < XID32_MODULUS
            and commit_ms is not None
            and self.taken_at_ms is not None
            and commit_ms < self.taken_at_ms - EARLIER_EPOCH_MARGIN_MS
        )


def parse_snapshot(text: str, taken_at: datetime | None = None) -> PgSnapshot:
    """Parse `pg_current_snapshot()` text, see `PgSnapshot.parse`."""
    return PgSnapshot.parse(text, taken_at)


def widen_xid(txid: Column, snapshot: PgSnapshot) -> Column:
    """Widen 32-bit xids to 64-bit ids relative to the snapshot's `xmax`; ids >= 2^32 pass through.

    Rule: a 32-bit xid `x` takes the epoch of `xmax` (full id = epoch * 2^32 + x), unless that lands
    2^31 or more after `xmax`, in which case it belongs to the previous epoch (it wrapped before the
    snapshot), or more than 2^31 before `xmax`, in which case it belongs to the next epoch (it
    started after the snapshot, after a wrap). That is: the full id nearest to `xmax` with the same
    low 32 bits. PostgreSQL keeps every live xid within 2^31 of the next xid (wraparound protection),
    so the nearest one is the only one possible. Unlike PostgreSQL's own widening of a snapshot's xip
    (which may assume every id precedes xmax), events streamed after the snapshot are expected here,
    and they must stay above `xmax`.
    """
    base = F.lit(snapshot.xmax & ~(XID32_MODULUS - 1)) + txid
    distance = base - F.lit(snapshot.xmax)
    widened = (
        F.when((distance >= F.lit(_HALF)) & (base >= F.lit(XID32_MODULUS)), base - F.lit(XID32_MODULUS))
        .when(distance < F.lit(-_HALF), base + F.lit(XID32_MODULUS))
        .otherwise(base)
    )
    return F.when(txid >= F.lit(XID32_MODULUS), txid).otherwise(widened).cast("long")


def visible_in_snapshot(
    txid: Column | str, snapshot: PgSnapshot, op: Column | str | None = None, commit_ms: Column | str | None = None
) -> Column:
    """True iff the event's transaction is visible in `snapshot` (after widening 32-bit ids).

    With `op` given, snapshot-phase reads (op `r`) are always visible: they were read from a table
    state that precedes the snapshot. A null txid (and op not `r`) gives null, so callers can count
    such events instead of silently losing them in a filter.

    With `commit_ms` (Debezium's `source.ts_ms`: the transaction's commit time) and the snapshot's
    `taken_at_ms`, a 32-bit id that widens to a transaction running at or starting after the snapshot
    but that committed more than `EARLIER_EPOCH_MARGIN_MS` before it is an earlier epoch's transaction,
    which PostgreSQL finished at least 2^31 transactions before the snapshot: visible.
    """
    t = F.col(txid) if isinstance(txid, str) else txid
    full = widen_xid(t, snapshot)
    in_progress = full.isin(*snapshot.xip) if snapshot.xip else F.lit(False)
    visible = (full < F.lit(snapshot.xmin)) | ((full < F.lit(snapshot.xmax)) & ~in_progress)
    if commit_ms is not None and snapshot.taken_at_ms is not None:
        committed = F.col(commit_ms) if isinstance(commit_ms, str) else commit_ms
        earlier_epoch = (t < F.lit(XID32_MODULUS)) & (committed < F.lit(snapshot.taken_at_ms - EARLIER_EPOCH_MARGIN_MS))
        visible = visible | F.coalesce(earlier_epoch, F.lit(False))
    if op is None:
        return visible
    o = F.col(op) if isinstance(op, str) else op
    return F.when(o == F.lit("r"), F.lit(True)).otherwise(visible)
