"""wire-daemon run / status / decisions / check-config on the emulated site."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wire_daemon.cli.main import main
from wire_daemon.core.errors import ConfigError
from wire_daemon.runtime.settings import load_settings
from wire_daemon.service.daemon import Daemon

from .emulated_config import emulated_config as _config

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "config.example.yaml"


def test_the_annotated_example_is_valid():
    settings = load_settings(EXAMPLE)
    assert settings.steering.interval_s == 180 and settings.safety.dry_run is False


@pytest.mark.parametrize(
    "body, message",
    [
        ("steering: {slots_per_instance: 0}", "slots_per_instance"),
        ("steering: {slot_count: 4}", "unknown key steering.slot_count"),
        ("safety: {dry_run: 'yes'}", "safety.dry_run must be true or false"),
        ("site: {kind: cloudy}", "site.kind must be one of"),
        ("steering: [1, 2]", "steering must be a mapping"),
        ("steering: {interval_s: 180\n", "not valid YAML"),
        ("policy: greedy", "policy must be one of wire, full-site"),
        ("policy: oracle\nsite: {kind: condor, submit_root: /x}\ncloud: {kind: ec2}", "only the emulated site"),
        ("safety: {charging_unit_s: 60}", "use steering.charging_unit_s"),
        ("steering: {max_instances: 5.5}", "steering.max_instances must be a whole number"),
    ],
)
def test_bad_config_names_file_and_key(tmp_path, body, message):
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert "bad.yaml" in str(info.value) and message in str(info.value)


def test_one_slot_count_for_every_cloud(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(
        "site: {kind: condor, submit_root: /x}\n"
        "cloud: {kind: ec2, ec2: {region: r, image_id: i, instance_type: t, slots_per_instance: 8}}\n"
    )
    assert main(["check-config", str(path)]) != 0
    assert "cloud.ec2.slots_per_instance cannot be set here: the slot count is steering.slots_per_instance" in (
        capsys.readouterr().err
    )


def test_run_takes_its_policy_from_the_config(tmp_path):
    config = _config(tmp_path)
    config.write_text(config.read_text() + "policy: pfa\n")
    daemon = Daemon(load_settings(config), str(config))
    assert daemon.loop.policy.name == "pfa"
    daemon.store.close()


def test_check_config_cli(tmp_path, capsys):
    assert main(["check-config", str(_config(tmp_path))]) == 0
    assert ": OK" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("steering: {max_instances: -1}")
    assert main(["check-config", str(bad)]) == 2
    assert "steering.max_instances" in capsys.readouterr().err


def test_run_to_completion_logs_every_decision_and_leaves_status(tmp_path, capsys):
    config = _config(tmp_path)
    daemon = Daemon(load_settings(config), str(config))
    assert daemon.run() == 0
    lines = (tmp_path / "decisions.jsonl").read_text().splitlines()
    assert len(lines) == daemon.iterations + 2 > 5  # the run's header first, and its last line: why it stopped
    assert json.loads(lines[0])["event"] == "run" and json.loads(lines[-1])["event"] == "shutdown"
    first = json.loads(lines[1])
    assert {"time", "target", "pool", "rule", "cost_units", "launched", "released"} <= set(first)

    assert main(["status", "--config", str(config), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["daemon"] == "down" and status["workflow_finished"] is True
    assert sum(s["tasks"] for s in status["stages"]) == 103
    assert status["cost_units"] >= 1
    # Final figures: every task done, so no stage is left to predict (the last plan's are not shown as current).
    assert all(s["done"] == s["tasks"] and s["prediction_policy"] is None for s in status["stages"])

    assert main(["decisions", "--config", str(config), "--since", "360"]) == 0  # seconds on the loop's clock
    rendered = capsys.readouterr().out.splitlines()
    assert rendered[0].startswith("+0:06:00 (virtual)  pool ")  # virtual times: offsets
    assert len(rendered) == sum(json.loads(line)["time"] >= 360 for line in lines)


def test_status_before_any_run(tmp_path, capsys):
    assert main(["status", "--config", str(_config(tmp_path))]) == 0
    assert "never ran" in capsys.readouterr().out


@pytest.mark.slow
def test_sigterm_finishes_the_iteration_and_exits(tmp_path):
    config = _config(tmp_path, speedup=90.0)  # 2 s of wall time per 180 s interval
    proc = subprocess.Popen(
        [sys.executable, "-m", "wire_daemon.cli.main", "run", "--config", str(config)],
        stderr=subprocess.PIPE,
        text=True,
    )
    log = tmp_path / "decisions.jsonl"
    deadline = time.monotonic() + 60
    while (not log.exists() or not log.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    status = subprocess.run(
        [sys.executable, "-m", "wire_daemon.cli.main", "status", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
    )
    assert json.loads(status.stdout)["daemon"] == "running"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert records  # every finished iteration was persisted
    status = subprocess.run(
        [sys.executable, "-m", "wire_daemon.cli.main", "status", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
    )
    report = json.loads(status.stdout)
    assert report["daemon"] == "down" and report["workflow_finished"] is False


def test_sighup_with_a_broken_file_keeps_the_old_settings(tmp_path, caplog):
    config = _config(tmp_path)
    daemon = Daemon(load_settings(config), str(config))
    config.write_text("steering: {interval_s: -5}")
    daemon.reload()
    assert "reload refused" in caplog.text
    assert daemon.settings.steering.interval_s == 180
    daemon.run(max_iterations=1)


def test_the_submit_host_example_checks_out_cloud_sections_included(tmp_path, capsys):
    example = EXAMPLE.with_name("submit-host.example.yaml")
    here = tmp_path / "config.yaml"  # the submit root must exist: this host's stands in for /home/pegasus/submit
    text = example.read_text().replace("/home/pegasus/submit", str(tmp_path))
    here.write_text(text.replace("/var/lib/wire-daemon", str(tmp_path)).replace("/var/log/wire-daemon", str(tmp_path)))
    assert main(["check-config", str(here)]) == 0
    settings = load_settings(example)
    assert settings.site.kind == "condor" and settings.cloud.kind == "ec2" and settings.safety.dry_run


def test_check_config_names_a_bad_cloud_key(tmp_path, capsys):
    example = EXAMPLE.with_name("submit-host.example.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(example.replace("instance_type: c5.xlarge", "instance_typ: c5.xlarge"))
    assert main(["check-config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml" in err and "cloud.ec2.instance_typ" in err


@pytest.mark.slow
def test_run_serves_metrics_when_enabled(tmp_path):
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = _config(tmp_path, extra=f"metrics: {{enabled: true, port: {port}}}")
    daemon = Daemon(load_settings(config), str(config))
    daemon._iterate(daemon.runtime.now())  # one iteration, then read the page before shutting down
    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert "wire_decisions_total 1.0" in page and "wire_pool_instances" in page
    daemon._shutdown()
