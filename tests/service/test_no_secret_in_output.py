"""Issue 14, "no secret in any output": the pool token, the admin key and the cloud credentials.

The unit tests below cover each way a secret reached an output: check-config's
print-out, a token pasted where a reference belongs, an error that quoted the
value, an SDK error that echoed a request, a log line. The last two tests run
the daemon for real (a dry run, and a run against moto's EC2 server) with
distinctive fake secrets and grep every output for them:

    pytest tests/service/test_no_secret_in_output.py -k grep
"""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from wire_daemon.cli.main import main
from wire_daemon.core.errors import CloudError, ConfigError
from wire_daemon.core.secrets import ScrubSecrets, looks_like_secret, redact, scrub
from wire_daemon.runtime.settings import load_settings

# Distinctive fakes: a pool token (an IDTOKEN is a JWT), the workers' admin key, an EC2 secret key,
# a Keystone token and an OpenStack application credential secret.
TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJpc3MiOiJ3aXJlLWlzc3VlLTE0In0.ZmFrZS1wb29sLXRva2VuLTE0LWdyZXAtbWU"
ADMIN_KEY = "QWRtaW5LZXlGb3JXaXJlSXNzdWUxNEdyZXBNZTk3MzE="
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzzFAKE14key"
KEYSTONE_TOKEN = "gAAAAABm3xT9k2Qw8ZrLpV7yN0aHc4JtE1sUoBfXiG6dKeM5RqWvYn2PzC8lHjA0bTgS"
APP_SECRET = "Vb3x9KqL2mWz7RtY8uPn4HsJ6dFgC1aE5oIcXvB0"


def _ec2_site(tmp_path: Path, worker: str) -> Path:
    config = tmp_path / "c.yaml"
    config.write_text(
        f"site: {{kind: condor, submit_root: {tmp_path}}}\n"
        "cloud: {kind: ec2, ec2: {region: us-east-1, image_id: ami-0123456789abcdef0, instance_type: c5.large},\n"
        f"        worker: {{condor_host: cm.example.org, {worker}}}}}\n"
        f"state_path: {tmp_path / 's.sqlite'}\n"
        f"log: {{decisions_path: {tmp_path / 'd.jsonl'}}}\n"
    )
    return config


def test_check_config_blanks_the_admin_key_too(tmp_path, capsys):
    config = _ec2_site(tmp_path, f"token_delivery: inline, token: {TOKEN}, admin_key: '{ADMIN_KEY}'")
    assert main(["check-config", str(config)]) == 0
    out = capsys.readouterr().out
    worker = json.loads(out.split("\n", 1)[1])["cloud"]["worker"]
    assert worker["token"] == worker["admin_key"] == "<redacted>"
    assert TOKEN not in out and ADMIN_KEY not in out


@pytest.mark.parametrize("delivery", ["secretsmanager", "ssm", "file"])
@pytest.mark.parametrize("key", ["token_source", "admin_key_source"])
def test_a_token_pasted_where_a_reference_belongs_is_refused_unseen(tmp_path, capsys, delivery, key):
    other = "token_source: /wire/pool/condor-token, " if key == "admin_key_source" else ""
    config = _ec2_site(tmp_path, f"token_delivery: {delivery}, {other}{key}: '{TOKEN}'")
    assert main(["check-config", str(config)]) == 2
    captured = capsys.readouterr()
    assert f"worker.{key} looks like a secret itself" in captured.err
    assert TOKEN not in captured.err + captured.out


def test_a_reference_with_a_typo_is_still_quoted(tmp_path, capsys):
    config = _ec2_site(tmp_path, "token_delivery: file, token_source: 'relative/token'")
    assert main(["check-config", str(config)]) == 2
    assert "not a valid file reference (got 'relative/token')" in capsys.readouterr().err


@pytest.mark.parametrize(
    "body",
    [
        f"safety: {{max_instances: '{TOKEN}'}}",  # a secret pasted into the wrong key
        f"steering: {{boost_priority: ['{ADMIN_KEY}']}}",
        f"site: {{kind: ['{AWS_SECRET}']}}",
    ],
)
def test_a_config_error_never_quotes_a_secret(tmp_path, body):
    config = tmp_path / "c.yaml"
    config.write_text(body + "\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    message = str(caught.value)
    assert TOKEN not in message and ADMIN_KEY not in message and AWS_SECRET not in message
    assert "\n" not in message


def test_an_endpoint_with_credentials_in_it_is_refused_unseen(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(
        f"site: {{kind: condor, submit_root: {tmp_path}}}\n"
        "cloud: {kind: ec2, ec2: {region: us-east-1, image_id: ami-0123456789abcdef0, instance_type: c5.large,\n"
        f"        endpoint_url: 'https://AKIAIOSFODNN7EXAMPLE:{APP_SECRET}@ec2.internal'}}}}\n"
    )
    assert main(["check-config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "cloud.ec2.endpoint_url must not hold credentials" in err and APP_SECRET not in err


def test_an_application_credential_pasted_as_the_cloud_entry_is_refused_unseen(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(
        f"site: {{kind: condor, submit_root: {tmp_path}}}\n"
        "cloud: {kind: openstack, openstack: {flavor: m1.large, image_id: 5c4f1d2e-0000-4000-8000-0000000000a1,\n"
        f"        network_id: a7e1b0c2-0000-4000-8000-0000000000b2, cloud: '{APP_SECRET}'}}}}\n"
    )
    assert main(["check-config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "cloud.openstack.cloud looks like a secret itself" in err and APP_SECRET not in err


@pytest.mark.parametrize(
    "echo",
    [
        f"InvalidParameter: aws_secret_access_key={AWS_SECRET} is not valid",
        f'body {{"auth": {{"identity": {{"application_credential": {{"id": "x", "secret": "{APP_SECRET}"}}}}}}}}',
        f'{{"application_credential_secret": "{APP_SECRET}"}}',
        f"REQ: curl -g -i -X GET https://compute.example.test -H 'X-Auth-Token: {KEYSTONE_TOKEN}'",
        f"the token {KEYSTONE_TOKEN} has expired",
        f"user-data holds {TOKEN}",
        f"unexpected blob {APP_SECRET} in the reply",
    ],
)
def test_a_cloud_error_that_echoes_a_request_is_scrubbed(echo):
    error = CloudError("openstack", "launch", echo)
    for secret in (AWS_SECRET, APP_SECRET, KEYSTONE_TOKEN, TOKEN):
        assert secret not in str(error)


def test_references_and_ids_do_not_look_like_secrets():
    for value in (
        "/wire/wire-pool/condor-token",
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:wire/pool-token-AbCdEf",
        "https://key-manager.example.org:9311/v1/secrets/6a3b0c1d-0000-4000-8000-0000000000c3",
        "prod/WirePool/CondorToken2024",
        "i-0123456789abcdef0",
        "5c4f1d2e-0000-4000-8000-0000000000a1",
        "wire-daemon",
    ):
        assert not looks_like_secret(value), value
        assert scrub(f"cloud error about {value}") == f"cloud error about {value}"
    for value in (TOKEN, ADMIN_KEY, AWS_SECRET, KEYSTONE_TOKEN, APP_SECRET, "AKIAIOSFODNN7EXAMPLE"):
        assert looks_like_secret(value), value


def test_redact_blanks_secret_keys_and_secret_shaped_values_at_any_depth():
    data = {"cloud": {"ec2": {"password": "p", "tags": [APP_SECRET]}, "worker": {"token": "", "token_source": "/x"}}}
    assert redact(data) == {
        "cloud": {
            "ec2": {"password": "<redacted>", "tags": ["<redacted>"]},
            "worker": {"token": "", "token_source": "/x"},
        }
    }


def test_the_log_scrubs_what_an_sdk_writes(caplog):
    logger = logging.getLogger("keystoneauth.session")
    logger.addFilter(ScrubSecrets())
    try:
        with caplog.at_level(logging.DEBUG, logger="keystoneauth.session"):
            logger.debug("REQ: curl -H 'X-Auth-Token: %s'", KEYSTONE_TOKEN)
            try:
                raise ValueError(f"body was {TOKEN}")
            except ValueError:
                logger.exception("failed")
    finally:
        logger.filters.clear()
    text = caplog.text + "".join(r.exc_text or "" for r in caplog.records)
    assert KEYSTONE_TOKEN not in text and TOKEN not in text and "X-Auth-Token: <redacted>" in text


def test_the_daemon_log_has_the_scrubbing_filter():
    from wire_daemon.service.daemon import configure_logging

    root = logging.getLogger()
    saved = list(root.handlers), root.level
    try:
        configure_logging("INFO")
        assert any(isinstance(f, ScrubSecrets) for h in root.handlers for f in h.filters)
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])


# -- grep every output of a full run for the secrets ---------------------------------------------------

SECRETS = (TOKEN, ADMIN_KEY, AWS_SECRET)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return env | {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": AWS_SECRET,  # moto takes any key: this one must never show
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }


def _cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "wire_daemon.cli.main", *args], capture_output=True, text=True, env=_env(), timeout=300
    )
    return done.stdout + done.stderr


def _secret_config(tmp_path: Path, endpoint: str, network, pool: str, dry_run: bool) -> Path:
    from tests.service.test_submit_host_e2e import write_config

    config = write_config(tmp_path, endpoint, network, pool, dry_run=dry_run)
    config.write_text(
        config.read_text().replace(
            f"  pool: {pool}\n",
            f"  pool: {pool}\n  worker: {{condor_host: cm.example.org, token_delivery: inline, token: {TOKEN},\n"
            f"           admin_key: '{ADMIN_KEY}'}}\n",
        )
        + "metrics: {enabled: true, port: 0}\n"
    )
    assert TOKEN in config.read_text()
    return config


def _run_and_collect(tmp_path: Path, config: Path, world_until) -> dict[str, str]:
    """Run the daemon (its log at DEBUG, the SDKs' included) until ``world_until()``; every output it left."""
    from tests.service.test_submit_host_e2e import wait_for

    outputs = {"check-config": _cli("check-config", str(config))}
    log_path = tmp_path / "daemon.log"  # stdout and stderr: a pipe left unread would stall the daemon
    with log_path.open("w") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "wire_daemon.cli.main", "run", "--config", str(config), "--log-level", "DEBUG"],
            env=_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            wait_for(lambda: "metrics at http://" in log_path.read_text(), 120, "the metrics endpoint")
            port = int(log_path.read_text().split("metrics at http://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
            wait_for(world_until, 300, "the run to get going")
            outputs["metrics"] = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            outputs["status --json"] = _cli("status", "--config", str(config), "--json")
            outputs["status"] = _cli("status", "--config", str(config))
            outputs["decisions"] = _cli("decisions", "--config", str(config))
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=60)
    assert daemon.returncode == 0, log_path.read_text()[-2000:]
    outputs["check-config --probe"] = _cli("check-config", "--probe", str(config))
    outputs["run output"] = log_path.read_text()
    outputs["decisions log"] = (tmp_path / "decisions.jsonl").read_text()
    outputs["state file"] = (tmp_path / "state.sqlite").read_bytes().decode("latin-1")
    with sqlite3.connect(tmp_path / "state.sqlite") as db:  # and its rows, however the file stores them
        outputs["state rows"] = json.dumps([list(r) for t in _tables(db) for r in db.execute(f"SELECT * FROM {t}")])
    return outputs


def _tables(db: sqlite3.Connection) -> list[str]:
    return [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]


def _assert_no_secret(outputs: dict[str, str]) -> None:
    assert all(outputs.values()), [k for k, v in outputs.items() if not v]
    found = {
        name: [s[:12] for s in SECRETS if any(form in text for form in _forms(s))] for name, text in outputs.items()
    }
    assert not any(found.values()), found


def _forms(secret: str) -> list[str]:
    """The secret, and the part of it any base64 of a text holding it shows whatever the alignment
    (user-data is sent base64-encoded), as is and URL-encoded (EC2's query API)."""
    forms = [secret]
    for offset in range(3):
        encoded = base64.b64encode(b"-" * offset + secret.encode()).decode()
        stable = encoded[4:-4]  # the first and last quad mix in bytes around the secret
        forms += [stable, stable.replace("+", "%2B").replace("/", "%2F")]
    return forms


def _launched(tmp_path: Path) -> bool:
    from tests.service.test_submit_host_e2e import records

    try:
        return any(r.get("launched") for r in records(tmp_path)) and len(records(tmp_path)) >= 3
    except (FileNotFoundError, json.JSONDecodeError):
        return False


@pytest.mark.slow
def test_grep_a_run_against_moto_for_the_secrets(tmp_path, moto_endpoint, network, boto_client):
    from tests.service.test_submit_host_e2e import start_world

    pool = f"secrets-{int(time.time() * 1000) % 10**8}"
    (tmp_path / "submit").mkdir()
    config = _secret_config(tmp_path, moto_endpoint, network, pool, dry_run=False)
    world, thread = start_world(tmp_path / "submit", boto_client("ec2", fresh=True), pool)
    try:
        outputs = _run_and_collect(tmp_path, config, lambda: _launched(tmp_path) and len(world.seen) >= 2)
    finally:
        world.stop.set()
        thread.join(timeout=10)
    assert world.error is None
    assert "probe: every call works" in outputs["check-config --probe"], outputs["check-config --probe"]
    _assert_no_secret(outputs)


@pytest.mark.slow
def test_grep_a_dry_run_for_the_secrets(tmp_path, moto_endpoint, network):
    from tests.service.test_submit_host_e2e import MAX_INSTANCES, start_world

    pool = f"secrets-dry-{int(time.time() * 1000) % 10**8}"
    (tmp_path / "submit").mkdir()
    config = _secret_config(tmp_path, moto_endpoint, network, pool, dry_run=True)
    world, thread = start_world(tmp_path / "submit", None, pool, initial_instances=MAX_INSTANCES)
    try:
        outputs = _run_and_collect(tmp_path, config, lambda: _launched(tmp_path))
    finally:
        world.stop.set()
        thread.join(timeout=10)
    assert world.error is None
    _assert_no_secret(outputs)
