"""docker-compose.yml cannot run here (no Docker engine), so check what can be
checked by reading: it parses, its services run commands the CLI has, and it
configures them only through variables lemongraph reads."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from click.testing import CliRunner

from stream.cli import main
from stream.runtime.kafka import SECURITY_VARIABLES

ROOT = Path(__file__).resolve().parents[3]


def test_compose_services_use_real_commands_and_known_settings() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"kafka", "worker", "ticker", "gateway", "agents", "standin", "demo-tools"} <= set(
        services
    )
    sources = [
        ROOT / "stream" / "runtime" / "config.py",
        ROOT / "stream" / "runtime" / "kafka.py",
        *sorted((ROOT / "stream" / "cli").glob("*.py")),
        ROOT / "agents" / "cli.py",
        ROOT / "agents" / "model.py",
        ROOT / "topics" / "mail.py",
    ]
    text = "".join(path.read_text() for path in sources)
    known = set(re.findall(r'"((?:LEMONGRAPH|API|OPENAI|REPLY|MAIL)_[A-Z_]+)"', text))
    # and the ${VAR}s the bundled catalog's tools read
    known |= set(re.findall(r"\$\{([A-Z_]+)\}", (ROOT / "examples" / "catalog.yaml").read_text()))
    runner = CliRunner()
    for name in ("worker", "ticker", "gateway", "agents", "standin", "demo-tools", "mail"):
        service = services[name]
        command = service["command"]
        result = runner.invoke(main, [command[0], "--help"])
        assert result.exit_code == 0, f"{name}: lemongraph {command[0]} is not a command"
        for option in (arg for arg in command[1:] if arg.startswith("-")):
            assert option in result.output, f"{name}: {option} is not an option of {command[0]}"
        environment = service.get("environment", {})
        assert set(environment) <= known, set(environment) - known
        if name not in ("standin", "demo-tools"):  # these need no broker
            assert environment["LEMONGRAPH_KAFKA_URL"] == "kafka://kafka:9092"
    kafka_env = services["kafka"]["environment"]
    assert kafka_env["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft, no ZooKeeper
    assert "/data" in services["worker"]["volumes"]  # one RocksDB per replica
    gateway = services["gateway"]
    assert (
        gateway["environment"]["LEMONGRAPH_GATEWAY_HOST"] == "0.0.0.0"
    )  # reachable in a container
    assert "API_TOKEN_SECRET" in gateway["environment"]
    assert {f"{LOOPBACK}:3000:3000", f"{LOOPBACK}:3002:3002"} <= set(gateway["ports"])


LOOPBACK = "${LEMONGRAPH_PUBLISH_ADDRESS:-127.0.0.1}"
#: The metrics profile's images run as their own unprivileged users, named explicitly.
IMAGE_USERS = {"prometheus": "65534:65534", "grafana": "472:0"}


def test_compose_publishes_on_loopback_and_runs_no_container_as_root() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for name, service in compose["services"].items():
        for port in service.get("ports", ()):
            assert str(port).startswith(LOOPBACK + ":"), (
                f"{name} publishes {port} on every interface"
            )
        if name != "kafka":  # the apache/kafka image runs as its own appuser
            assert service["user"] == IMAGE_USERS.get(name, "10001:10001"), name
            assert service["cap_drop"] == ["ALL"], name
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "useradd --system --uid 10001" in dockerfile
    user_lines = [line for line in dockerfile.splitlines() if line.startswith("USER ")]
    assert user_lines == ["USER 10001:10001"]
    assert dockerfile.rstrip().splitlines()[-1].startswith("ENTRYPOINT")
    # every Kafka security setting reaches the services that talk to the broker
    for name in ("worker", "ticker", "gateway", "agents"):
        assert set(SECURITY_VARIABLES) <= set(compose["services"][name]["environment"]), name


def test_the_broker_healthcheck_uses_a_plaintext_listener_of_its_own_container() -> None:
    """The healthcheck's client has no SASL or TLS settings: the listener it asks
    stays plain text whatever the others become (the SASL recipe in the comment
    changes INTERNAL and EXTERNAL), and is bound to loopback inside the container."""
    text = (ROOT / "docker-compose.yml").read_text()
    kafka = yaml.safe_load(text)["services"]["kafka"]
    test = " ".join(kafka["healthcheck"]["test"])
    bootstrap = re.search(r"--bootstrap-server (\S+)", test)
    assert bootstrap is not None, test
    env = kafka["environment"]
    listeners = dict(
        item.split("://", 1)[::-1] for item in env["KAFKA_LISTENERS"].split(",")
    )  # address → name
    name = listeners.get(bootstrap.group(1))
    assert name is not None, (bootstrap, listeners)
    assert bootstrap.group(1).startswith("127.0.0.1:"), bootstrap
    recipe = re.search(r"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP: (\S+)", text.split("services:")[0])
    assert recipe is not None
    for protocol_map in (env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"], recipe.group(1)):
        assert f"{name}:PLAINTEXT" in protocol_map.split(","), protocol_map


def test_the_gateway_and_the_agents_share_the_uploads() -> None:
    """An image a person uploads through the gateway is read by the agents service
    for the model (docs/operations.md, "Files"): both containers name one volume,
    at the folder their LEMONGRAPH_FILES_DIR says, which the image gives its user."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    mounts = {}
    for name in ("gateway", "agents"):
        folder = services[name]["environment"]["LEMONGRAPH_FILES_DIR"]
        [mount] = [v for v in services[name]["volumes"] if v.split(":")[1:2] == [folder]]
        mounts[name] = mount.split(":")
    assert mounts["gateway"][0] == mounts["agents"][0] in compose["volumes"]
    assert mounts["agents"][2:] == ["ro"]  # the agents only read them
    assert f"mkdir -p /data {mounts['gateway'][1]}" in (ROOT / "Dockerfile").read_text()
