"""JSON text as Spark columns: the parsing and binding helpers the envelope, transaction and decoding modules share."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

STR_MAP = T.MapType(T.StringType(), T.StringType())
INT_RE = r"^-?[0-9]+$"


def as_text(c: Column) -> Column:
    return c.cast(T.StringType())


def compact_json(text: Column) -> Column:
    """Any JSON document re-serialised compactly by Jackson; null when the text is not one JSON document.

    Wrapping the text as a field value makes Spark copy the parsed structure into a string, which
    normalises whitespace and rejects trailing garbage that a top-level parse would ignore.
    """
    return F.from_json(F.concat(F.lit('{"j":'), text, F.lit("}")), "j string").getField("j")


def json_map(text: Column) -> Column:
    """A JSON object as map<string,string>: strings unquoted, everything else as compact JSON text."""
    return F.from_json(text, STR_MAP)


def is_object_text(text: Column) -> Column:
    return text.startswith("{")


def let(value: Column, body: Callable[[Column], Column]) -> Column:
    """Evaluate `value` once and hand it to `body` as a lambda variable.

    Decoders use a value many times; without the binding each use copies the whole expression tree
    (JSON parse included), which grows multiplicatively and exhausts the driver while planning.
    """
    return F.element_at(F.transform(F.array(value), body), 1)


def int_text(text: Column) -> Column:
    return F.when(text.rlike(INT_RE), text.try_cast(T.LongType()))
