"""compose.yaml, checked without a Docker daemon: PostgreSQL, two relay nodes on one queue
and two bot replicas behind a TCP load balancer, published on loopback only, with every
secret read from a file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

ROOT = Path(__file__).resolve().parent.parent
RELAYS = ("relay-1", "relay-2")
BOTS = ("bot-1", "bot-2")


def compose() -> dict[str, Any]:
    loaded = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def store_url(service: dict[str, Any]) -> str:
    command = service["command"]
    return str(command[command.index("--store") + 1])


def test_the_services_and_what_each_waits_for() -> None:
    services = compose()["services"]
    assert set(services) == {"postgres", *RELAYS, *BOTS, "balancer"}
    healthy = {"postgres": {"condition": "service_healthy"}}
    for name in (*RELAYS, *BOTS):
        assert services[name]["depends_on"]["postgres"] == healthy["postgres"], name
    assert set(services["balancer"]["depends_on"]) == set(RELAYS)
    assert "healthcheck" in services["postgres"]


def test_the_relay_nodes_share_one_database_and_the_bots_use_it_too() -> None:
    services = compose()["services"]
    urls = {store_url(services[name]) for name in RELAYS}
    urls |= {services[name]["environment"]["SKALD_TELEGRAM_DATABASE_URL"] for name in BOTS}
    assert len(urls) == 1
    url = urlsplit(urls.pop())
    assert url.scheme == "postgresql" and url.hostname == "postgres"
    # Each node keeps a data folder of its own.
    volumes = [tuple(services[name]["volumes"]) for name in (*RELAYS, *BOTS)]
    assert len(set(volumes)) == len(volumes)


def test_no_secret_is_written_in_the_file() -> None:
    document = compose()
    for name, service in document["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if re.search(r"PASSWORD|TOKEN|SECRET|PASS$", key):
                assert key.endswith(("_FILE", "PASSFILE")), (name, key)
                assert str(value).startswith("/run/secrets/"), (name, key)
            if str(value).startswith("postgres"):
                assert urlsplit(str(value)).password is None, (name, key)
        for word in service.get("command") or []:
            assert not str(word).startswith("postgres") or urlsplit(str(word)).password is None
        for secret in service.get("secrets") or []:
            assert document["secrets"][secret]["file"].startswith("./secrets/"), secret


def test_only_the_balancer_publishes_ports_and_only_on_loopback() -> None:
    services = compose()["services"]
    published = {name: service["ports"] for name, service in services.items() if "ports" in service}
    assert list(published) == ["balancer"]
    assert all(port.startswith("127.0.0.1:") for port in published["balancer"])
    assert "127.0.0.1:8765:8765" in published["balancer"]


def test_the_balancer_spreads_websockets_over_both_relay_nodes_as_tcp() -> None:
    config = compose()["configs"]["haproxy"]["content"]
    sections = {
        block.splitlines()[0].strip(): block
        for block in re.split(r"^(?=\S)", config, flags=re.M) if block.strip()
    }
    assert "mode tcp" in sections["defaults"]
    assert "bind :8765" in sections["frontend relay"]
    backend = sections["backend relay_nodes"]
    assert re.findall(r"server (relay-\d) \1:8765 check", backend) == list(RELAYS)
    assert "option httpchk GET /health" in backend
    # The nodes see only the balancer's address: it limits connections per client instead.
    assert "tcp-request connection track-sc0 src" in sections["frontend relay"]
    for name in RELAYS:
        command = compose()["services"][name]["command"]
        assert command[command.index("--max-authenticated-per-address") + 1] == "4096"
    bots = sections["backend bot_replicas"]
    assert re.findall(r"server (bot-\d) \1:8443 check", bots) == list(BOTS)
