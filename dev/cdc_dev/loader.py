"""Demo loader: inserts, updates and deletes on the demo tables at a chosen rate.

The seed's loader grown up: every operation commits in its own transaction (or ``--batch`` of them
together), the mix and rate are chosen, the run is bounded by ``--duration`` or ``--count``, and the
same ``--seed`` writes the same values. Values cover what trips CDC pipelines: unicode, NULLs,
jsonb, numerics with scale, timestamps with zone.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal

import psycopg

NAMES = ["Ada", "Grace", "Linus", "Zoë", "Søren", "Jürgen", "María José", "李雷", "Дмитрий", "O'Brien", "🙂 emoji"]
SKUS = ["SKU-001", "SKU-042", "SKU-1337", "sku-ünïcødé", "SKU-9000"]
OPERATIONS = ("insert", "update", "delete")
TABLES = ("customers", "order_lines")


@dataclass
class LoadStats:
    """What the loader committed, per table and operation."""

    committed: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    def total(self) -> int:
        return sum(self.committed.values())

    def summary(self) -> str:
        parts = ", ".join(f"{table}.{op}={n}" for (table, op), n in sorted(self.committed.items()))
        rate = self.total() / self.seconds if self.seconds else 0.0
        return f"{self.total()} operations in {self.seconds:.1f}s ({rate:.0f}/s): {parts}"


def parse_mix(text: str) -> dict[str, float]:
    """``insert=6,update=3,delete=1`` -> weights; unknown operations are refused."""
    weights: dict[str, float] = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        name = name.strip()
        if name not in OPERATIONS:
            raise ValueError(f"--mix: unknown operation {name!r}; use {', '.join(OPERATIONS)}")
        try:
            weights[name] = float(value)
        except ValueError as exc:
            raise ValueError(f"--mix: weight of {name!r} must be a number, got {value!r}") from exc
    if not weights or sum(weights.values()) <= 0:
        raise ValueError("--mix: at least one operation needs a positive weight")
    return weights


class Loader:
    """Writes one operation per call to :meth:`step`; tracks the keys it can update or delete."""

    def __init__(self, conn: psycopg.Connection, *, tables: tuple[str, ...] = TABLES, seed: int = 0) -> None:
        self.conn = conn
        self.tables = tables
        self.rng = random.Random(seed)
        self.customer_ids: list[int] = [r[0] for r in conn.execute("SELECT id FROM public.customers LIMIT 100000")]
        self.line_keys: list[tuple[int, int]] = [
            (r[0], r[1]) for r in conn.execute("SELECT order_id, line_no FROM public.order_lines LIMIT 100000")
        ]
        self.next_order = 1 + (conn.execute("SELECT coalesce(max(order_id), 0) FROM public.order_lines").fetchone()[0])
        conn.commit()

    def step(self, operation: str, table: str) -> str:
        """Apply one operation; returns the operation really done (update/delete fall back to insert)."""
        if table == "customers":
            return self._customer(operation)
        return self._order_line(operation)

    def _money(self) -> Decimal:
        return Decimal(self.rng.randint(-10_000_000, 10_000_000)) / 100

    def _customer(self, operation: str) -> str:
        rng = self.rng
        if operation != "insert" and not self.customer_ids:
            operation = "insert"
        if operation == "insert":
            name = rng.choice(NAMES)
            email = None if rng.random() < 0.1 else f"{name.split()[0].lower()}{rng.randint(1, 10**6)}@example.org"
            attrs = (
                None if rng.random() < 0.1 else json.dumps({"tier": rng.choice(["gold", "free"]), "n": rng.random()})
            )
            row = self.conn.execute(
                "INSERT INTO public.customers (name, email, balance, attrs) VALUES (%s, %s, %s, %s) RETURNING id",
                (name, email, self._money(), attrs),
            ).fetchone()
            self.customer_ids.append(row[0])
        elif operation == "update":
            key = rng.choice(self.customer_ids)
            self.conn.execute(
                "UPDATE public.customers SET balance = %s, attrs = coalesce(attrs, '{}'::jsonb) || %s::jsonb, "
                "updated_at = now() WHERE id = %s",
                (self._money(), json.dumps({"seen": rng.randint(0, 1000)}), key),
            )
        else:
            key = self.customer_ids.pop(rng.randrange(len(self.customer_ids)))
            self.conn.execute("DELETE FROM public.customers WHERE id = %s", (key,))
        return operation

    def _order_line(self, operation: str) -> str:
        rng = self.rng
        if operation != "insert" and not self.line_keys:
            operation = "insert"
        if operation == "insert":
            order_id = self.next_order if rng.random() < 0.4 or not self.line_keys else rng.choice(self.line_keys)[0]
            self.next_order = max(self.next_order, order_id + 1)
            line_no = 1 + max((line for oid, line in self.line_keys if oid == order_id), default=0)
            self.conn.execute(
                "INSERT INTO public.order_lines (order_id, line_no, sku, quantity, unit_price, note) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                (
                    order_id,
                    line_no,
                    rng.choice(SKUS),
                    rng.randint(1, 50),
                    Decimal(rng.randint(1, 10**8)) / 10**4,
                    None if rng.random() < 0.5 else "gift ✨",
                ),
            )
            self.line_keys.append((order_id, line_no))
        elif operation == "update":
            order_id, line_no = rng.choice(self.line_keys)
            self.conn.execute(
                "UPDATE public.order_lines SET quantity = %s WHERE order_id = %s AND line_no = %s",
                (rng.randint(1, 50), order_id, line_no),
            )
        else:
            order_id, line_no = self.line_keys.pop(rng.randrange(len(self.line_keys)))
            self.conn.execute(
                "DELETE FROM public.order_lines WHERE order_id = %s AND line_no = %s", (order_id, line_no)
            )
        return operation


def run_loader(
    dsn: str,
    *,
    rate: float = 100.0,
    duration: float | None = None,
    count: int | None = None,
    mix: dict[str, float] | None = None,
    tables: tuple[str, ...] = TABLES,
    batch: int = 1,
    seed: int = 0,
    stop: threading.Event | None = None,
) -> LoadStats:
    """Run until ``duration`` seconds, ``count`` operations, or ``stop`` is set, whichever is first.

    ``rate`` is operations per second across all tables (0 = as fast as the database takes them).
    Only committed operations are counted.
    """
    if duration is None and count is None and stop is None:
        raise ValueError("the loader needs --duration, --count or a stop event; it would never end")
    mix = mix or {"insert": 6, "update": 3, "delete": 1}
    names, weights = zip(*mix.items(), strict=True)
    stats = LoadStats()
    pending: Counter = Counter()
    began = time.monotonic()
    with psycopg.connect(dsn) as conn:
        loader = Loader(conn, tables=tables, seed=seed)
        done = 0
        while True:
            elapsed = time.monotonic() - began
            if (duration is not None and elapsed >= duration) or (count is not None and done >= count):
                break
            if stop is not None and stop.is_set():
                break
            table = loader.rng.choice(tables)
            operation = loader.step(loader.rng.choices(names, weights)[0], table)
            pending[(table, operation)] += 1
            done += 1
            if done % batch == 0:
                conn.commit()
                stats.committed.update(pending)
                pending.clear()
            if rate > 0:
                ahead = done / rate - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)
        conn.commit()
        stats.committed.update(pending)
    stats.seconds = time.monotonic() - began
    return stats


def main(argv: list[str] | None = None) -> int:
    from .stack.config import StackConfig

    parser = argparse.ArgumentParser(prog="cdc-loader", description=__doc__)
    parser.add_argument("--dsn", default=None, help="libpq DSN (default: the embedded stack's database)")
    parser.add_argument("--rate", type=float, default=100.0, help="operations per second; 0 = unthrottled")
    parser.add_argument("--duration", type=float, help="seconds to run")
    parser.add_argument("--count", type=int, help="operations to run")
    parser.add_argument("--mix", default="insert=6,update=3,delete=1", help="weights per operation")
    parser.add_argument("--tables", default=",".join(TABLES), help=f"comma list of {', '.join(TABLES)}")
    parser.add_argument("--batch", type=int, default=1, help="operations per transaction")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    tables = tuple(t.strip() for t in args.tables.split(",") if t.strip())
    unknown = set(tables) - set(TABLES)
    if unknown:
        parser.error(f"--tables: unknown {sorted(unknown)}; choose from {', '.join(TABLES)}")
    if args.duration is None and args.count is None:
        parser.error("give --duration or --count")
    try:
        mix = parse_mix(args.mix)
    except ValueError as exc:
        parser.error(str(exc))
    dsn = args.dsn or StackConfig().pg_dsn
    try:
        stats = run_loader(
            dsn,
            rate=args.rate,
            duration=args.duration,
            count=args.count,
            mix=mix,
            tables=tables,
            batch=max(1, args.batch),
            seed=args.seed,
        )
    except psycopg.OperationalError as exc:
        print(f"error: cannot reach PostgreSQL at {dsn!r}: {exc}. Is the stack up (cdc-stack up)?", file=sys.stderr)
        return 2
    print(stats.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
