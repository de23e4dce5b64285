"""How the product reaches Kafka: the bootstrap servers plus client properties, for both of its clients.

The properties are the Apache Kafka provider's "Config Dict" (the ``kafka`` Airflow connection's
extra): librdkafka / confluent-kafka names such as ``security.protocol``, ``sasl.mechanism``,
``sasl.username``, ``sasl.password`` and ``ssl.ca.location``. One :class:`KafkaClient` gives

* the confluent-kafka configuration of every consumer and admin client the product builds
  (:meth:`KafkaClient.confluent_config`), with the product's own settings laid over the user's where
  correctness depends on them (a unique ``group.id``, ``read_committed``, no offset commits);
* Spark's Kafka source options (:meth:`KafkaClient.spark_options`), the same settings translated to
  the Java client's names, so a SASL or TLS listener works for compaction as it does for sealing.

What reaches Spark:

* translated: ``security.protocol``; ``sasl.mechanism`` (or librdkafka's ``sasl.mechanisms``);
  ``sasl.username`` + ``sasl.password`` as ``sasl.jaas.config`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512);
  ``ssl.ca.location`` / ``ssl.ca.pem`` as a PEM truststore; ``ssl.keystore.location`` +
  ``ssl.keystore.password`` as a PKCS#12 keystore; ``ssl.endpoint.identification.algorithm``
  (librdkafka's ``none`` is the Java client's empty value);
* passed as they are (same name and meaning in both clients): :data:`SHARED_KEYS`;
* refused with a :class:`ConfigError` naming the key: any other ``ssl.*`` / ``sasl.*`` key (PEM
  client certificates by file, Kerberos, OAUTHBEARER settings, OpenSSL cipher lists, CRLs),
  ``enable.ssl.certificate.verification=false``, ``oauth_cb``, and the mechanisms GSSAPI and
  OAUTHBEARER: dropping them would make the Spark read connect differently from sealing, or not at all;
* left out: every other key. Those are librdkafka's own tuning (``socket.timeout.ms``,
  ``socket.keepalive.enable``, ``debug``, ``log_level``, ``statistics.interval.ms``,
  ``topic.metadata.refresh.interval.ms``, ``queued.*``, ``fetch.*``, ``api.version.*``,
  ``broker.address.family``, ...), which the Java client does not know or names differently;
  Spark's Kafka source has its own tuning options.

This module imports neither confluent-kafka nor pyspark: the DAG's macros use it while rendering.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .config import ConfigError

log = logging.getLogger(__name__)

Value = str | int | float | bool

# The settings the product's correctness depends on: every consumer reads only committed records,
# in a group of its own, and never commits offsets or creates topics. A user's value is ignored.
PRODUCT_CONSUMER_SETTINGS: Mapping[str, Value] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "isolation.level": "read_committed",
    "allow.auto.create.topics": False,
    "enable.partition.eof": False,
}
# Ignored when given: the product sets them (group.id per consumer) or supplies them (callbacks).
IGNORED_KEYS = frozenset(
    {"group.id", "group.instance.id", "error_cb", "throttle_cb", "stats_cb", "log_cb", "on_commit"}
)
# The same name and meaning in librdkafka and the Java client: passed to Spark as they are.
SHARED_KEYS = frozenset(
    {
        "client.rack",
        "client.dns.lookup",
        "connections.max.idle.ms",
        "metadata.max.age.ms",
        "reconnect.backoff.ms",
        "reconnect.backoff.max.ms",
        "retry.backoff.ms",
        "retry.backoff.max.ms",
        "socket.connection.setup.timeout.ms",
    }
)
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# Security keys with a translation (see _java_properties); any other ssl.* / sasl.* key is refused.
_TRANSLATED = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
        "ssl.ca.location",
        "ssl.ca.pem",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.endpoint.identification.algorithm",
        "enable.ssl.certificate.verification",
    }
)
_SECRET = re.compile(r"password|secret|token|jaas|\.pem$|^ssl_key$", re.IGNORECASE)
_FIX = "fix the Kafka connection's config (the cdc_kafka connection's extra, or $CDC_KAFKA_CONFIG)"


def _masked(key: str, value: Any) -> Any:
    return "***" if _SECRET.search(key) else value


def _java_value(value: Value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def jaas_quoted(value: str) -> str:
    """``value`` as a double-quoted JAAS option value.

    Kafka parses ``sasl.jaas.config`` with ``java.io.StreamTokenizer``: inside quotes a backslash
    escapes the next character and a line break ends the string, so those are escaped.
    """
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


@dataclass(frozen=True)
class KafkaClient:
    """Bootstrap servers plus client properties in librdkafka names; never shows a secret in its repr.

    ``KafkaClient("host:9092")`` is a plaintext connection without properties.
    """

    bootstrap: str
    properties: Mapping[str, Value] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.bootstrap, str) or not self.bootstrap.strip():
            raise ConfigError(f"the Kafka bootstrap servers are empty: set bootstrap.servers (host:port,...); {_FIX}")
        properties = dict(self.properties)
        for key, value in properties.items():
            if not isinstance(key, str):
                raise ConfigError(f"Kafka client property {key!r} (for {self.bootstrap}) is not a name; {_FIX}")
            if key in ("bootstrap.servers", "metadata.broker.list"):
                raise ConfigError(f"Kafka client property {key!r} belongs in bootstrap, not in the properties")
            if not isinstance(value, str | int | float | bool):
                raise ConfigError(
                    f"Kafka client property {key!r} (for {self.bootstrap}) has a {type(value).__name__} value; the "
                    f"config takes strings, numbers and booleans only; {_FIX}"
                )
        object.__setattr__(self, "properties", properties)
        self._java_properties()  # refuse what Spark's Kafka source could not be given, before any step runs

    @classmethod
    def from_config(cls, config: Mapping[str, Any], *, bootstrap: str | None = None) -> KafkaClient:
        """From the provider's Config Dict: ``bootstrap.servers`` plus client properties.

        ``bootstrap`` (e.g. the job's ``--bootstrap-servers``) replaces the dict's ``bootstrap.servers``.
        Keys the product sets itself (``group.id``, callbacks) are dropped with a warning.
        """
        if not isinstance(config, Mapping):
            raise ConfigError(f"the Kafka client config must be a JSON object, got {type(config).__name__}; {_FIX}")
        servers = bootstrap or config.get("bootstrap.servers") or config.get("metadata.broker.list")
        if not servers:
            raise ConfigError(
                'the Kafka client config has no "bootstrap.servers": set it to the brokers (host:port,...), '
                'e.g. {"bootstrap.servers": "broker:9092", "security.protocol": "SASL_SSL", ...}'
            )
        properties = {k: v for k, v in config.items() if k not in ("bootstrap.servers", "metadata.broker.list")}
        ignored = sorted(k for k in properties if k in IGNORED_KEYS)
        if ignored:
            log.warning("Kafka client config for %s: ignoring %s (the product sets these itself)", servers, ignored)
        return cls(str(servers), {k: v for k, v in properties.items() if k not in IGNORED_KEYS})

    @classmethod
    def from_json(cls, document: str, *, bootstrap: str | None = None) -> KafkaClient:
        """From the Config Dict as JSON (``$CDC_KAFKA_CONFIG``); an empty document is no properties."""
        try:
            config = json.loads(document) if document and document.strip() else {}
        except ValueError as exc:
            raise ConfigError(f"the Kafka client config is not valid JSON ({exc}); {_FIX}") from None
        return cls.from_config(config, bootstrap=bootstrap)

    def to_json(self) -> str:
        """The Config Dict as JSON, secrets included: for an environment variable, never a command line."""
        return json.dumps({"bootstrap.servers": self.bootstrap, **self.properties}, sort_keys=True)

    def __repr__(self) -> str:
        shown = {key: _masked(key, value) for key, value in sorted(self.properties.items())}
        return f"KafkaClient(bootstrap={self.bootstrap!r}, properties={shown!r})"

    __str__ = __repr__

    def __hash__(self) -> int:
        return hash((self.bootstrap, tuple(sorted((k, str(v)) for k, v in self.properties.items()))))

    @property
    def security_protocol(self) -> str:
        return str(self.properties.get("security.protocol", "PLAINTEXT")).upper()

    # -- confluent-kafka ---------------------------------------------------------------------------------

    def confluent_config(self, *, consumer: bool = True) -> dict[str, Any]:
        """The confluent-kafka configuration: the user's properties, then the product's settings over them.

        Without ``consumer`` (an admin client) the consumer-only settings are left out. Callers add
        ``group.id`` and ``error_cb``.
        """
        config: dict[str, Any] = {"log_level": 3, **self.properties, "bootstrap.servers": self.bootstrap}
        if consumer:
            config.update(PRODUCT_CONSUMER_SETTINGS)
        else:
            for key in PRODUCT_CONSUMER_SETTINGS:
                config.pop(key, None)
        return config

    # -- Spark's Kafka source (the Java client) ----------------------------------------------------------

    def spark_options(self) -> dict[str, str]:
        """Spark's Kafka source options (``kafka.*``): the bootstrap servers and the translated properties."""
        return {"kafka.bootstrap.servers": self.bootstrap} | {
            f"kafka.{key}": value for key, value in self._java_properties().items()
        }

    def _refuse(self, key: str, why: str) -> ConfigError:
        return ConfigError(f"Kafka client property {key!r} (for {self.bootstrap}): {why}; {_FIX}")

    def _mechanism(self) -> str | None:
        props = self.properties
        given = {k: str(props[k]).strip().upper() for k in ("sasl.mechanism", "sasl.mechanisms") if k in props}
        if len(set(given.values())) > 1:
            raise self._refuse("sasl.mechanisms", f"differs from sasl.mechanism ({given}); set one of them")
        if not given:
            return None
        mechanism = next(iter(given.values()))
        key = next(iter(given))
        if "," in mechanism or " " in mechanism:
            raise self._refuse(key, f"lists several mechanisms ({mechanism}); a client uses one")
        return mechanism

    def _java_properties(self) -> dict[str, str]:
        """The properties in the Java client's names; raises ConfigError for what has no translation."""
        props = self.properties
        java: dict[str, str] = {}
        protocol = self.security_protocol
        if protocol not in SECURITY_PROTOCOLS:
            raise self._refuse("security.protocol", f"{protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}")
        if "security.protocol" in props:
            java["security.protocol"] = str(props["security.protocol"])
        for key in sorted(props):
            if key in _TRANSLATED or key in SHARED_KEYS:
                continue
            if key.startswith(("ssl.", "sasl.", "ssl_")) or key == "oauth_cb":
                raise self._refuse(
                    key,
                    "Spark's Kafka source (the Java client) gets no translation of it, and leaving it out would "
                    "read the topic with other security settings than sealing uses. Use the translated settings "
                    "(sasl.mechanism PLAIN or SCRAM-SHA-256/512 with sasl.username and sasl.password; "
                    "ssl.ca.location; a client certificate as ssl.keystore.location, a PKCS#12 file, with "
                    "ssl.keystore.password)",
                )
        java.update({key: _java_value(props[key]) for key in sorted(SHARED_KEYS & set(props))})
        self._sasl(protocol, java)
        self._ssl(protocol, java)
        return java

    def _sasl(self, protocol: str, java: dict[str, str]) -> None:
        props = self.properties
        mechanism = self._mechanism()
        sasl_keys = sorted(
            k for k in ("sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password") if k in props
        )
        if not protocol.startswith("SASL_"):
            if sasl_keys:
                raise self._refuse(
                    sasl_keys[0],
                    f"is set but security.protocol is {protocol}, so no client would use it: set security.protocol "
                    "to SASL_PLAINTEXT or SASL_SSL, or remove the sasl.* settings",
                )
            return
        key = "sasl.mechanism" if "sasl.mechanism" in props else "sasl.mechanisms"
        if mechanism is None:
            raise self._refuse(
                "sasl.mechanism",
                f"is not set with security.protocol {protocol}; librdkafka would use GSSAPI (Kerberos), which the "
                "product does not support: set sasl.mechanism to PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
            )
        if mechanism not in LOGIN_MODULES:
            raise self._refuse(
                key,
                f"{mechanism} has no translation for Spark's Kafka source (it needs a login or callback handler "
                "class of the Java client); use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
            )
        missing = [k for k in ("sasl.username", "sasl.password") if k not in props]
        if missing:
            raise self._refuse(missing[0], f"is required with sasl.mechanism {mechanism}")
        java["sasl.mechanism"] = mechanism
        java["sasl.jaas.config"] = (
            f"{LOGIN_MODULES[mechanism]} required username={jaas_quoted(str(props['sasl.username']))} "
            f"password={jaas_quoted(str(props['sasl.password']))};"
        )

    def _ssl(self, protocol: str, java: dict[str, str]) -> None:
        props = self.properties
        verify = props.get("enable.ssl.certificate.verification", True)
        if str(verify).lower() in ("false", "0"):
            raise self._refuse(
                "enable.ssl.certificate.verification",
                "the Java client cannot skip verifying the broker's certificate: give the CA that signed it as "
                "ssl.ca.location (a PEM file) instead",
            )
        if "ssl.ca.location" in props and "ssl.ca.pem" in props:
            raise self._refuse("ssl.ca.pem", "is given with ssl.ca.location; give one of them")
        if "ssl.ca.location" in props:
            java["ssl.truststore.type"] = "PEM"
            java["ssl.truststore.location"] = str(props["ssl.ca.location"])
        elif "ssl.ca.pem" in props:
            java["ssl.truststore.type"] = "PEM"
            java["ssl.truststore.certificates"] = str(props["ssl.ca.pem"])
        if "ssl.keystore.location" in props:
            java["ssl.keystore.type"] = "PKCS12"
            java["ssl.keystore.location"] = str(props["ssl.keystore.location"])
            if "ssl.keystore.password" in props:
                java["ssl.keystore.password"] = str(props["ssl.keystore.password"])
        elif "ssl.keystore.password" in props:
            raise self._refuse("ssl.keystore.password", "is given without ssl.keystore.location")
        if "ssl.endpoint.identification.algorithm" in props:
            algorithm = str(props["ssl.endpoint.identification.algorithm"])
            java["ssl.endpoint.identification.algorithm"] = "" if algorithm.lower() == "none" else algorithm
        if not protocol.endswith("SSL"):
            used = [k for k in ("ssl.ca.location", "ssl.ca.pem", "ssl.keystore.location") if k in props]
            if used:
                raise self._refuse(
                    used[0],
                    f"sets TLS but security.protocol is {protocol}, so no client would use it: set security.protocol "
                    "to SSL or SASL_SSL, or remove the ssl.* settings",
                )


def as_client(kafka: KafkaClient | str) -> KafkaClient:
    """A :class:`KafkaClient`; a bare string is bootstrap servers without properties (plaintext)."""
    return kafka if isinstance(kafka, KafkaClient) else KafkaClient(kafka)


__all__ = ["SHARED_KEYS", "KafkaClient", "as_client", "jaas_quoted"]
