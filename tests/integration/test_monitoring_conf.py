"""conf/'s Grafana dashboard and Prometheus alert rules use only metrics that exist: every
``spark_mq_*`` name in them is served by a real broker's endpoint or the lag exporter."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry, generate_latest

from spark_mq.client import Admin
from spark_mq.cluster.zookeeper_server import free_loopback_port
from spark_mq.monitoring.lag_exporter import LagExporter

CONF = Path(__file__).resolve().parents[2] / "conf"
NAME = re.compile(r"\bspark_mq_[a-z0-9_]+")
#: Sample names a family of each type serves (a counter's _total, a histogram's series).
SUFFIXES = ("", "_total", "_bucket", "_sum", "_count", "_created")


def families(exposition: str) -> set[str]:
    return {line.split()[2] for line in exposition.splitlines() if line.startswith("# TYPE ")}


def used_in_conf() -> dict[str, set[str]]:
    rules = yaml.safe_load((CONF / "prometheus" / "alerts.yml").read_text())
    dashboard = json.loads((CONF / "grafana" / "spark_mq_dashboard.json").read_text())
    used: dict[str, set[str]] = {}
    for group in rules["groups"]:
        for rule in group["rules"]:
            assert {"alert", "expr", "for", "labels", "annotations"} <= set(rule), rule
            assert rule["labels"]["severity"] in ("warning", "critical")
            assert rule["annotations"]["summary"] and rule["annotations"]["description"]
            used.setdefault(f"alert {rule['alert']}", set()).update(NAME.findall(rule["expr"]))
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            used.setdefault(f"panel {panel['title']}", set()).update(NAME.findall(target["expr"]))
    return used


def test_every_metric_the_dashboard_and_alerts_use_is_served(start_broker: Any) -> None:
    port = free_loopback_port()
    broker = start_broker(overrides={"metrics.port": str(port)})
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        served = families(answer.read().decode())
    with Admin(bootstrap_servers=str(broker.address)) as admin:
        exporter = LagExporter(admin)
        exporter.poll()
        registry = CollectorRegistry()
        registry.register(exporter)
        served |= families(generate_latest(registry).decode())
    used = used_in_conf()
    assert sum(len(names) for names in used.values()) > 20
    missing = {
        where: sorted(
            n
            for n in names
            if not any(n.removesuffix(s) in served for s in SUFFIXES if n.endswith(s))
        )
        for where, names in used.items()
    }
    assert {where: names for where, names in missing.items() if names} == {}
