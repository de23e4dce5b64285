"""The jobs' connection settings as Spark configuration: the ``spark.cdc.*`` keys, their file, and how a job reads them.

The DAG hands a job its connections (DSNs, the source's credentials, the Kafka client config) as Spark
properties in a private ``--properties-file``, which spark-submit gives the driver in client and cluster
mode alike (local, standalone, YARN, Kubernetes); no secret is on a command line or in an environment
variable. A job reads them from the JVM's configuration before its session starts
(:func:`submitted_conf`); its command-line options override them, and the old environment variables
(``$CDC_STATE_DSN``...) are the fallback for running a job by hand. A job run inside its Airflow task
on a Spark Connect server gets the same settings in memory (:func:`given`): no file, no JVM.

Every key holding a secret (or a value that may embed one: a DSN, the Kafka config) is under
``spark.cdc.secret.``: Spark's default ``spark.redaction.regex`` (``(?i)secret|password|token|access[.]?key``)
matches it, so the Spark UI, the event log and ``spark-submit --verbose`` show it redacted.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

STATE_DSN = "spark.cdc.secret.state.dsn"
SOURCE_DSN = "spark.cdc.secret.source.dsn"
SOURCE_PASSWORD = "spark.cdc.secret.source.password"
SOURCE_JDBC_URL = "spark.cdc.source.jdbcUrl"
SOURCE_USER = "spark.cdc.source.user"
KAFKA_CONFIG = "spark.cdc.secret.kafka.config"

SECRET_KEYS = (STATE_DSN, SOURCE_DSN, SOURCE_PASSWORD, KAFKA_CONFIG)
# The environment variable each setting falls back to (running a job by hand).
ENV_FALLBACK = {
    STATE_DSN: "CDC_STATE_DSN",
    SOURCE_DSN: "CDC_PG_DSN",
    SOURCE_PASSWORD: "CDC_PG_PASSWORD",
    SOURCE_JDBC_URL: "CDC_PG_JDBC_URL",
    SOURCE_USER: "CDC_PG_USER",
    KAFKA_CONFIG: "CDC_KAFKA_CONFIG",
}
PREFIX = "spark.cdc."
_given: list[dict[str, str]] = []


@contextlib.contextmanager
def given(settings: Mapping[str, str]) -> Iterator[None]:
    """Within the block, :func:`submitted_conf` is ``settings``: a job called in this process (Spark Connect)."""
    _given.append(dict(settings))
    try:
        yield
    finally:
        _given.pop()


def submitted_conf() -> dict[str, str]:
    """The ``spark.cdc.*`` settings this driver was given; empty when no Spark driver JVM is there yet.

    Under spark-submit (``$PYSPARK_GATEWAY_PORT`` set), the Python driver attaches to spark-submit's JVM,
    whose system properties hold the submitted configuration (``--conf``, ``--properties-file``): a
    ``SparkConf`` loaded there has it, before any session exists. A job started by ``python -m`` has no
    JVM yet and gets nothing here (starting one now would fix its memory before the session asks).
    In a process whose SparkContext is running, its configuration is read.
    """
    if _given:
        return dict(_given[-1])
    from pyspark import SparkConf, SparkContext

    active = SparkContext._active_spark_context
    if active is not None:
        pairs = active.getConf().getAll()
    elif os.environ.get("PYSPARK_GATEWAY_PORT"):
        SparkContext._ensure_initialized()  # attaches to spark-submit's JVM; starts none
        pairs = SparkConf().getAll()
    else:
        return {}
    return {key: value for key, value in pairs if key.startswith(PREFIX)}


def setting(conf: Mapping[str, str], key: str) -> str | None:
    """``key`` from the submitted configuration, else its environment variable; ``None`` when neither has it."""
    return conf.get(key) or os.environ.get(ENV_FALLBACK[key]) or None


def _escape(text: str, *, key: bool = False) -> str:
    """``text`` in java.util.Properties syntax (every character outside printable ASCII as ``\\uXXXX``)."""
    out = []
    for position, char in enumerate(text):
        code = ord(char)
        if char == "\\":
            out.append("\\\\")
        elif char in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[char])
        elif char == " " and (key or position == 0):
            out.append("\\ ")
        elif key and char in "=:#!":
            out.append("\\" + char)
        elif 0x20 <= code < 0x7F:
            out.append(char)
        elif code > 0xFFFF:  # a UTF-16 surrogate pair, as Java reads it
            code -= 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            out.append(f"\\u{code:04x}")
    return "".join(out)


def write_properties(path: Path, settings: Mapping[str, str]) -> Path:
    """Write ``settings`` as a Spark properties file at ``path``, readable by its owner only (0600).

    The file must not exist (it is created exclusively). Spark trims each value, so a value that starts
    or ends with whitespace does not survive (a password should not; a DSN quotes it).
    """
    lines = [f"{_escape(key, key=True)}={_escape(str(value))}\n" for key, value in settings.items()]
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="ascii") as handle:
        handle.writelines(lines)
    return path
