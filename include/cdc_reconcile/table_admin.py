"""What adding a table changes, as pure functions: the configuration entry, the connector's settings, and
the checks that the table and the connector suit the decoder.

``cdc-tables add`` (:mod:`cdc_reconcile.tables_cli`) reads the current state, calls these, and applies
what they return; each returns whether anything changed, so running it twice changes nothing.
"""

from __future__ import annotations

import copy
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .config import DEFAULT_VALUE_MODES, VALUE_MODES, ConfigError, parse_config
from .config.tables import TABLES
from .errors import InputError

INCLUDE_LIST = "table.include.list"
EXCLUDE_LIST = "table.exclude.list"
SIGNAL_COLLECTION = "signal.data.collection"
# Replica identities as pg_class.relreplident spells them.
IDENTITY_DEFAULT, IDENTITY_NOTHING, IDENTITY_FULL, IDENTITY_INDEX = "d", "n", "f", "i"


class Refused(InputError):
    """Adding the table would leave the pipeline inconsistent; the message names the setting and the fix."""


def mode_mismatches(connector: Mapping[str, str], expected: Mapping[str, str]) -> list[str]:
    """One message per value-mode setting whose connector value differs from the decoder's."""
    problems = []
    for setting, wanted in expected.items():
        actual = connector.get(setting, DEFAULT_VALUE_MODES[setting])
        if actual != wanted:
            readable = actual in VALUE_MODES[setting]
            problems.append(
                f"the connector's {setting} is {actual!r} but the decoder reads {wanted!r}: set "
                f"{setting}={wanted} in the connector's configuration (existing topics keep the old encoding, "
                "so reconcile them with a full rescan afterwards)"
                + (f", or value_modes: {{{setting}: {actual}}} in the table configuration" if readable else "")
            )
    return problems


# -- the table configuration -----------------------------------------------------------------------


def with_table(document: Mapping | None, name: str, key: Sequence[str], topic_prefix: str) -> tuple[dict, bool]:
    """The configuration document with ``name`` added; (document, whether it changed).

    ``None`` starts from the built-in configuration. An entry already there with the same key is left
    alone; one with another key or topic is refused, since its lake was built with those.
    """
    base = copy.deepcopy(dict(document) if document is not None else TABLES)
    parse_config(base, "the table configuration")
    prefix = base.get("topic_prefix", "cdc")
    for entry in base["tables"]:
        if entry.get("name") != name:
            continue
        existing = (list(entry["key"]), entry.get("topic_prefix", prefix))
        if existing != (list(key), topic_prefix):
            raise Refused(
                f"{name} is already configured with key {existing[0]} and topic prefix {existing[1]!r}, not "
                f"{list(key)} and {topic_prefix!r}: edit its entry by hand if the table really changed"
            )
        return base, False
    entry = {"name": name, "key": list(key)}
    if topic_prefix != prefix:
        entry["topic_prefix"] = topic_prefix
    base["tables"] = [*base["tables"], entry]
    try:
        parse_config(base, "the new entry")
    except ConfigError as exc:
        raise Refused(str(exc)) from exc
    return base, True


# -- the connector ---------------------------------------------------------------------------------


def _patterns(value: str | None) -> list[str]:
    return [p.strip() for p in (value or "").split(",") if p.strip()]


def captures(connector: Mapping[str, str], table: str) -> bool:
    """Whether the connector's include/exclude lists (regular expressions, matched whole) take ``table``."""
    if any(re.fullmatch(p, table) for p in _patterns(connector.get(EXCLUDE_LIST))):
        return False
    include = _patterns(connector.get(INCLUDE_LIST))
    return not include or any(re.fullmatch(p, table) for p in include)


def with_captured(connector: Mapping[str, str], tables: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """The connector configuration with ``tables`` on its include list, every other setting kept.

    Returns (configuration, the tables added). A table an exclude list holds is refused: removing it
    from there is the user's decision.
    """
    updated = dict(connector)
    added = []
    for table in tables:
        if captures(updated, table):
            continue
        if any(re.fullmatch(p, table) for p in _patterns(updated.get(EXCLUDE_LIST))):
            raise Refused(f"the connector's {EXCLUDE_LIST} excludes {table}: remove it from there first")
        updated[INCLUDE_LIST] = ",".join([*_patterns(updated.get(INCLUDE_LIST)), table])
        added.append(table)
    return updated, added


def signal_table(connector: Mapping[str, str]) -> str:
    """The connector's signal table, or a refusal saying how to give it one."""
    name = connector.get(SIGNAL_COLLECTION, "").strip()
    if not name:
        raise Refused(
            f"the connector has no {SIGNAL_COLLECTION}, so a new table's existing rows cannot be snapshotted: "
            "create a signal table (CREATE TABLE public.debezium_signal (id varchar(64) PRIMARY KEY, "
            f"type varchar(32) NOT NULL, data text)) and set {SIGNAL_COLLECTION}=public.debezium_signal"
        )
    return name


@dataclass(frozen=True)
class SnapshotSignal:
    """One row of the signal table asking for an incremental snapshot of a table."""

    id: str
    type: str
    data: str


def snapshot_signal(table: str, surrogate_key: str | None = None) -> SnapshotSignal:
    """The signal for ``table``; its id is the same for the same table, so it is written at most once."""
    data: dict = {"data-collections": [table], "type": "incremental"}
    if surrogate_key:
        data["surrogate-key"] = surrogate_key
    signal_id = f"cdc-tables-add-{uuid.uuid5(uuid.NAMESPACE_URL, 'cdc-tables:' + table)}"
    return SnapshotSignal(signal_id, "execute-snapshot", json.dumps(data))


# -- the source table ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceTable:
    """What the source database says about a table (None fields: the table does not exist)."""

    name: str
    replica_identity: str | None
    primary_key: tuple[str, ...]
    columns: tuple[str, ...]


def surrogate_key(source: SourceTable, key: Sequence[str]) -> str | None:
    """The column an incremental snapshot pages by when the table has no primary key, or a refusal.

    Checks on the way that the table exists, has the key columns, and has a replica identity that
    puts the key in update and delete events.
    """
    name = source.name
    if source.replica_identity is None:
        raise Refused(f"{name} does not exist in the source database (or is not a table): create it first")
    missing = [k for k in key if k not in source.columns]
    if missing:
        raise Refused(f"{name} has no column {', '.join(missing)}: --key names columns of the table")
    if source.replica_identity == IDENTITY_NOTHING or (
        source.replica_identity == IDENTITY_DEFAULT and not source.primary_key
    ):
        raise Refused(
            f"{name} has REPLICA IDENTITY {'NOTHING' if source.replica_identity == IDENTITY_NOTHING else 'DEFAULT'}"
            f"{'' if source.primary_key else ' and no primary key'}, so its updates and deletes carry no key: run "
            f"ALTER TABLE {name} REPLICA IDENTITY FULL"
        )
    if source.primary_key:
        return None
    if len(key) != 1:
        raise Refused(
            f"{name} has no primary key, and an incremental snapshot pages by one column: add a primary key, "
            "or give a single-column unique --key"
        )
    return key[0]
