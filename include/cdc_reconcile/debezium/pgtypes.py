"""PostgreSQL column types and the Spark types they decode to, with the connector settings that shape them.

The snapshot side reads the source in the same Spark types as the decoder gives change events, so the
type map and :class:`DecodeOptions` live here, apart from the decoding expressions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..config import VALUE_MODES

# the connector's default unavailable.value.placeholder (unchanged TOAST values)
UNAVAILABLE_VALUE = "__debezium_unavailable_value"

# a table's columns: name -> PostgreSQL type, in table order
TableSpec = Mapping[str, str]


@dataclass(frozen=True)
class DecodeOptions:
    """The connector settings that decide how values were encoded (names as in the connector config)."""

    decimal_handling_mode: str = "precise"
    binary_handling_mode: str = "bytes"
    time_precision_mode: str = "adaptive"
    interval_handling_mode: str = "numeric"
    unavailable_value_placeholder: str = UNAVAILABLE_VALUE
    money_fraction_digits: int = 2
    unconstrained_numeric: T.DecimalType = field(default_factory=lambda: T.DecimalType(38, 18))

    def __post_init__(self) -> None:
        for setting, name in _MODE_FIELDS.items():
            if getattr(self, name) not in VALUE_MODES[setting]:
                raise ValueError(f"{name}={getattr(self, name)!r}: expected one of {VALUE_MODES[setting]}")

    @classmethod
    def from_modes(cls, modes: Mapping[str, str]) -> DecodeOptions:
        """The options for the connector value modes of a configuration (``PipelineConfig.value_modes``)."""
        return cls(**{name: modes[setting] for setting, name in _MODE_FIELDS.items() if setting in modes})


# connector setting -> DecodeOptions field, for the settings that change how a value decodes
_MODE_FIELDS = {
    "decimal.handling.mode": "decimal_handling_mode",
    "binary.handling.mode": "binary_handling_mode",
    "time.precision.mode": "time_precision_mode",
    "interval.handling.mode": "interval_handling_mode",
}


DEFAULT_OPTIONS = DecodeOptions()

_ALIASES = {
    "int2": "smallint",
    "smallserial": "smallint",
    "serial2": "smallint",
    "int": "integer",
    "int4": "integer",
    "serial": "integer",
    "serial4": "integer",
    "int8": "bigint",
    "bigserial": "bigint",
    "serial8": "bigint",
    "oid": "bigint",
    "float4": "real",
    "float8": "double precision",
    "float": "double precision",
    "decimal": "numeric",
    "bool": "boolean",
    "varbit": "bit varying",
    "jsonb": "json",
    "timestamp without time zone": "timestamp",
    "timestamp with time zone": "timestamptz",
    "time without time zone": "time",
    "time with time zone": "timetz",
}
_TYPE_RE = re.compile(
    r"^(?P<name>[a-z_][a-z0-9_ ]*?)\s*(?:\((?P<args>[^)]*)\))?\s*(?P<zone>with(?:out)? time zone)?"
    r"\s*(?P<array>(?:\[\d*\])+)?$"
)

_QUALIFIER_RE = re.compile(r'^(?:"(?:[^"]|"")*"|[A-Za-z_][A-Za-z0-9_$]*)\.(?=["A-Za-z_])')
_QUOTED_RE = re.compile(r'^"(?P<name>(?:[^"]|"")*)"(?P<array>(?:\[\d*\])+)?$')


@dataclass(frozen=True)
class PgType:
    """A parsed PostgreSQL column type: canonical name, modifiers, and whether it is an array."""

    name: str
    args: tuple[int, ...] = ()
    is_array: bool = False

    @classmethod
    def parse(cls, text: str) -> PgType:
        """A type as ``format_type`` prints it; a type outside the search path comes schema-qualified."""
        cleaned = _QUALIFIER_RE.sub("", " ".join(text.strip().split()), count=1)
        quoted = _QUOTED_RE.match(cleaned)
        if quoted:  # a user-defined type whose name needs quotes: its values are text
            return cls(quoted.group("name").replace('""', '"'), (), bool(quoted.group("array")))
        cleaned = cleaned.lower()
        m = _TYPE_RE.match(cleaned)
        if not m:
            raise ValueError(f"cannot parse PostgreSQL type {text!r}")
        name = m.group("name").strip()
        if m.group("zone"):
            name = f"{name} {m.group('zone')}"
        is_array = bool(m.group("array"))
        if name.startswith("_") and not is_array:
            name, is_array = name[1:], True
        args = tuple(int(a) for a in (m.group("args") or "").replace(" ", "").split(",") if a)
        if name == "float" and args:
            name, args = ("real" if args[0] <= 24 else "double precision"), ()
        return cls(_ALIASES.get(name, name), args, is_array)

    def element(self) -> PgType:
        return PgType(self.name, self.args, False)


def _decimal_type(t: PgType, options: DecodeOptions) -> T.DecimalType:
    if t.name == "money":
        return T.DecimalType(19, options.money_fraction_digits)
    if not t.args:
        return options.unconstrained_numeric
    precision = t.args[0]
    scale = max(t.args[1], 0) if len(t.args) > 1 else 0
    scale = min(scale, 38)
    return T.DecimalType(min(max(precision, scale, 1), 38), scale)


_SCALARS: dict[str, T.DataType] = {
    "smallint": T.ShortType(),
    "integer": T.IntegerType(),
    "bigint": T.LongType(),
    "real": T.FloatType(),
    "double precision": T.DoubleType(),
    "boolean": T.BooleanType(),
    "bytea": T.BinaryType(),
    "date": T.DateType(),
    "time": T.LongType(),
    "timestamp": T.TimestampNTZType(),
    "timestamptz": T.TimestampType(),
}


def spark_type(pg_type: str | PgType, options: DecodeOptions = DEFAULT_OPTIONS) -> T.DataType:
    """The Spark type a PostgreSQL column decodes to; the snapshot side must use the same mapping.

    `timestamp` maps to TIMESTAMP_NTZ (wall clock), `timestamptz` to TIMESTAMP (instant), `time` to
    microseconds since midnight (long), `interval` to microseconds (long) unless
    interval.handling.mode=string. Types without a typed mapping (text, uuid, json, enums, ...) stay
    strings, as Debezium sends them.
    """
    t = PgType.parse(pg_type) if isinstance(pg_type, str) else pg_type
    if t.is_array:
        return T.ArrayType(spark_type(t.element(), options))
    if t.name in ("numeric", "money"):
        return _decimal_type(t, options)
    if t.name == "interval":
        return T.LongType() if options.interval_handling_mode == "numeric" else T.StringType()
    return _SCALARS.get(t.name, T.StringType())


POINT_FIELDS = "x double, y double"


def point_text(text: Column) -> Column:
    """A ``point`` as JSON ``{"x":..,"y":..}`` re-serialized by Spark from its two doubles.

    Debezium sends a point as a struct (x, y, wkb, srid) and PostgreSQL prints ``(x,y)``: neither
    text is the other's, so both sides keep the two doubles and Spark writes the text, one form for
    one value.
    """
    return F.to_json(F.from_json(text, POINT_FIELDS))


def hstore_text(text: Column) -> Column:
    """An ``hstore`` as JSON ``{"key":"value",..}`` with its keys sorted, re-serialized by Spark.

    Debezium sends an hstore as a JSON object (hstore.handling.mode=json) in its map's order, and the
    snapshot reads ``hstore_to_json``: the same pairs, not the same text. Both sides keep the pairs
    and Spark writes them in key order.
    """
    pairs = F.from_json(text, T.MapType(T.StringType(), T.StringType()))
    return F.to_json(F.map_from_entries(F.array_sort(F.map_entries(pairs))))


_RANGE_RE = r'^([\[(])(?:"([^"]*)"|([^",]*)),(?:"([^"]*)"|([^",]*))([\])])$'


def _utc_bound(bound: Column) -> Column:
    """A range bound as PostgreSQL prints a timestamptz in UTC; unbounded, infinity or unparsable: as is."""
    instant = bound.try_cast(T.TimestampType())
    micros = F.regexp_replace(F.date_format(instant, "yyyy-MM-dd HH:mm:ss.SSSSSS"), r"\.?0+$", "")
    return F.when(instant.isNull(), bound).otherwise(F.concat(F.lit('"'), micros, F.lit('+00"')))


def tstzrange_text(text: Column) -> Column:
    """A ``tstzrange`` with its bounds in UTC, as PostgreSQL prints it with ``TimeZone=UTC``.

    PostgreSQL prints a bound in the session's time zone: Debezium's events carry the Connect
    worker's (its JVM's zone), the snapshot the Spark executor's. Written in UTC by both sides, one
    instant has one text whatever the zones (session time zone UTC, as every session here has).
    """
    part = lambda n: F.regexp_extract(text, _RANGE_RE, n)  # noqa: E731
    lower = F.when(part(2) != "", part(2)).otherwise(part(3))
    upper = F.when(part(4) != "", part(4)).otherwise(part(5))
    ranged = F.concat(part(1), _utc_bound(lower), F.lit(","), _utc_bound(upper), part(6))
    return F.when(text.rlike(_RANGE_RE), ranged).otherwise(text)


_ISO_INTERVAL_RE = r"^P(-?[0-9]+)Y(-?[0-9]+)M(-?[0-9]+)DT(-?[0-9]+)H(-?[0-9]+)M(-?[0-9]+(?:\.[0-9]*)?)S$"


def interval_iso_text(text: Column) -> Column:
    """An ``interval`` in Debezium's string mode (``P1Y2M3DT4H5M6.78S``, every field written) with its
    seconds exact to the microsecond.

    Debezium writes the seconds from a double (``PGInterval.getSeconds``) through
    ``BigDecimal.valueOf``, so a sub-second value can come out a digit off (``6.1234570000000005``);
    PostgreSQL holds microseconds. Rounded to six places and stripped of trailing zeros, both sides
    write one text for one interval; text in any other form is left as is and compares unequal.
    """
    part = lambda n: F.regexp_extract(text, _ISO_INTERVAL_RE, n)  # noqa: E731
    micros = F.round(part(6).try_cast(T.DecimalType(38, 9)), 6).cast(T.DecimalType(38, 6)).cast(T.StringType())
    seconds = F.regexp_replace(F.regexp_replace(micros, "0+$", ""), r"\.$", "")
    iso = F.concat(
        F.lit("P"), part(1), F.lit("Y"), part(2), F.lit("M"), part(3), F.lit("DT"),
        part(4), F.lit("H"), part(5), F.lit("M"), seconds, F.lit("S"),
    )  # fmt: skip
    return F.when(text.rlike(_ISO_INTERVAL_RE), iso).otherwise(text)


_CANONICAL_TEXT = {"point": point_text, "hstore": hstore_text, "tstzrange": tstzrange_text}
Canonical = Callable[[Column], Column]


def canonical_text(pg_type: str | PgType, options: DecodeOptions = DEFAULT_OPTIONS) -> Canonical | None:
    """The one text form both sides give a value whose source and event texts differ; None: the text as is.

    The decoder applies it to an event's value (an array's to each element), the snapshot to its
    projected value (:func:`canonical_array` for an array), and a column's missing value
    (``column_lineage``) to PostgreSQL's default: one form for one value everywhere.
    """
    t = PgType.parse(pg_type) if isinstance(pg_type, str) else pg_type
    if t.is_array:
        return None
    if t.name == "interval" and options.interval_handling_mode == "string":
        return interval_iso_text
    return _CANONICAL_TEXT.get(t.name)


def canonical_array(pg_type: str | PgType, options: DecodeOptions = DEFAULT_OPTIONS) -> Canonical | None:
    """For an array whose elements have a canonical text: that form applied to each element; else None."""
    t = PgType.parse(pg_type) if isinstance(pg_type, str) else pg_type
    element = canonical_text(t.element(), options) if t.is_array else None
    if element is None:
        return None
    return lambda column: F.transform(column, element)


def not_carried(pg_type: str | PgType) -> str | None:
    """Why Debezium carries no value of a column of this type, or None when it does.

    Seen on Debezium 3.6's PostgreSQL connector: a multirange, and an array of ``point``,
    ``interval``, ``bit varying``, ``money`` or ``xml``, are left out of the change events (no
    converter); an array of ``bit(n)`` arrives as null. The lake holds such a column as null and the
    snapshot reads it as null, so the diff cannot see its values: the snapshot counts them
    (``unrepresentable``) and the suite's source check fails naming the column.
    """
    t = PgType.parse(pg_type) if isinstance(pg_type, str) else pg_type
    if t.name.endswith("multirange"):
        return "Debezium has no converter for multiranges and leaves the column out of its change events"
    if t.is_array and t.name in ("point", "interval", "bit varying", "money", "xml"):
        return f"Debezium has no converter for arrays of {t.name} and leaves the column out of its change events"
    if t.is_array and t.name == "bit":
        return "Debezium sends an array of bit strings as null"
    return None


def table_schema(spec: TableSpec, options: DecodeOptions = DEFAULT_OPTIONS) -> T.StructType:
    """The typed row schema of a table spec, in spec order."""
    return T.StructType([T.StructField(name, spark_type(pg, options), True) for name, pg in spec.items()])


def stored_encoding(pg_type: str | PgType, options: DecodeOptions = DEFAULT_OPTIONS) -> str | None:
    """How the lake encodes a column whose values it cannot hold as their own type; None when it can.

    Delta has no time, time-with-zone, interval or money type, so such a column lands as a number,
    text or plain decimal. The lake table carries this text as the column's comment, so a consumer
    reading the column knows what the value means. It describes what :func:`spark_type`, the decoder
    and the snapshot's ``column_projection`` produce.
    """
    t = PgType.parse(pg_type) if isinstance(pg_type, str) else pg_type
    reason = not_carried(t)
    if reason is not None:
        return f"always null: {reason} (the suite's source check names this column while it holds a value)"
    if t.is_array and t.name == "timetz":
        return "array of string time of day in UTC to the whole second, as Debezium sends it (10:15:30Z)"
    if t.is_array and t.name == "time":
        return (
            "array of int64 microseconds since midnight, to the millisecond as Debezium sends an array's times "
            "(Delta has no TIME type)"
        )
    if t.is_array:
        element = stored_encoding(t.element(), options)
        return None if element is None else f"array of {element}"
    if t.name == "time":
        return "int64 microseconds since midnight (Delta has no TIME type)"
    if t.name == "interval" and isinstance(spark_type(t, options), T.LongType):
        return (
            "int64 microseconds, a month counted as 30.4375 days and a day as 24 hours "
            "(Debezium's interval.handling.mode=numeric; Delta has no interval type)"
        )
    if t.name == "interval":
        return (
            "string ISO-8601 PnYnMnDTnHnMnS with every field, as Debezium sends it, seconds to the microsecond "
            "(interval.handling.mode=string; Delta has no interval type)"
        )
    if t.name == "timetz":
        return "string time of day in UTC, ISO-8601 as Debezium sends it (10:15:30.25Z; Delta has no TIME type)"
    if t.name == "point":
        return 'string JSON {"x": double, "y": double} (Delta has no geometric type)'
    if t.name == "hstore":
        return 'string JSON {"key": "value", ...} with its keys sorted (Delta has no hstore type)'
    if t.name == "money":
        digits = options.money_fraction_digits
        return f"decimal(19,{digits}) amount without currency symbol (money.fraction.digits={digits})"
    return None
