"""Table configuration: which tables are reconciled, their keys, and their Debezium topics.

One configuration serves the DAG's tasks and the Spark jobs alike: the YAML file named by
``CDC_TABLES_CONFIG`` (or a path), else the built-in default in ``tables.py`` beside this file.
``cdc-tables add`` writes the YAML file. Only names that appear in the configuration
ever reach SQL, and each is checked to be a plain ``schema.table`` identifier.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..errors import InputError

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# a ``schema.table`` name as the configuration accepts it (JSON Schema pattern for the trigger form)
TABLE_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$"


class ConfigError(InputError, ValueError):
    """The table configuration is wrong; the message names the entry and the fix."""


@dataclass(frozen=True)
class TableConfig:
    name: str
    key: tuple[str, ...]
    topic_prefix: str = "cdc"

    @property
    def schema(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def table(self) -> str:
        return self.name.split(".", 1)[1]

    @property
    def topic(self) -> str:
        return f"{self.topic_prefix}.{self.name}"

    @property
    def transaction_topic(self) -> str:
        """Debezium's transaction-metadata topic (``topic.transaction`` left at its default)."""
        return f"{self.topic_prefix}.transaction"


# The connector's value-mode settings the decoder reads, each with the values it can read (the
# connector's default first). A deployment whose connector uses others lists them under ``value_modes``.
VALUE_MODES: dict[str, tuple[str, ...]] = {
    "decimal.handling.mode": ("precise", "string", "double"),
    "time.precision.mode": ("adaptive", "adaptive_time_microseconds", "connect"),
    "binary.handling.mode": ("bytes", "base64", "base64-url-safe", "hex"),
    "interval.handling.mode": ("numeric", "string"),
    "hstore.handling.mode": ("json",),
}
DEFAULT_VALUE_MODES = {setting: values[0] for setting, values in VALUE_MODES.items()}


@dataclass(frozen=True)
class Retention:
    """How much of the lake is kept: the newest ``keep_runs`` runs' per-run datasets, and table
    versions (and files) for ``vacuum_hours``. A run older than that can no longer be re-run."""

    keep_runs: int = 336
    vacuum_hours: float = 168.0


@dataclass(frozen=True)
class PipelineConfig:
    tables: tuple[TableConfig, ...]
    topic_prefix: str
    watermark_table: str
    retention: Retention = Retention()
    # the connector's value modes, every setting of VALUE_MODES given: how the jobs decode events
    value_modes: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_VALUE_MODES))

    def table(self, name: str) -> TableConfig:
        for table in self.tables:
            if table.name == name:
                return table
        known = ", ".join(t.name for t in self.tables)
        raise ConfigError(f"table {name!r} is not configured; configured tables: {known}")

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tables]


def parse_flag(text: str) -> bool:
    """A command-line boolean as a template renders it: True/False, true/false, 1/0, yes/no."""
    value = str(text).strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _check_name(name: object, where: str) -> str:
    if not isinstance(name, str) or name.count(".") != 1 or not all(IDENTIFIER.match(p) for p in name.split(".")):
        raise ConfigError(f"{where}: {name!r} must be a 'schema.table' name of letters, digits and underscores")
    return name


DEFAULT_SOURCE = "cdc_reconcile/config/tables.py"


def parse_config(document: dict, source: str = DEFAULT_SOURCE) -> PipelineConfig:
    if not isinstance(document, dict) or not isinstance(document.get("tables"), list) or not document["tables"]:
        raise ConfigError(f"{source}: needs a non-empty 'tables' list")
    prefix = document.get("topic_prefix", "cdc")
    if not isinstance(prefix, str) or not prefix:
        raise ConfigError(f"{source}: 'topic_prefix' must be a non-empty string")
    watermark = _check_name(document.get("watermark_table", "public.cdc_watermark"), f"{source}: watermark_table")
    tables = []
    for index, entry in enumerate(document["tables"]):
        where = f"{source}: tables[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: must be a mapping with 'name' and 'key'")
        name = _check_name(entry.get("name"), f"{where}.name")
        key = entry.get("key")
        if not isinstance(key, list) or not key or not all(isinstance(k, str) and IDENTIFIER.match(k) for k in key):
            raise ConfigError(f"{where}.key: list the primary-key columns, e.g. key: [id]")
        table_prefix = entry.get("topic_prefix", prefix)
        if not isinstance(table_prefix, str) or not table_prefix:
            raise ConfigError(f"{where}.topic_prefix: must be a non-empty string (the connector's topic.prefix)")
        tables.append(TableConfig(name=name, key=tuple(key), topic_prefix=table_prefix))
    names = [t.name for t in tables]
    if len(set(names)) != len(names):
        raise ConfigError(f"{source}: a table is listed twice: {names}")
    return PipelineConfig(
        tables=tuple(tables),
        topic_prefix=prefix,
        watermark_table=watermark,
        retention=_retention(document.get("retention") or {}, f"{source}: retention"),
        value_modes=parse_value_modes(document.get("value_modes") or {}, f"{source}: value_modes"),
    )


def parse_value_modes(section: object, where: str = "value_modes") -> dict[str, str]:
    """The connector value modes of a configuration's ``value_modes`` section, defaults filled in."""
    if not isinstance(section, dict):
        raise ConfigError(f"{where}: a mapping of connector settings to values, e.g. interval.handling.mode: string")
    modes = dict(DEFAULT_VALUE_MODES)
    for setting, value in section.items():
        if setting not in VALUE_MODES:
            raise ConfigError(f"{where}: {setting!r} is not a value mode the decoder reads; one of {list(VALUE_MODES)}")
        if value not in VALUE_MODES[setting]:
            raise ConfigError(
                f"{where}.{setting}: {value!r} cannot be decoded; set the connector and this entry to one of "
                f"{list(VALUE_MODES[setting])}"
            )
        modes[setting] = value
    return modes


def _retention(section: object, where: str) -> Retention:
    if not isinstance(section, dict) or set(section) - {"keep_runs", "vacuum_hours"}:
        raise ConfigError(f"{where}: a mapping with keep_runs (runs kept, >= 2) and vacuum_hours (>= 168)")
    keep_runs = section.get("keep_runs", Retention.keep_runs)
    vacuum_hours = section.get("vacuum_hours", Retention.vacuum_hours)
    if not isinstance(keep_runs, int) or isinstance(keep_runs, bool) or keep_runs < 2:
        raise ConfigError(f"{where}.keep_runs: {keep_runs!r}; keep at least 2 runs (a run reads its predecessor's)")
    if not isinstance(vacuum_hours, int | float) or vacuum_hours < 168:
        raise ConfigError(
            f"{where}.vacuum_hours: {vacuum_hours!r}; Delta refuses to vacuum files younger than 168 hours "
            "(a reader of an older version may still need them)"
        )
    return Retention(keep_runs=keep_runs, vacuum_hours=float(vacuum_hours))


def default_config() -> PipelineConfig:
    """The built-in configuration, used when no YAML file is named."""
    from .tables import TABLES

    return parse_config(TABLES, DEFAULT_SOURCE)


def load_config(path: str | Path | None = None) -> PipelineConfig:
    """The configuration a job runs with: the YAML file at ``path`` or ``$CDC_TABLES_CONFIG``, else the default."""
    path = path or os.environ.get("CDC_TABLES_CONFIG")
    if not path:
        return default_config()
    source = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the table configuration: {exc.strerror}") from exc
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from exc
    return parse_config(document, source)
