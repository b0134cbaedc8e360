"""Issue 13, items 5, 11 and 12: settings and docs that agree, pins, and help for every flag."""

from __future__ import annotations

import argparse
import configparser
import dataclasses
import json
import re
from pathlib import Path
from typing import get_type_hints

import pytest
import yaml

from wire_daemon.cli.main import _parser, main
from wire_daemon.core.errors import ConfigError
from wire_daemon.core.sections import ELSEWHERE
from wire_daemon.execute.providers import PROVIDERS
from wire_daemon.execute.providers.ec2 import Ec2Config
from wire_daemon.execute.userdata import WorkerConfig
from wire_daemon.runtime.policies import option_sections
from wire_daemon.runtime.settings import Settings, load_settings

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::PendingDeprecationWarning")
ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text()


# -- item 5: settings that are silently ignored or disagree ---------------------------------------


def _keys(cls: type, prefix: str = "") -> set[str]:
    """Every key the config accepts under ``cls``, dotted."""
    out: set[str] = set()
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name == "source":
            continue
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            out |= _keys(kind, f"{prefix}{f.name}.")  # type: ignore[arg-type]
        else:
            out.add(prefix + f.name)
    return out


def accepted_keys() -> set[str]:
    keys = _keys(Settings) - {"cloud.providers", "cloud.worker", "policy_options"}
    for key, options in option_sections().items():  # each policy's own section (pfa)
        keys |= {f"{key}.{k}" for k in _keys(options)}
    # The keys another setting owns (runtime/builders.py sets them): refused here.
    fixed = {"cloud", "pool", "slots"}
    assert fixed <= set(ELSEWHERE)
    keys |= {f"cloud.worker.{k}" for k in _keys(WorkerConfig) if k not in fixed}
    for name, spec in PROVIDERS.items():  # each provider's section, cloud.<name>
        keys |= {f"cloud.{name}.{k}" for k in _keys(spec.config)}
    return keys


def _yaml_keys(node: object, prefix: str = "") -> set[str]:
    if not isinstance(node, dict):
        return set()
    out = set()
    for key, value in node.items():
        out.add(prefix + key)
        out |= _yaml_keys(value, f"{prefix}{key}.")
    return out


def test_every_accepted_key_is_in_the_annotated_example():
    example = yaml.safe_load((DOCS / "config.example.yaml").read_text())
    missing = sorted(accepted_keys() - _yaml_keys(example))
    assert not missing, f"accepted but in no example (docs/config.example.yaml): {missing}"
    unknown = sorted(k for k in _yaml_keys(example) if k not in accepted_keys() and not _is_section(k))
    assert not unknown, f"in the example but not accepted: {unknown}"


def _is_section(key: str) -> bool:
    return any(k.startswith(key + ".") for k in accepted_keys())


@pytest.mark.parametrize("name", ["submit-host.example.yaml", "openstack.example.yaml"])
def test_each_working_example_checks_out(tmp_path, monkeypatch, capsys, name):
    text = (DOCS / name).read_text().replace("/home/pegasus/submit", str(tmp_path))
    for documented in ("/var/lib/wire-daemon", "/var/log/wire-daemon"):  # the state and log directories
        text = text.replace(documented, str(tmp_path))
    config = tmp_path / "config.yaml"
    config.write_text(text)
    clouds = tmp_path / "clouds.yaml"
    clouds.write_text(
        "clouds:\n  wire-daemon:\n    auth: {auth_url: 'https://identity.example.test/v3'}\n    regions: [RegionOne]\n"
    )
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(clouds))
    assert main(["check-config", str(config)]) == 0, capsys.readouterr().err


def test_the_openstack_keys_of_the_examples_are_the_ones_accepted(tmp_path, capsys):
    base = (DOCS / "openstack.example.yaml").read_text().replace("/home/pegasus/submit", str(tmp_path))
    for old, new in (("image_id:", "image:"), ("network_id:", "network:")):
        bad = tmp_path / "bad.yaml"
        bad.write_text(base.replace(old, new))
        assert main(["check-config", str(bad)]) == 2
        assert f"unknown key cloud.openstack.{new[:-1]}" in capsys.readouterr().err
    comment = next(line for line in (DOCS / "config.example.yaml").read_text().splitlines() if "openstack:" in line)
    assert "image," not in comment and "network," not in comment


def test_the_example_token_path_is_the_one_the_worker_policy_grants():
    example = yaml.safe_load((DOCS / "submit-host.example.yaml").read_text())
    pool, source = example["cloud"]["pool"], example["cloud"]["worker"]["token_source"]
    granted = re.findall(r"parameter(/wire/POOL/[\w-]+)", (DOCS / "cloud.md").read_text())
    assert source in {g.replace("POOL", pool) for g in granted}, (source, granted)


def test_the_master_snippet_prefers_the_instance_role_like_the_env_example():
    master = (ROOT / "condor_config" / "wire-daemon-master.conf").read_text()
    environment = next(line for line in master.splitlines() if line.startswith("WIRE_ENVIRONMENT"))
    assert "AWS_PROFILE" not in environment and "AWS_CONFIG_FILE" not in environment
    env_example = (ROOT / "systemd" / "wire-daemon.env.example").read_text()
    assert not re.search(r"^AWS_", env_example, re.M), "the env example sets nothing for AWS by default"
    assert "instance profile (IAM role): set nothing" in env_example


def test_slots_per_instance_under_a_cloud_is_refused_with_a_pointer(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(
        f"site: {{kind: condor, submit_root: {tmp_path}}}\n"
        "cloud: {kind: openstack, openstack: {flavor: f, image_id: i, network_id: n, slots_per_instance: 8}}\n"
    )
    assert main(["check-config", str(config)]) == 2
    assert "cloud.openstack.slots_per_instance cannot be set here: the slot count is steering.slots_per_instance" in (
        capsys.readouterr().err
    )
    cloud_md = (DOCS / "cloud.md").read_text()
    assert "refused with a pointer to it" in cloud_md and "cloud.ec2.slots_per_instance" not in cloud_md


def test_one_charging_unit(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("safety: {charging_unit_s: 60}")
    with pytest.raises(
        ConfigError, match="safety.charging_unit_s is no longer a setting: use steering.charging_unit_s"
    ):
        load_settings(path)
    assert "charging_unit" not in {f.name for f in dataclasses.fields(Ec2Config)}


def test_missing_ec2_keys_are_named(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(f"site: {{kind: condor, submit_root: {tmp_path}}}\ncloud: {{kind: ec2, ec2: {{region: x}}}}\n")
    assert main(["check-config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "cloud.ec2 is missing required key(s): image_id, instance_type" in err and "__init__" not in err


def test_a_fractional_count_is_not_a_whole_number(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("safety: {max_instances: 5.5}")
    with pytest.raises(ConfigError, match="safety.max_instances must be a whole number"):
        load_settings(path)


def test_an_unwritable_decisions_path_is_a_config_error(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    config = tmp_path / "c.yaml"
    config.write_text(
        f"site: {{kind: emulated}}\nstate_path: {tmp_path / 's.sqlite'}\nlog: {{decisions_path: {blocker}/d.jsonl}}\n"
    )
    assert main(["run", "--config", str(config), "--max-iterations", "1"]) == 2
    assert "log.decisions_path: cannot write" in capsys.readouterr().err


def test_check_config_never_prints_the_pool_token(tmp_path, capsys):
    token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ3b3JrZXIifQ.c2VjcmV0LXNpZ25hdHVyZQ"
    config = tmp_path / "c.yaml"
    config.write_text(
        f"site: {{kind: condor, submit_root: {tmp_path}}}\n"
        "cloud: {kind: ec2, ec2: {region: us-east-1, image_id: ami-1, instance_type: c5.large},\n"
        f"        worker: {{condor_host: cm.example.org, token_delivery: inline, token: {token}}}}}\n"
        f"state_path: {tmp_path / 'state.sqlite'}\nlog: {{decisions_path: {tmp_path / 'd.jsonl'}}}\n"
    )
    assert main(["check-config", str(config)]) == 0
    out = capsys.readouterr().out
    assert token not in out and json.loads(out.split("\n", 1)[1])["cloud"]["worker"]["token"] == "<redacted>"


# -- item 11: extras and the htcondor pin ---------------------------------------------------------


def test_cloud_sdks_and_matplotlib_are_extras_and_the_readme_pins_htcondor():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    requires = cfg["options"]["install_requires"]
    assert "boto3" not in requires and "openstacksdk" not in requires and "matplotlib" not in requires
    extras = cfg["options.extras_require"]
    assert "boto3" in extras["ec2"] and "openstacksdk" in extras["openstack"] and "matplotlib" in extras["plots"]
    assert "> /etc/wire-daemon/constraints.txt" in README  # the pin per series: tests/service/test_install_recipe.py
    assert "pip install -c /etc/wire-daemon/constraints.txt '.[ec2,plots]'" in README
    assert "condor_version" in README


# -- item 12: help gaps ------------------------------------------------------------------------------


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_flag_has_help_and_there_is_a_version(capsys):
    parser = _parser()
    missing = [
        f"{name} {'/'.join(a.option_strings) or a.dest}"
        for name, sub in _subparsers(parser).items()
        for a in sub._actions
        if not a.help and not isinstance(a, argparse._HelpAction)
    ]
    assert not missing, f"no help text: {missing}"
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and re.fullmatch(r"wire-daemon \d+\.\d+\.\d+\n", capsys.readouterr().out)


def _synopsis(command: str) -> str:
    """The README's synopsis of one command (a line and its indented continuation) from its Commands block."""
    block = README.split("## Commands", 1)[1].split("```", 2)[1]
    lines = block.splitlines()
    for i, line in enumerate(lines):
        if line.split()[1:2] == [command]:
            more = [x for x in lines[i + 1 :]]
            cont = []
            for x in more:
                if x.startswith(" "):
                    cont.append(x)
                else:
                    break
            return " ".join([line, *cont])
    raise AssertionError(f"no synopsis of {command} in the README")


def test_the_readme_synopsis_of_every_command_matches_its_help():
    for name, sub in _subparsers(_parser()).items():
        synopsis = _synopsis(name)
        flags = {o for a in sub._actions for o in a.option_strings if o.startswith("--") and o != "--help"}
        shown = set(re.findall(r"--[a-z][a-z-]*", synopsis))
        assert shown == flags, (name, sorted(flags ^ shown))
        positionals = [a.metavar or a.dest.upper() for a in sub._actions if not a.option_strings]
        for positional in positionals:
            assert positional.upper() in synopsis.upper() or (name == "report" and "LOG" in synopsis), (
                name,
                positional,
            )
