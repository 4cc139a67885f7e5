"""The Kafka security settings: what each mode gives every aiokafka client and
the Faust apps, what cannot connect is refused at start, and every client
lemongraph constructs gets its settings from the one helper."""

from __future__ import annotations

import ast
import ssl
import subprocess
from pathlib import Path
from typing import Any

import faust
import pytest
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

from stream.engine.app import faust_settings
from stream.runtime.config import ConfigError, Settings
from stream.runtime.kafka import KafkaSecurity, client_kwargs

ROOT = Path(__file__).resolve().parents[3]
URL = "kafka://broker:9093"


def certificate(folder: Path, name: str = "ca") -> tuple[Path, Path]:
    """A self-signed certificate and its key, made by openssl."""
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def settings(**env: str) -> Settings:
    return Settings.from_env({"LEMONGRAPH_KAFKA_URL": URL, **env}, dotenv=Path("/nonexistent"))


def test_plaintext_is_the_default() -> None:
    security = settings().kafka_security
    assert client_kwargs("b:9092", security) == {
        "bootstrap_servers": "b:9092",
        "security_protocol": "PLAINTEXT",
    }
    assert security.faust_credentials() is None


def test_tls_verifies_the_broker_with_the_given_authority(tmp_path: Path) -> None:
    ca, _ = certificate(tmp_path)
    security = settings(
        LEMONGRAPH_KAFKA_SECURITY_PROTOCOL="ssl", LEMONGRAPH_KAFKA_SSL_CAFILE=str(ca)
    ).kafka_security
    kwargs = client_kwargs("b:9093", security)
    assert kwargs["security_protocol"] == "SSL"
    context = kwargs["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert context.check_hostname
    assert len(context.get_ca_certs()) == 1
    assert "sasl_mechanism" not in kwargs
    credentials = security.faust_credentials()
    assert isinstance(credentials, faust.SSLCredentials)
    assert dict(credentials_to_aiokafka_auth(credentials))["security_protocol"] == "SSL"


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_over_tls_with_each_mechanism(tmp_path: Path, mechanism: str) -> None:
    ca, _ = certificate(tmp_path)
    client, key = certificate(tmp_path, "client")
    security = settings(
        LEMONGRAPH_KAFKA_SECURITY_PROTOCOL="SASL_SSL",
        LEMONGRAPH_KAFKA_SASL_MECHANISM=mechanism.lower(),
        LEMONGRAPH_KAFKA_SASL_USERNAME="lemon",
        LEMONGRAPH_KAFKA_SASL_PASSWORD="s3cret",
        LEMONGRAPH_KAFKA_SSL_CAFILE=str(ca),
        LEMONGRAPH_KAFKA_SSL_CERTFILE=str(client),
        LEMONGRAPH_KAFKA_SSL_KEYFILE=str(key),
    ).kafka_security
    kwargs = client_kwargs("b:9093", security)
    expected: dict[str, Any] = {
        "bootstrap_servers": "b:9093",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "lemon",
        "sasl_plain_password": "s3cret",
    }
    assert {k: v for k, v in kwargs.items() if k != "ssl_context"} == expected
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)
    # Faust's own translation of the credentials gives its clients the same.
    credentials = security.faust_credentials()
    assert isinstance(credentials, faust.SASLCredentials)
    auth = dict(credentials_to_aiokafka_auth(credentials))
    assert {k: v for k, v in auth.items() if k != "ssl_context"} == {
        k: v for k, v in expected.items() if k != "bootstrap_servers"
    }


def test_sasl_in_plain_text() -> None:
    security = settings(
        LEMONGRAPH_KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT",
        LEMONGRAPH_KAFKA_SASL_USERNAME="lemon",
        LEMONGRAPH_KAFKA_SASL_PASSWORD="pw",
    ).kafka_security
    kwargs = client_kwargs("b:9092", security)
    assert kwargs["sasl_mechanism"] == "PLAIN"
    assert "ssl_context" not in kwargs
    credentials = security.faust_credentials()
    assert dict(credentials_to_aiokafka_auth(credentials))["security_protocol"] == "SASL_PLAINTEXT"


def test_the_faust_apps_get_the_credentials() -> None:
    security = settings(
        LEMONGRAPH_KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT",
        LEMONGRAPH_KAFKA_SASL_USERNAME="lemon",
        LEMONGRAPH_KAFKA_SASL_PASSWORD="pw",
    )
    credentials = faust_settings(security, tansu=False)["broker_credentials"]
    assert isinstance(credentials, faust.SASLCredentials)
    assert credentials.username == "lemon"
    assert faust_settings(settings(), tansu=False)["broker_credentials"] is None


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"LEMONGRAPH_KAFKA_SECURITY_PROTOCOL": "TLS"}, "must be one of PLAINTEXT, SSL"),
        ({"LEMONGRAPH_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "needs LEMONGRAPH_KAFKA_SASL_USER"),
        ({"LEMONGRAPH_KAFKA_SASL_USERNAME": "u"}, "is PLAINTEXT: use SASL_SSL"),
        (
            {"LEMONGRAPH_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
             "LEMONGRAPH_KAFKA_SASL_MECHANISM": "GSSAPI",
             "LEMONGRAPH_KAFKA_SASL_USERNAME": "u", "LEMONGRAPH_KAFKA_SASL_PASSWORD": "p"},
            "must be one of PLAIN, SCRAM-SHA-256",
        ),
        ({"LEMONGRAPH_KAFKA_SSL_CAFILE": "/etc/hostname"}, "is PLAINTEXT: use SSL or SASL_SSL"),
        (
            {"LEMONGRAPH_KAFKA_SECURITY_PROTOCOL": "SSL",
             "LEMONGRAPH_KAFKA_SSL_CAFILE": "/nonexistent/ca.pem"},
            "no such file",
        ),
        (
            {"LEMONGRAPH_KAFKA_SECURITY_PROTOCOL": "SSL",
             "LEMONGRAPH_KAFKA_SSL_CERTFILE": "/etc/hostname"},
            "go together",
        ),
        (
            {"LEMONGRAPH_KAFKA_SECURITY_PROTOCOL": "SSL",
             "LEMONGRAPH_KAFKA_SSL_CAFILE": "/etc/hostname"},
            "cannot use them",
        ),
    ],
)  # fmt: skip
def test_settings_that_cannot_connect_are_refused(env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        settings(**env)


def test_the_embedded_broker_is_plain_text_only() -> None:
    with pytest.raises(ConfigError, match="needs LEMONGRAPH_KAFKA_URL"):
        Settings.from_env({"LEMONGRAPH_KAFKA_SECURITY_PROTOCOL": "SSL"}, dotenv=Path("/x"))


def test_the_environment_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEMONGRAPH_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("LEMONGRAPH_KAFKA_SASL_USERNAME", "env-user")
    monkeypatch.setenv("LEMONGRAPH_KAFKA_SASL_PASSWORD", "pw")
    assert client_kwargs("b:1")["sasl_plain_username"] == "env-user"
    assert client_kwargs("b:1", KafkaSecurity())["security_protocol"] == "PLAINTEXT"


CLIENTS = {"AIOKafkaProducer", "AIOKafkaConsumer", "AIOKafkaAdminClient"}


def _calls(tree: ast.AST) -> list[ast.Call]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in CLIENTS or name in ("common_settings", "new_consumer"):
                found.append(node)
    return found


def test_every_kafka_client_is_made_through_the_helper() -> None:
    made = 0
    wrong = []
    for path in sorted([*ROOT.glob("stream/**/*.py"), *ROOT.glob("agents/**/*.py")]):
        for call in _calls(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.relative_to(ROOT)}:{call.lineno}"
            func = call.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "common_settings":
                # The Faust apps: the settings' security, given explicitly.
                if len(call.args) + len(call.keywords) < 5:
                    wrong.append(f"{where}: common_settings without the security")
                continue
            made += 1
            if name == "new_consumer":
                # stream/runtime/kafka.py's factory, made below with **client_kwargs:
                # given the caller's security explicitly.
                if len(call.args) < 2 and not any(k.arg == "security" for k in call.keywords):
                    wrong.append(f"{where}: new_consumer without the security")
                continue
            splats = [k.value for k in call.keywords if k.arg is None]
            through = any(
                isinstance(v, ast.Call) and getattr(v.func, "id", "") == "client_kwargs"
                for v in splats
            )
            direct = any(k.arg == "bootstrap_servers" for k in call.keywords)
            if not through or direct:
                wrong.append(f"{where}: {name} not made with **client_kwargs(...)")
            # And given the security explicitly: without it, client_kwargs reads
            # the environment again, not the Settings the caller has.
            for v in splats:
                if isinstance(v, ast.Call) and len(v.args) + len(v.keywords) < 2:
                    wrong.append(f"{where}: client_kwargs(...) without the security")
    assert made >= 10
    assert not wrong, "\n".join(wrong)


def test_the_clients_of_the_gateway_worker_and_cli_need_the_security() -> None:
    # The settings' security is a required parameter, so no caller forgets it
    # (the gateway's read model once connected with the environment's while
    # its producer used the settings').
    import inspect

    from stream.cli.outcome import send_and_wait
    from stream.engine.table import JobTable
    from stream.gateway.readmodels.jobs import ReadModel
    from stream.runtime.broker import cluster_id, ensure_topics
    from stream.runtime.resets import ClusterWatch, find_resets

    for function in (
        ReadModel.follow, send_and_wait, find_resets, ClusterWatch.__init__,
        ensure_topics, cluster_id, JobTable.catch_up,
    ):  # fmt: skip
        parameter = inspect.signature(function).parameters["security"]
        assert parameter.default is inspect.Parameter.empty, function.__qualname__
