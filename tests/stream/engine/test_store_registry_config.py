"""``stream.engine.store`` (how a job is stored), ``stream.engine.registry`` (playbook
versions), ``stream.runtime.config`` (settings from the environment) and
``stream.runtime.kafka.bootstrap_of``."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from compiler import Event, JobGraph, JobState, Start, load_playbook
from stream.engine.registry import Registry
from stream.engine.store import Applied, decode_stored, encode_stored, next_due_ms, peek_header
from stream.runtime.config import ConfigError, Settings, read_dotenv
from stream.runtime.kafka import bootstrap_of

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

PLAYBOOK_V1 = """\
key: welcome
version: 1
milestones:
  - id: greet
    condition: greeted WITHIN 1d
"""

PLAYBOOK_V2 = """\
key: welcome
version: 2
milestones:
  - id: greet
    condition: greeted WITHIN 2d
  - id: followUp
    needs: [greet]
    condition: replied
"""


def started(text: str = PLAYBOOK_V1, key: str = "job-1") -> tuple[JobGraph, JobState]:
    graph = JobGraph(load_playbook(text))
    state = graph.next(None, T0, Start(key, graph.playbook.key)).state
    assert state is not None
    return graph, state


def epoch_ms(instant: datetime) -> int:
    return int(instant.timestamp() * 1000)


# -- store --------------------------------------------------------------------------------


def test_a_stored_job_round_trips() -> None:
    _graph, state = started()
    # Applied on its home partition 3 up to offset 41, and a record forwarded
    # from partition 0 (offset 7).
    applied = Applied().after(3, 41).after(0, 7)
    raw = encode_stored(3, applied, state)
    due = epoch_ms(T0 + timedelta(days=1))
    assert raw.startswith(b"LG2 3 %d 0:7,3:41\n" % due)
    assert peek_header(raw) == (3, due)
    stored = decode_stored(raw)
    assert (stored.partition, stored.applied, stored.next_due_ms) == (3, applied, due)
    assert stored.state == state
    body = raw[raw.index(b"\n") + 1 :]
    assert hashlib.sha256(body).hexdigest() == stored.state.hash


def test_a_job_with_no_timer_stores_a_dash() -> None:
    graph, state = started()
    done = graph.next(state, T0 + timedelta(hours=1), Event("greeted")).state
    assert done is not None
    assert done.status == "done"
    assert next_due_ms(done) is None
    raw = encode_stored(0, Applied(), done)
    assert raw.startswith(b"LG2 0 - -\n")
    assert peek_header(raw) == (0, None)
    assert decode_stored(raw).state == done
    assert decode_stored(raw).applied == Applied()


def test_a_job_stored_by_the_first_format_is_still_read() -> None:
    _graph, state = started()
    raw = b"LG1 2 41 -\n" + state.to_bytes()
    stored = decode_stored(raw)
    assert (stored.partition, stored.next_due_ms) == (2, None)
    assert stored.applied.covers(2, 41)
    assert not stored.applied.covers(2, 42)
    assert not stored.applied.covers(1, 0)  # another partition's offsets are not its
    assert decode_stored(b"LG1 2 -1 -\n" + state.to_bytes()).applied == Applied()


def test_applied_compares_an_offset_only_with_its_own_partition() -> None:
    applied = Applied().after(1, 100)
    assert applied.covers(1, 100)
    assert applied.covers(1, 3)
    assert not applied.covers(1, 101)
    assert not applied.covers(2, 3)  # offset 3 of partition 2 is not below 100 of partition 1
    moved = applied.after(2, 3)
    assert moved.covers(2, 3)
    assert not applied.covers(2, 3)  # immutable: after() returned a new one
    assert Applied.decode(moved.encode()) == moved


def test_next_due_is_the_earliest_timer() -> None:
    _graph, state = started(PLAYBOOK_V2)
    assert next_due_ms(state) == epoch_ms(T0 + timedelta(days=2))


@pytest.mark.parametrize(
    "raw",
    [
        b"LG2 0 - 0\n{}",  # applied is not p:o
        b"LG2 0 - 1:x\n{}",
        b"LG2 0 -\n{}",  # a field short
        b"XX 0 0 -\n{}",
        b"LG1 0 0 -",  # no newline
        b"LG1 0 -\n{}",  # a field short
        b"LG1 0 0 - 9\n{}",  # a field too many
        b"LG1 zero 0 -\n{}",
        b"LG1 0 0 soon\n{}",
        b"",
    ],
)
def test_a_corrupted_header_is_an_error(raw: bytes) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each corruption words it differently
        peek_header(raw)
    with pytest.raises(ValueError):  # noqa: PT011
        decode_stored(raw)


def test_a_wrong_magic_names_the_header() -> None:
    with pytest.raises(ValueError, match="not a stored job"):
        peek_header(b"LG9 0 0 -\n{}")


# -- registry -----------------------------------------------------------------------------


def test_latest_is_the_highest_version_and_old_versions_stay() -> None:
    v1, v2 = load_playbook(PLAYBOOK_V1), load_playbook(PLAYBOOK_V2)
    registry = Registry([v1])
    first = registry.latest("welcome")
    assert first is not None
    assert first.playbook.version == 1
    assert registry.add(v2) is True
    latest = registry.latest("welcome")
    assert latest is not None
    assert latest.playbook.version == 2
    assert [m.id for m in latest.playbook.milestones] == ["greet", "followUp"]
    pinned = registry.graph("welcome", 1)
    assert pinned is not None
    assert pinned.playbook.version == 1
    assert [m.id for m in pinned.playbook.milestones] == ["greet"]
    assert registry.graph("welcome", 3) is None
    assert registry.latest("nope") is None
    assert registry.graph("nope", 1) is None
    assert len(registry) == 2
    assert [(p.key, p.version) for p in registry.playbooks()] == [("welcome", 1), ("welcome", 2)]


def test_an_older_version_added_later_does_not_become_latest() -> None:
    registry = Registry([load_playbook(PLAYBOOK_V2)])
    assert registry.add(load_playbook(PLAYBOOK_V1)) is True
    latest = registry.latest("welcome")
    assert latest is not None
    assert latest.playbook.version == 2
    assert registry.graph("welcome", 1) is not None


def test_re_adding_an_identical_version_returns_false_and_keeps_the_graph() -> None:
    registry = Registry([load_playbook(PLAYBOOK_V1)])
    graph = registry.graph("welcome", 1)
    assert registry.add(load_playbook(PLAYBOOK_V1, "again.yaml")) is False
    assert registry.graph("welcome", 1) is graph
    assert len(registry) == 1


def test_add_spec_compiles_and_registers() -> None:
    registry = Registry()
    spec: dict[str, object] = {
        "key": "spec",
        "version": 4,
        "milestones": [{"id": "only", "condition": "x WITHIN 1h"}],
    }
    playbook = registry.add_spec(spec, "playbooks-topic")
    assert (playbook.key, playbook.version) == ("spec", 4)
    latest = registry.latest("spec")
    assert latest is not None
    assert latest.playbook.version == 4


# -- config -------------------------------------------------------------------------------

ALL_VARIABLES = [
    "LEMONGRAPH_KAFKA_URL",
    "LEMONGRAPH_PLAYBOOKS_DIR",
    "LEMONGRAPH_DATA_DIR",
    "LEMONGRAPH_TOPIC_PREFIX",
    "LEMONGRAPH_PARTITIONS",
    "LEMONGRAPH_TICK_INTERVAL",
    "LEMONGRAPH_API_PORT",
    "LEMONGRAPH_UI_PORT",
    "API_TOKEN_SECRET",
    "LEMONGRAPH_GATEWAY_HOST",
    "LEMONGRAPH_RATE_LIMIT",
    "LEMONGRAPH_RATE_BURST",
    "LEMONGRAPH_API_MAX_BODY",
]


def no_dotenv(tmp_path: Path) -> Path:
    return tmp_path / "absent.env"


def test_defaults(tmp_path: Path) -> None:
    settings = Settings.from_env({}, no_dotenv(tmp_path))
    assert settings.kafka_url is None
    assert settings.playbooks_dir == Path("playbooks")
    assert settings.data_dir == Path("data")
    assert settings.topic_prefix == "lemongraph."
    assert settings.partitions == 4
    assert settings.tick_interval == 1.0
    assert settings.api_port == 3002
    assert settings.ui_port == 3000
    assert settings.api_token_secret == ""
    assert settings.gateway_host == "127.0.0.1"
    assert settings.rate_limit == 20.0
    assert settings.rate_burst == 40
    assert settings.max_body == 65536


def test_every_variable_is_read(tmp_path: Path) -> None:
    env = {
        "LEMONGRAPH_KAFKA_URL": "kafka://h1:9092;h2:9093",
        "LEMONGRAPH_PLAYBOOKS_DIR": "/srv/playbooks",
        "LEMONGRAPH_DATA_DIR": "/var/lib/lemongraph",
        "LEMONGRAPH_TOPIC_PREFIX": "acme.",
        "LEMONGRAPH_PARTITIONS": "12",
        "LEMONGRAPH_TICK_INTERVAL": "0.25",
        "LEMONGRAPH_API_PORT": "8080",
        "LEMONGRAPH_UI_PORT": "8081",
        "API_TOKEN_SECRET": "s3cret-0123456789-0123456789-0123",
        "LEMONGRAPH_GATEWAY_HOST": "0.0.0.0",
        "LEMONGRAPH_RATE_LIMIT": "2.5",
        "LEMONGRAPH_RATE_BURST": "5",
        "LEMONGRAPH_API_MAX_BODY": "1024",
        "LEMONGRAPH_KAFKA_COMPRESSION": "lz4",
    }
    settings = Settings.from_env(env, no_dotenv(tmp_path))
    assert settings == Settings(
        kafka_url="kafka://h1:9092;h2:9093",
        playbooks_dir=Path("/srv/playbooks"),
        data_dir=Path("/var/lib/lemongraph"),
        topic_prefix="acme.",
        partitions=12,
        tick_interval=0.25,
        api_port=8080,
        ui_port=8081,
        api_token_secret="s3cret-0123456789-0123456789-0123",
        gateway_host="0.0.0.0",
        rate_limit=2.5,
        rate_burst=5,
        max_body=1024,
        kafka_compression="lz4",
    )


def test_aiokafka_urls_and_blank_values(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {
            "LEMONGRAPH_KAFKA_URL": "  aiokafka://k:9092 ",
            "LEMONGRAPH_PARTITIONS": " ",
            "LEMONGRAPH_DATA_DIR": "",
        },
        no_dotenv(tmp_path),
    )
    assert settings.kafka_url == "aiokafka://k:9092"
    assert settings.partitions == 4
    assert settings.data_dir == Path("data")
    assert Settings.from_env({"LEMONGRAPH_KAFKA_URL": "  "}, no_dotenv(tmp_path)).kafka_url is None


def test_a_dotenv_file_fills_in_but_never_overrides_the_environment(tmp_path: Path) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text(
        "# local settings\n"
        "\n"
        "export LEMONGRAPH_PARTITIONS=8\n"
        'LEMONGRAPH_API_PORT="9000"\n'
        "LEMONGRAPH_UI_PORT='9001'\n"
        "API_TOKEN_SECRET = from-file-0123456789-0123456789-01\n",
        encoding="utf-8",
    )
    settings = Settings.from_env({"LEMONGRAPH_PARTITIONS": "2"}, dotenv)
    assert settings.partitions == 2  # the real environment wins
    assert settings.api_port == 9000
    assert settings.ui_port == 9001
    assert settings.api_token_secret == "from-file-0123456789-0123456789-01"


def test_the_process_environment_and_dot_env_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ALL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text(
        "LEMONGRAPH_TOPIC_PREFIX=from-file.\nLEMONGRAPH_UI_PORT=7000\n", encoding="utf-8"
    )
    monkeypatch.setenv("LEMONGRAPH_TOPIC_PREFIX", "from-env.")
    settings = Settings.from_env()
    assert settings.topic_prefix == "from-env."
    assert settings.ui_port == 7000


def test_read_dotenv_refuses_a_line_without_equals(tmp_path: Path) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text("GOOD=1\nthis line is wrong\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r":2: expected KEY=VALUE"):
        read_dotenv(dotenv)
    assert read_dotenv(tmp_path / "missing") == {}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LEMONGRAPH_KAFKA_URL", "localhost:9092"),
        ("LEMONGRAPH_KAFKA_URL", "http://k:9092"),
        ("LEMONGRAPH_PARTITIONS", "four"),
        ("LEMONGRAPH_PARTITIONS", "0"),
        ("LEMONGRAPH_PARTITIONS", "-3"),
        ("LEMONGRAPH_PARTITIONS", "2.5"),
        ("LEMONGRAPH_TICK_INTERVAL", "soon"),
        ("LEMONGRAPH_TICK_INTERVAL", "0"),
        ("LEMONGRAPH_TICK_INTERVAL", "-1"),
        ("LEMONGRAPH_TICK_INTERVAL", "nan"),
        ("LEMONGRAPH_API_PORT", "http"),
        ("LEMONGRAPH_API_PORT", "0"),
        ("LEMONGRAPH_UI_PORT", "x"),
        ("LEMONGRAPH_UI_PORT", "-80"),
        ("LEMONGRAPH_RATE_LIMIT", "fast"),
        ("LEMONGRAPH_RATE_LIMIT", "0"),
        ("LEMONGRAPH_RATE_BURST", "0"),
        ("LEMONGRAPH_API_MAX_BODY", "1k"),
        ("LEMONGRAPH_KAFKA_COMPRESSION", "zip"),
    ],
)
def test_a_bad_value_names_the_variable(tmp_path: Path, name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        Settings.from_env({name: value}, no_dotenv(tmp_path))


def test_a_bad_value_in_the_dotenv_file_names_the_variable(tmp_path: Path) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text("LEMONGRAPH_PARTITIONS=many\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="LEMONGRAPH_PARTITIONS"):
        Settings.from_env({}, dotenv)


@pytest.mark.parametrize("name", ["LEMONGRAPH_API_PORT", "LEMONGRAPH_UI_PORT"])
def test_a_port_above_65535_names_the_variable(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        Settings.from_env({name: "70000"}, no_dotenv(tmp_path))


# -- bootstrap_of -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "bootstrap"),
    [
        ("kafka://localhost:9092", "localhost:9092"),
        ("kafka://h1:9092;h2:9093", "h1:9092,h2:9093"),
        ("aiokafka://h1:9092,h2:9093", "h1:9092,h2:9093"),
        ("kafka://h1:9092; h2:9093;", "h1:9092,h2:9093"),
        ("h1:9092", "h1:9092"),
    ],
)
def test_bootstrap_of(url: str, bootstrap: str) -> None:
    assert bootstrap_of(url) == bootstrap
