"""check-config --probe without credentials: one line that says so, the SDK's words intact."""

from __future__ import annotations

import pytest

from wire_daemon.cli.main import main
from wire_daemon.core.secrets import scrub

CONFIG = """
site: {{kind: condor, submit_root: {root}}}
cloud:
  kind: ec2
  ec2: {{region: us-east-1, image_id: ami-1, instance_type: c5.large, endpoint_url: "http://127.0.0.1:9"}}
  worker: {{condor_host: cm.example.org, token_delivery: ssm, token_source: /wire/pool/token}}
condor: {{control: "off"}}
state_path: {root}/state.sqlite
log: {{decisions_path: {root}/d.jsonl}}
"""


def test_an_exception_s_name_is_not_taken_for_a_secret_s_key():
    assert scrub("NoCredentialsError: Unable to locate credentials") == (
        "NoCredentialsError: Unable to locate credentials"
    )
    assert scrub("aws_secret_access_key: abc123") == "aws_secret_access_key: <redacted>"  # a key still is


def test_probe_without_credentials_says_so_once(tmp_path, monkeypatch, capsys):
    pytest.importorskip("boto3")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(root=tmp_path))
    assert main(["check-config", "--probe", str(config)]) == 1
    out = capsys.readouterr().out
    probe = out[out.index("\nprobe: ") + 1 :].splitlines()
    assert len(probe) == 2, probe  # what it probes, and why no call works
    assert probe[1].startswith("probe: no credentials: ") and "Unable to locate credentials" in probe[1]
    assert "denied" not in out and "<redacted>" not in out
