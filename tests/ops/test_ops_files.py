"""ops/ validates with the real tools, and only names metrics the service exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import yaml

from decide.metrics import EXPORTED

OPS = Path(__file__).resolve().parents[2] / "ops"
ROOT = OPS.parent
HISTOGRAMS = ("decide_http_request_duration_seconds", "decide_job_queue_wait_seconds",
              "decide_job_decode_seconds")


def exported_series() -> set[str]:
    names = set(EXPORTED)
    for histogram in HISTOGRAMS:
        names |= {f"{histogram}_{suffix}" for suffix in ("bucket", "sum", "count")}
    return names


def metric_names(expression: str) -> set[str]:
    return set(re.findall(r"\bdecide_[a-z_]+\b", expression))


def run(*command: str) -> subprocess.CompletedProcess:
    assert shutil.which(command[0]), f"{command[0]} is not installed (.ci/run installs it)"
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_promtool_checks_the_rules_and_the_config():
    rules = run("promtool", "check", "rules", str(OPS / "alerts.yml"))
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert "SUCCESS: 9 rules found" in rules.stdout
    config = run("promtool", "check", "config", str(OPS / "prometheus.yml"))
    assert config.returncode == 0, config.stdout + config.stderr


def test_the_dashboard_charts_only_exported_metrics():
    dashboard = json.loads((OPS / "grafana" / "dashboards" / "decide.json").read_text())
    expressions = [target["expr"] for panel in dashboard["panels"]
                   for target in panel["targets"]]
    used = set().union(*(metric_names(expression) for expression in expressions))
    assert used <= exported_series(), used - exported_series()
    titles = " ".join(panel["title"] for panel in dashboard["panels"]).lower()
    for subject in ("throughput", "queue wait", "queue depth", "tokens", "error ratio"):
        assert subject in titles


def test_the_alerts_use_only_exported_metrics():
    rules = yaml.safe_load((OPS / "alerts.yml").read_text())["groups"][0]["rules"]
    used = set().union(*(metric_names(rule["expr"]) for rule in rules))
    assert used <= exported_series(), used - exported_series()


def test_the_compose_file_validates():
    result = run("docker-compose", "-f", str(ROOT / "docker-compose.yml"), "config", "-q")
    assert result.returncode == 0, result.stdout + result.stderr
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert {"postgres", "redis", "migrate", "api", "worker", "prometheus",
            "grafana"} <= set(services)
    assert "healthcheck" in services["postgres"] and "healthcheck" in services["redis"]


def test_the_compose_stack_starts_with_keys_on_and_opens_only_loopback():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert services["keys"]["command"] == ["decide", "keys", "ensure", "/keys/api_keys"]
    assert services["api"]["depends_on"]["keys"] == {
        "condition": "service_completed_successfully"}
    assert services["api"]["environment"]["DECIDE_API_KEYS_FILE"] == "/keys/api_keys"
    assert "api-keys:/keys:ro" in services["api"]["volumes"]
    published = [port for service in services.values() for port in service.get("ports", [])]
    assert published and all(port.startswith("127.0.0.1:") for port in published), published


def test_the_api_container_is_given_its_shutdown_grace():
    """Docker stops a container with SIGKILL after its stop grace: the API's must outlast
    ``decide serve``'s own (requests in flight, then its shutdown)."""
    from decide.cli.service import shutdown_grace
    from decide.config.settings import Settings

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    grace = compose["services"]["api"]["stop_grace_period"]
    assert grace.endswith("s") and float(grace[:-1]) > shutdown_grace(Settings())


LANE_STALLED_TEST = """
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'decide_queue_depth{{model="m", priority="background"}}'
        values: '5x40'
      - series: 'decide_jobs_finished_total{{model="m", priority="background", status="cancelled"}}'
        values: '0+1x40'
      - series: 'decide_jobs_finished_total{{model="m", priority="background", status="succeeded"}}'
        values: '0x40'
    alert_rule_test:
      - eval_time: 30m
        alertname: DecideLaneStalled
        exp_alerts:
          - exp_labels: {{model: m, priority: background, severity: page}}
            exp_annotations:
              summary: "m background lane has a backlog and no completions"
              description: "Jobs are queued for m but no job of that model was decoded
                to its end in 10 minutes (cancels do not count)."
"""


def test_a_stalled_lane_pages_though_cancels_keep_finishing_jobs(tmp_path):
    """Queued work, nothing decoded, a cancel a minute through the API: the lane is stalled
    (a cancel counted as a finish hid it)."""
    cases = tmp_path / "lane_stalled_test.yml"
    cases.write_text(LANE_STALLED_TEST.format(rules=json.dumps(str(OPS / "alerts.yml"))))
    result = run("promtool", "test", "rules", str(cases))
    assert result.returncode == 0, result.stdout + result.stderr
