"""A core install has no cloud SDK and no matplotlib: what needs one says which extra, in one line.

The modules are hidden by mapping them to None in sys.modules, which makes
their import fail as it does where they are not installed. `.ci/core-install`
checks the same on a real install without extras.
"""

from __future__ import annotations

import sys

import pytest

from wire_daemon.cli.main import main

EC2_CONFIG = """
site: {{kind: condor, submit_root: {root}}}
cloud: {{kind: ec2, ec2: {{region: us-east-1, image_id: ami-1, instance_type: c5.xlarge}}}}
condor: {{control: "off"}}
safety: {{dry_run: true}}
state_path: {root}/state.sqlite
log: {{decisions_path: {root}/decisions.jsonl}}
"""


@pytest.mark.parametrize("hidden", ["boto3"])
def test_run_without_the_ec2_extra_names_it(tmp_path, monkeypatch, capsys, hidden):
    monkeypatch.setitem(sys.modules, hidden, None)
    config = tmp_path / "ec2.yaml"
    config.write_text(EC2_CONFIG.format(root=tmp_path))
    assert main(["run", "--config", str(config)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["wire-daemon: error: cloud.kind ec2 needs boto3: pip install 'wire-daemon[ec2]'"]


def test_report_without_the_plots_extra_names_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    log = tmp_path / "decisions.jsonl"
    log.write_text('{"time": 0, "pool": 1, "target": 1, "running": 0, "idle": 1}\n')
    assert main(["report", str(log), "--out", str(tmp_path / "t.png")]) != 0
    assert "pip install 'wire-daemon[plots]'" in capsys.readouterr().err


def test_replay_needs_no_extra(monkeypatch, capsys):
    for module in ("boto3", "openstack", "matplotlib"):
        monkeypatch.setitem(sys.modules, module, None)
    assert main(["replay", "--policy", "wire"]) == 0
    assert "wire" in capsys.readouterr().out
