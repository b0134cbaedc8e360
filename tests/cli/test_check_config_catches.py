"""check-config catches what run would fail on: a missing extra, a state or log place that cannot be written,
a YAML boolean where a string belongs, limits that disagree; a schedd it cannot reach is a warning."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from wire_daemon.cli.main import main
from wire_daemon.runtime.settings import Settings

SUBMIT_HOST = """
site: {{kind: condor, submit_root: {root}}}
cloud: {{kind: ec2, ec2: {{region: us-east-1, image_id: ami-1, instance_type: c5.large}}}}
condor: {{control: {control}}}
state_path: {state}
log: {{decisions_path: {log}}}
"""


def _config(tmp_path: Path, control: str = '"off"', state: Path | None = None, log: Path | None = None) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        SUBMIT_HOST.format(
            root=tmp_path,
            control=control,
            state=state or tmp_path / "state.sqlite",
            log=log or tmp_path / "logs" / "decisions.jsonl",
        )
    )
    return path


def test_a_good_config_checks_out(tmp_path, capsys):
    assert main(["check-config", str(_config(tmp_path))]) == 0
    assert capsys.readouterr().out.startswith(f"{tmp_path / 'config.yaml'}: OK")


def test_the_cloud_s_missing_extra_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "boto3", None)  # as where the ec2 extra is not installed
    assert main(["check-config", str(_config(tmp_path))]) == 2
    assert "cloud.kind ec2 needs boto3: pip install 'wire-daemon[ec2]'" in capsys.readouterr().err


def test_a_missing_state_directory_is_an_error(tmp_path, capsys):
    config = _config(tmp_path, state=tmp_path / "absent" / "state.sqlite")
    assert main(["check-config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "state_path" in err and f"its directory {tmp_path / 'absent'} does not exist" in err


def test_a_log_place_that_cannot_be_made_is_an_error(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    config = _config(tmp_path, log=blocker / "logs" / "decisions.jsonl")
    assert main(["check-config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "log.decisions_path" in err and "is not a directory writable by this user" in err


def test_an_unquoted_off_says_yaml_read_it_as_false(tmp_path, capsys):
    assert main(["check-config", str(_config(tmp_path, control="off"))]) == 2
    err = capsys.readouterr().err
    assert "condor.control must be a string" in err and "YAML read an unquoted off" in err and "quote it" in err


def test_a_steering_limit_above_the_guard_says_to_raise_the_guard_too(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text(f"steering: {{max_instances: 20}}\nstate_path: {tmp_path / 's.sqlite'}\n")
    assert main(["check-config", str(config)]) == 2
    assert "raise safety.max_instances to 20 or more too" in capsys.readouterr().err


@pytest.mark.slow  # imports the HTCondor bindings and asks for the local schedd
def test_a_schedd_that_cannot_be_reached_is_a_warning_not_an_error(tmp_path, monkeypatch, capsys):
    pytest.importorskip("htcondor2")
    monkeypatch.setenv("CONDOR_CONFIG", str(tmp_path / "no-condor-here"))
    assert main(["check-config", str(_config(tmp_path, control="htcondor"))]) == 0
    captured = capsys.readouterr()
    assert ": OK" in captured.out and "WARNING: condor: the schedd cannot be reached now" in captured.err


def test_the_defaults_are_the_documented_places():
    example = (Path(__file__).resolve().parents[2] / "docs" / "config.example.yaml").read_text()
    defaults = Settings()
    assert f"state_path: {defaults.state_path}\n" in example
    assert f"decisions_path: {defaults.log.decisions_path}\n" in example


WORKERS = """
site: {{kind: condor, submit_root: {root}}}
cloud:
  kind: ec2
  ec2: {{region: us-east-1, image_id: ami-1, instance_type: c5.large}}
  worker: {{condor_host: cm.example.org, token_source: /wire/pool/condor-token{worker}}}
condor: {{control: "off"}}
steering: {{billing_model: {billing}}}
state_path: {root}/state.sqlite
log: {{decisions_path: {root}/decisions.jsonl}}
"""


def test_a_worker_that_would_leave_before_its_paid_unit_ends_is_a_warning(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text(WORKERS.format(root=tmp_path, worker=", idle_shutdown_s: 1800", billing="unit"))
    assert main(["check-config", str(config)]) == 0
    err = capsys.readouterr().err
    assert "cloud.worker.idle_shutdown_s 1800 s is shorter than the 3600 s unit the pool pays" in err
    assert "set it to 3780 or more, or leave it out" in err
    config.write_text(WORKERS.format(root=tmp_path, worker=", idle_shutdown_s: 1800", billing="second"))
    assert main(["check-config", str(config)]) == 0
    assert "idle_shutdown_s" not in capsys.readouterr().err  # per second the unit is the 60 s minimum


def test_left_out_the_idle_shutdown_outlasts_the_unit_the_daemon_keeps_a_worker_for(tmp_path):
    from wire_daemon.runtime.builders import user_data
    from wire_daemon.runtime.settings import load_settings

    def knob(billing: str, worker: str = "") -> str:
        config = tmp_path / "config.yaml"
        config.write_text(WORKERS.format(root=tmp_path, worker=worker, billing=billing))
        rendered = user_data(load_settings(config))
        return rendered.split("STARTD_NOCLAIM_SHUTDOWN = ")[1].split()[0]

    assert knob("unit") == "3780"  # the hour paid, and the interval the release is decided ahead
    assert knob("second") == "1800"  # never below the dead-man switch's half hour
    assert knob("unit", ", idle_shutdown_s: 7200") == "7200"  # the operator's value stands


EMULATED = """
site: {{kind: emulated}}
steering: {{market: {market}}}
emulation: {{spot_interruptions_per_hour: 0.5}}
state_path: {root}/state.sqlite
log: {{decisions_path: {root}/decisions.jsonl}}
"""


def test_reclaims_on_an_emulated_site_that_buys_no_spot_are_a_warning(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text(EMULATED.format(root=tmp_path, market="on-demand"))
    assert main(["check-config", str(config)]) == 0
    err = capsys.readouterr().err
    assert "steering.market on-demand buys none: nothing will be reclaimed" in err
    config.write_text(EMULATED.format(root=tmp_path, market="auto"))
    assert main(["check-config", str(config)]) == 0
    assert "reclaimed" not in capsys.readouterr().err


def test_a_deadline_already_past_is_a_warning(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    text = WORKERS.format(root=tmp_path, worker="", billing="unit")
    config.write_text(text.replace("billing_model: unit}", 'billing_model: unit, deadline: "2020-01-01T00:00:00Z"}'))
    assert main(["check-config", str(config)]) == 0
    assert "steering.deadline 2020-01-01T00:00:00Z has already passed" in capsys.readouterr().err
    config.write_text(text.replace("billing_model: unit}", "billing_model: unit, deadline: 8h}"))
    assert main(["check-config", str(config)]) == 0
    assert "has already passed" not in capsys.readouterr().err


def test_per_second_a_price_per_unit_is_a_warning_an_hourly_price_is_not(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    text = WORKERS.format(root=tmp_path, worker="", billing="second")
    listed = "billing_model: second, instance_types: [{{name: c5.xlarge, cores: 4, {price}}}]}}"
    config.write_text(text.replace("billing_model: second}", listed.format(price="price: 0.17")))
    assert main(["check-config", str(config)]) == 0
    err = capsys.readouterr().err
    assert "c5.xlarge: price 0.17 is per charging unit, here a second: 612 on-demand hours an hour" in err
    assert "give an hourly price as price_per_hour" in err
    config.write_text(text.replace("billing_model: second}", listed.format(price="price_per_hour: 0.17")))
    assert main(["check-config", str(config)]) == 0
    assert "per charging unit" not in capsys.readouterr().err
