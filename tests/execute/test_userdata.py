"""The rendered worker contextualization: cloud-init user-data, HTCondor config, boot script."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from wire_daemon.core.errors import ConfigError
from wire_daemon.execute.userdata import (
    ADMIN_KEY_PATH,
    TOKEN_PATH,
    WorkerConfig,
    default_template_dir,
    fill,
    render_boot_script,
    render_execute_config,
    render_user_data,
)

TOKEN = "eyJhbGciOiJFUzI1NiIsImtpZCI6IlBPT0wifQ.eyJzdWIiOiJ3b3JrZXJAcG9vbCJ9.c2lnbmF0dXJlLW5vdC1yZWFs"
ADMIN_KEY = "bm90LWEtcmVhbC1rZXktYnV0LTY0LWJ5dGVzLW9mLWl0LXRvLWJlLWJhc2U2NC1lbmNvZGVkLg=="
SSM = WorkerConfig(
    cloud="ec2", pool="montage", condor_host="cm.example.org:9618", token_source="/wire/montage/condor-token"
)
BARBICAN = WorkerConfig(
    cloud="openstack",
    pool="montage",
    condor_host="10.0.0.2",
    token_source="https://key-manager.example.test/v1/secrets/6a3b0c1d-0000-4000-8000-0000000000c3",
)


def knobs(config_text: str) -> dict[str, str]:
    """HTCondor `NAME = value` lines (and `use X : Y` lines, keyed by 'use X')."""
    out = {}
    for line in config_text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("use "):
            category, _, value = line[4:].partition(":")
            out.setdefault(f"use {category.strip()}", []).append(value.strip())
            continue
        name, _, value = line.partition("=")
        out[name.strip()] = value.strip()
    return out


def files(user_data: str) -> dict[str, dict]:
    assert user_data.startswith("#cloud-config\n")
    data = yaml.safe_load(user_data)
    return {entry["path"]: entry for entry in data["write_files"]}


def test_execute_config_has_the_knobs_a_worker_needs():
    k = knobs(render_execute_config(SSM))

    assert k["use role"] == ["get_htcondor_execute"]
    assert k["CONDOR_HOST"] == "cm.example.org:9618"
    for knob in (
        "SEC_DEFAULT_AUTHENTICATION_METHODS",
        "SEC_DAEMON_AUTHENTICATION_METHODS",
        "SEC_CLIENT_AUTHENTICATION_METHODS",
    ):
        assert k[knob] == "IDTOKENS"
    assert k["SEC_TOKEN_DIRECTORY"] == "/etc/condor/tokens.d"
    # Static slots: NUM_SLOTS alone makes partitionable slots on HTCondor 23.
    assert k["NUM_CPUS"] == "4" and k["NUM_SLOTS_TYPE_1"] == "4"
    assert k["SLOT_TYPE_1"] == "cpus=1" and k["SLOT_TYPE_1_PARTITIONABLE"] == "False"
    assert "NUM_SLOTS" not in k and "use feature" not in k
    assert k["WirePool"] == '"montage"'
    assert k["STARTD_ATTRS"].split() == ["$(STARTD_ATTRS)", "WirePool", "WireInstanceId", "WireMarket"]
    assert k["STARTD_NOCLAIM_SHUTDOWN"] == "1800"
    assert "STARTD_StartTime" in k["MASTER.DAEMON_SHUTDOWN"]
    assert k["DEFAULT_MASTER_SHUTDOWN_SCRIPT"] == "/usr/local/sbin/wire-worker-poweroff"


def test_partitionable_slots_and_extra_lines():
    config = WorkerConfig(
        **{**SSM.__dict__, "slot_mode": "partitionable", "slots": 8, "extra_config": ("STARTER_DEBUG = D_FULLDEBUG",)}
    )
    k = knobs(render_execute_config(config))

    assert k["use feature"] == ["PartitionableSlot"]  # one partitionable slot...
    assert k["NUM_CPUS"] == "8"  # ...of the cores the daemon plans with, whatever the instance type has
    assert "NUM_SLOTS" not in k and "NUM_SLOTS_TYPE_1" not in k and "SLOT_TYPE_1" not in k
    assert k["STARTER_DEBUG"] == "D_FULLDEBUG"


def test_workers_let_only_the_daemon_identity_administer_them():
    k = knobs(render_execute_config(SSM))
    assert "TRUST_DOMAIN" not in k  # HTCondor's default: CONDOR_HOST
    assert k["WIRE_DAEMON_IDENTITY"] == "wire-daemon@$(TRUST_DOMAIN)"
    assert k["ALLOW_ADMINISTRATOR"] == "$(ALLOW_ADMINISTRATOR) $(WIRE_DAEMON_IDENTITY)"
    assert k["SEC_TOKEN_REVOCATION_EXPR"] == 'sub =!= "$(WIRE_DAEMON_IDENTITY)"'
    assert k["MAXJOBRETIREMENTTIME"] == "86400"  # a graceful drain lets running jobs finish

    k = knobs(render_execute_config(WorkerConfig(**{**SSM.__dict__, "trust_domain": "pool.example.org"})))
    assert k["TRUST_DOMAIN"] == "pool.example.org"


def test_the_admin_key_is_fetched_like_the_token_and_never_in_user_data():
    config = WorkerConfig(**{**SSM.__dict__, "admin_key_source": "/wire/montage/worker-admin-key"})
    user_data = render_user_data(config)
    boot = render_boot_script(config)
    assert "ADMIN_KEY_SOURCE='/wire/montage/worker-admin-key'" in boot
    assert f"ADMIN_KEY_FILE='{ADMIN_KEY_PATH}'" in boot and 'fetch_secret "$ADMIN_KEY_SOURCE"' in boot
    assert "base64 -d" in boot
    assert ADMIN_KEY_PATH not in files(user_data)

    with pytest.raises(ConfigError, match="admin_key_source"):
        WorkerConfig(**{**SSM.__dict__, "admin_key": ADMIN_KEY})  # no key in user-data without opt-in
    with pytest.raises(ConfigError, match="admin_key_source is not a valid ssm"):
        WorkerConfig(**{**SSM.__dict__, "admin_key_source": "/wire/x'$(reboot)"})

    inline = WorkerConfig(
        **{**SSM.__dict__, "token_delivery": "inline", "token_source": "", "token": TOKEN, "admin_key": ADMIN_KEY}
    )
    entry = files(render_user_data(inline))[ADMIN_KEY_PATH]
    assert entry["encoding"] == "b64" and entry["content"] == ADMIN_KEY and entry["permissions"] == "0600"
    with pytest.raises(ConfigError, match="base64"):
        WorkerConfig(**{**inline.__dict__, "admin_key": "not base64!"})


def test_user_data_parses_and_installs_config_boot_script_and_dead_man_switch():
    user_data = render_user_data(SSM)
    written = files(user_data)

    assert written["/etc/condor/config.d/50-wire-execute.conf"]["content"] == render_execute_config(SSM)
    boot = written["/usr/local/sbin/wire-worker-boot"]
    assert boot["content"] == render_boot_script(SSM) and boot["permissions"] == "0700"
    assert "poweroff" in written["/usr/local/sbin/wire-worker-poweroff"]["content"]
    assert yaml.safe_load(user_data)["runcmd"] == [["/usr/local/sbin/wire-worker-boot"]]
    assert len(user_data.encode()) < 16384  # EC2's user-data limit


@pytest.mark.parametrize(
    "config",
    [
        SSM,
        WorkerConfig(
            **{**SSM.__dict__, "token_delivery": "secretsmanager", "token_source": "wire/montage/condor-token"}
        ),
        BARBICAN,
        WorkerConfig(**{**BARBICAN.__dict__, "token_delivery": "file", "token_source": "/mnt/config/wire/pool.token"}),
    ],
    ids=["ssm", "secretsmanager", "barbican", "file"],
)
def test_no_token_in_user_data_by_default(config):
    user_data = render_user_data(config)

    assert TOKEN not in user_data and "eyJ" not in user_data
    assert TOKEN_PATH not in files(user_data)
    assert config.token_source in render_boot_script(config)  # only where to find it


def test_ssm_delivery_fetches_with_the_instance_role():
    boot = render_boot_script(SSM)
    assert "TOKEN_DELIVERY='ssm'" in boot and "TOKEN_SOURCE='/wire/montage/condor-token'" in boot
    assert "aws ssm get-parameter" in boot and "--with-decryption" in boot
    assert "CLOUD='ec2'" in boot and "latest/meta-data/$1" in boot  # the instance id from IMDS


def test_barbican_delivery_on_openstack():
    boot = render_boot_script(BARBICAN)
    assert "TOKEN_DELIVERY='barbican'" in boot and "CLOUD='openstack'" in boot
    assert "openstack/latest/meta_data.json" in boot  # the instance id from the metadata service


def test_inline_token_only_with_the_explicit_opt_in():
    with pytest.raises(ConfigError, match="inline"):
        WorkerConfig(**{**SSM.__dict__, "token": TOKEN})

    config = WorkerConfig(**{**SSM.__dict__, "token_delivery": "inline", "token_source": "", "token": TOKEN})
    user_data = render_user_data(config)
    entry = files(user_data)[TOKEN_PATH]
    assert entry["content"].strip() == TOKEN and entry["permissions"] == "0600"
    assert "TOKEN_DELIVERY='inline'" in render_boot_script(config)

    with pytest.raises(ConfigError, match="IDTOKEN"):
        WorkerConfig(**{**SSM.__dict__, "token_delivery": "inline", "token_source": ""})


@pytest.mark.parametrize(
    "change",
    [
        {"cloud": "gce"},
        {"token_delivery": "barbican"},  # not on EC2
        {"pool": "bad'pool"},
        {"condor_host": "cm.example.org; reboot"},
        {"token_source": "/wire/x'$(reboot)"},
        {"slot_mode": "dynamic"},
        {"slots": 0},
        {"idle_shutdown_s": 5},
        {"extra_config": ("A = 1\nB = 2",)},
        {"trust_domain": 'x" || true'},
        {"max_job_retirement_s": -1},
    ],
)
def test_bad_worker_config_is_a_clear_error(change):
    with pytest.raises(ConfigError) as caught:
        render_user_data(WorkerConfig(**{**SSM.__dict__, **change}))
    assert "\n" not in str(caught.value)


def test_ssm_is_not_an_openstack_delivery():
    with pytest.raises(ConfigError, match="openstack"):
        WorkerConfig(**{**BARBICAN.__dict__, "token_delivery": "ssm", "token_source": "/wire/x"})


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("sh") is None, reason="no POSIX shell")
@pytest.mark.parametrize(
    "config",
    [SSM, BARBICAN, WorkerConfig(**{**SSM.__dict__, "admin_key_source": "/wire/montage/worker-admin-key"})],
    ids=["ec2", "openstack", "admin-key"],
)
def test_boot_script_is_valid_shell(config, tmp_path):
    script = tmp_path / "boot.sh"
    script.write_text(render_boot_script(config))
    result = subprocess.run(["sh", "-n", str(script)], capture_output=True, text=True, timeout=10)
    assert result.returncode == 0, result.stderr


def test_fill_indents_blocks_and_rejects_unknown_names():
    assert fill("a: |\n  @BODY@\nb: @X@\n", {"BODY": "one\ntwo", "X": "x"}, "t") == "a: |\n  one\n  two\nb: x\n"
    with pytest.raises(ConfigError, match="t:1: unknown placeholder @NOPE@"):
        fill("@NOPE@", {}, "t")
    with pytest.raises(ConfigError, match="line of its own"):
        fill("x = @BODY@", {"BODY": "a\nb"}, "t")


def test_templates_are_found_and_a_missing_dir_is_a_clear_error(tmp_path):
    assert (default_template_dir() / "worker-cloud-init.yaml.in").is_file()
    with pytest.raises(ConfigError, match="cannot read worker template"):
        render_user_data(SSM, template_dir=tmp_path)


@pytest.mark.slow
def test_barbican_fetch_reads_the_secret_with_the_images_application_credential(tmp_path):
    """Run the boot script's Barbican fetch against a stand-in Keystone + Barbican on 127.0.0.1."""
    import http.server
    import json
    import sys
    import threading

    seen: dict[str, object] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # Keystone: application credential -> token
            seen["auth"] = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(201)
            self.send_header("X-Subject-Token", "keystone-token-1")
            self.end_headers()

        def do_GET(self):  # Barbican: the secret's payload
            seen["get"] = (self.path, self.headers["X-Auth-Token"], self.headers["Accept"])
            self.send_response(200)
            self.end_headers()
            self.wfile.write(TOKEN.encode())

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        creds = tmp_path / "openstack.env"
        creds.write_text(
            f"# worker image credentials\nexport OS_AUTH_URL={base}/v3\n"
            "OS_APPLICATION_CREDENTIAL_ID='app-cred-id'\nOS_APPLICATION_CREDENTIAL_SECRET=\"app-cred-secret\"\n"
        )
        boot = render_boot_script(BARBICAN)
        program = boot.split("<<'PY'\n", 1)[1].split("\nPY\n", 1)[0]
        result = subprocess.run(
            [sys.executable, "-", str(creds), f"{base}/v1/secrets/6a3b"],
            input=program,
            capture_output=True,
            text=True,
            timeout=20,
        )
    finally:
        server.shutdown()
        thread.join()

    assert result.returncode == 0, result.stderr
    assert result.stdout == TOKEN + "\n"
    credential = seen["auth"]["auth"]["identity"]["application_credential"]
    assert credential == {"id": "app-cred-id", "secret": "app-cred-secret"}
    assert seen["get"] == ("/v1/secrets/6a3b/payload", "keystone-token-1", "text/plain")
