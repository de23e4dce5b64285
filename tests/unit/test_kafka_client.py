"""The Kafka connection value: one config dict, confluent-kafka's configuration and Spark's ``kafka.*`` options.

No broker: what each client would be given, what is refused before any client is built, and that
a password never shows where a log or an error message could carry it.
"""

from __future__ import annotations

import json
import logging

import pytest
from confluent_kafka import KafkaError, KafkaException

from cdc_reconcile import kafka_offsets
from cdc_reconcile.config import ConfigError
from cdc_reconcile.kafka_client import SHARED_KEYS, KafkaClient, as_client, jaas_quoted

SECRET = 's3cr"et\\pw'
SASL = {
    "bootstrap.servers": "k1:9094,k2:9094",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "PLAIN",
    "sasl.username": "cdc",
    "sasl.password": SECRET,
    "ssl.ca.location": "/etc/kafka/ca.pem",
}


def client(**properties) -> KafkaClient:
    return KafkaClient("k1:9094", properties)


def test_a_bare_bootstrap_string_is_plaintext_without_properties():
    kafka = as_client("k1:9092")
    assert kafka == KafkaClient("k1:9092") and as_client(kafka) is kafka
    assert kafka.spark_options() == {"kafka.bootstrap.servers": "k1:9092"}
    assert kafka.confluent_config()["bootstrap.servers"] == "k1:9092"


def test_the_providers_config_dict_reaches_spark_translated_to_the_java_client():
    kafka = KafkaClient.from_config(SASL)
    assert kafka.bootstrap == "k1:9094,k2:9094"
    assert kafka.spark_options() == {
        "kafka.bootstrap.servers": "k1:9094,k2:9094",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="cdc" password="s3cr\\"et\\\\pw";'
        ),
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": "/etc/kafka/ca.pem",
    }


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "scram-sha-512"])
def test_scram_logs_in_through_the_scram_login_module(mechanism):
    options = client(
        **{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": mechanism, "sasl.username": "u"},
        **{"sasl.password": "p"},
    ).spark_options()
    assert options["kafka.sasl.mechanism"] == mechanism.upper()
    assert options["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p";'
    )


def test_jaas_values_escape_what_javas_stream_tokenizer_reads_specially():
    assert jaas_quoted("plain") == '"plain"'
    assert jaas_quoted('a"b\\c') == '"a\\"b\\\\c"'
    assert jaas_quoted("line\nbreak\r") == '"line\\nbreak\\r"'


def test_tls_settings_translate_and_none_means_no_hostname_check():
    options = client(
        **{"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "none"},
        **{"ssl.keystore.location": "/etc/kafka/client.p12", "ssl.keystore.password": "kp"},
        **{"ssl.ca.pem": "-----BEGIN CERTIFICATE-----\nMII...\n-----END CERTIFICATE-----"},
    ).spark_options()
    assert options["kafka.ssl.endpoint.identification.algorithm"] == ""
    assert (options["kafka.ssl.keystore.type"], options["kafka.ssl.keystore.location"]) == (
        "PKCS12",
        "/etc/kafka/client.p12",
    )
    assert options["kafka.ssl.keystore.password"] == "kp"
    assert options["kafka.ssl.truststore.type"] == "PEM"
    assert options["kafka.ssl.truststore.certificates"].startswith("-----BEGIN CERTIFICATE-----")
    https = client(**{"security.protocol": "ssl", "ssl.endpoint.identification.algorithm": "https"}).spark_options()
    assert https["kafka.ssl.endpoint.identification.algorithm"] == "https"
    assert https["kafka.security.protocol"] == "ssl"  # the Java client reads the name in any case


def test_librdkafka_tuning_stays_out_of_spark_and_shared_keys_pass_as_they_are():
    kafka = client(**{"socket.timeout.ms": 30000, "debug": "broker", "client.rack": "eu-1a", "retry.backoff.ms": 250})
    options = kafka.spark_options()
    assert "kafka.socket.timeout.ms" not in options and "kafka.debug" not in options
    assert options["kafka.client.rack"] == "eu-1a" and options["kafka.retry.backoff.ms"] == "250"
    config = kafka.confluent_config()
    assert config["socket.timeout.ms"] == 30000 and config["debug"] == "broker"


def test_every_shared_key_is_a_librdkafka_property():
    from confluent_kafka import Consumer

    values = {"client.rack": "r", "client.dns.lookup": "use_all_dns_ips"}
    config = {key: values.get(key, 1000) for key in SHARED_KEYS}
    Consumer({"group.id": "g", **config}).close()  # raises on a name librdkafka does not know


@pytest.mark.parametrize(
    ("properties", "named"),
    [
        ({"security.protocol": "SSL", "ssl.certificate.location": "/c.pem", "ssl.key.location": "/k.pem"}, "ssl."),
        ({"security.protocol": "SSL", "ssl.key.location": "/k.pem"}, "ssl.key.location"),
        ({"security.protocol": "SSL", "ssl.cipher.suites": "ECDHE-RSA-AES256-GCM-SHA384"}, "ssl.cipher.suites"),
        ({"security.protocol": "SSL", "enable.ssl.certificate.verification": False}, "enable.ssl.certificate"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "sasl.mechanism"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "sasl.mechanism"),
        (
            {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc"},
            "oauth",
        ),
        ({"security.protocol": "SASL_SSL", "sasl.kerberos.service.name": "kafka"}, "sasl.kerberos.service.name"),
        ({"security.protocol": "SASL_SSL", "sasl.username": "u", "sasl.password": "p"}, "sasl.mechanism"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u"}, "sasl.password"),
        ({"sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p"}, "security.protocol is PLAINTEXT"),
        ({"security.protocol": "PLAINTEXT", "ssl.ca.location": "/ca.pem"}, "ssl.ca.location"),
        ({"security.protocol": "TLS"}, "security.protocol"),
        ({"oauth_cb": "my.module.token"}, "oauth_cb"),
        ({"sasl.mechanism": "PLAIN", "sasl.mechanisms": "SCRAM-SHA-256", "security.protocol": "SASL_SSL"}, "differs"),
        ({"socket.timeout.ms": {"nested": 1}}, "socket.timeout.ms"),
    ],
)
def test_what_cannot_reach_spark_as_meant_is_refused_naming_the_key(properties, named):
    with pytest.raises(ConfigError, match=r"k1:9094") as raised:
        client(**{**properties, **({"sasl.password": SECRET} if "sasl.password" in properties else {})})
    message = str(raised.value)
    assert named in message, message
    assert "cdc_kafka" in message or "bootstrap" in message, message
    assert SECRET not in message


def test_the_password_never_shows_in_repr_or_str():
    kafka = KafkaClient.from_config({**SASL, "ssl.keystore.password": "kp-secret", "ssl.keystore.location": "/x"})
    for shown in (repr(kafka), str(kafka), f"{kafka}", repr([kafka])):
        assert SECRET not in shown and "kp-secret" not in shown
        assert "k1:9094,k2:9094" in shown and "'sasl.username': 'cdc'" in shown and "***" in shown


def test_the_products_consumer_settings_win_and_a_users_group_id_is_ignored(caplog):
    user = {
        **SASL,
        "group.id": "shared-group",
        "isolation.level": "read_uncommitted",
        "enable.auto.commit": True,
        "enable.auto.offset.store": True,
        "allow.auto.create.topics": True,
        "error_cb": "my.module.callback",
        "log_level": 6,
    }
    with caplog.at_level(logging.WARNING, logger="cdc_reconcile.kafka_client"):
        kafka = KafkaClient.from_config(user)
    assert "group.id" in caplog.text and "error_cb" in caplog.text
    config = kafka_offsets.consumer_config(kafka, "watermark")
    assert config["isolation.level"] == "read_committed"
    assert config["enable.auto.commit"] is False and config["enable.auto.offset.store"] is False
    assert config["allow.auto.create.topics"] is False
    assert config["group.id"].startswith("cdc-reconcile-watermark-") and callable(config["error_cb"])
    assert config["sasl.password"] == SECRET and config["security.protocol"] == "SASL_SSL"
    assert config["log_level"] == 6  # not a correctness setting: the user's value stays
    admin = kafka.confluent_config(consumer=False)
    assert "isolation.level" not in admin and "group.id" not in admin and admin["sasl.username"] == "cdc"


def test_real_clients_are_built_from_it_and_a_refused_property_is_named_without_the_password():
    properties = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256"}
    kafka = KafkaClient("127.0.0.1:1", {**properties, "sasl.username": "cdc", "sasl.password": SECRET})
    kafka_offsets.new_consumer(kafka, "metadata").close()
    kafka_offsets.new_admin(kafka, "offsets")
    wrong = KafkaClient("127.0.0.1:1", {**kafka.properties, "socket.timeout.msec": 1000})
    with pytest.raises(ConfigError, match=r"127\.0\.0\.1:1.*socket\.timeout\.msec") as raised:
        kafka_offsets.new_consumer(wrong, "metadata")
    assert SECRET not in str(raised.value)
    with pytest.raises(ConfigError, match=r"'sasl\.usrname'"):  # a misspelt security key is refused earlier
        KafkaClient("127.0.0.1:1", {**kafka.properties, "sasl.usrname": "typo"})


def test_json_round_trip_for_the_jobs_environment_variable():
    kafka = KafkaClient.from_config(SASL)
    document = kafka.to_json()
    assert json.loads(document) == SASL  # secrets included: an environment variable, never a command line
    assert KafkaClient.from_json(document) == kafka
    assert KafkaClient.from_json(document, bootstrap="other:9094").bootstrap == "other:9094"
    assert KafkaClient.from_json("", bootstrap="k:9092") == KafkaClient("k:9092")
    with pytest.raises(ConfigError, match="not valid JSON"):
        KafkaClient.from_json("{bootstrap.servers: k}")
    with pytest.raises(ConfigError, match=r'no "bootstrap\.servers"'):
        KafkaClient.from_json('{"security.protocol": "SASL_SSL"}')
    with pytest.raises(ConfigError, match="JSON object"):
        KafkaClient.from_json('["k:9092"]')
    with pytest.raises(ConfigError, match="empty"):
        KafkaClient(" ")


@pytest.mark.parametrize("code", [KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._SSL])
def test_a_refused_login_is_a_configuration_error_naming_the_broker_and_the_settings(code):
    error = kafka_offsets.kafka_error(KafkaException(KafkaError(code)), "k1:9094", "cdc.t", "reading topic metadata")
    assert isinstance(error, kafka_offsets.KafkaAuthenticationFailed)
    assert str(error).startswith("reading topic metadata: Kafka at k1:9094 refused")
    assert "sasl.username" in str(error) and "cdc_kafka" in str(error)


def test_a_login_refusal_the_client_reported_explains_a_call_that_only_timed_out():
    reported = [KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: Authentication failed")]
    timed_out = KafkaException(KafkaError(KafkaError._TRANSPORT))
    error = kafka_offsets.kafka_error(timed_out, "k1:9094", "cdc.t", "reading", reported)
    assert isinstance(error, kafka_offsets.KafkaAuthenticationFailed)
    assert "Authentication failed" in str(error)
    other = [KafkaError(KafkaError._RESOLVE, "Failed to resolve 'k1:9094'")]
    unreachable = kafka_offsets.kafka_error(timed_out, "k1:9094", "cdc.t", "reading", other)
    assert isinstance(unreachable, kafka_offsets.BrokerUnavailable) and "Failed to resolve" in str(unreachable)
