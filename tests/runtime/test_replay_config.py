"""``replay --config FILE``: the instance types, prices, billing and market of a daemon config; flags override."""

from __future__ import annotations

import json

import pytest

from wire_daemon.cli.main import main
from wire_daemon.emulated.traces import bundled_trace_path, load_trace
from wire_daemon.runtime.replay import replay
from wire_daemon.runtime.settings import load_settings

pytestmark = pytest.mark.slow

DAEMON_CONFIG = """
policy: pure-reactive
site: {{kind: condor, submit_root: /srv/pegasus/submit}}
cloud:
  kind: ec2
  ec2: {{region: us-east-1, image_id: ami-0123456789abcdef0, instance_type: c5.xlarge}}
steering:
  max_instances: 6
  billing_model: second
  market: spot
  currency: USD
  instance_types:
    - {{name: c5.xlarge, cores: 4, price: {small}, spot_price: {small_spot}}}
    - {{name: c5.2xlarge, cores: 8, price: {large}}}
emulation: {{time_scale: 20}}
"""


def _write(tmp_path, name="daemon.yaml", scale=1.0):
    path = tmp_path / name
    # Per-second billing: prices per charging unit of one second (0.17 an hour is 0.17 / 3600 a second).
    path.write_text(
        DAEMON_CONFIG.format(small=0.17 * scale / 3600, small_spot=0.06 * scale / 3600, large=0.34 * scale / 3600)
    )
    return path


def _replay_json(capsys, *args):
    assert main(["replay", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_replay_takes_the_types_prices_billing_market_and_policy_of_the_file(tmp_path, capsys):
    path = _write(tmp_path)
    out = _replay_json(capsys, "--config", str(path))
    assert (out["billing"], out["market"], out["currency"], out["max_instances"]) == ("second", "spot", "USD", 6)
    assert out["time_scale"] == 20 and list(out["policies"]) == ["pure-reactive"]
    run = out["policies"]["pure-reactive"]
    assert set(run["instances_by_type"]) <= {"c5.xlarge", "c5.2xlarge"}
    # The same money as a replay of the file's sections through the API: the file's prices, nothing else.
    direct = replay(load_trace(bundled_trace_path()), "pure-reactive", load_settings(path))
    assert run["cost"] == pytest.approx(direct.cost_money, abs=1e-4) and run["cost_units"] == direct.cost_units
    for key in ("cost", "cost_units", "interruptions", "restarts"):
        assert key in run


def test_money_follows_the_files_prices(tmp_path, capsys):
    once = _replay_json(capsys, "--config", str(_write(tmp_path)))["policies"]["pure-reactive"]
    twice = _replay_json(capsys, "--config", str(_write(tmp_path, "dear.yaml", scale=2.0)))["policies"]["pure-reactive"]
    assert once["cost_units"] == twice["cost_units"] and once["cost"] > 0
    assert twice["cost"] == pytest.approx(2 * once["cost"], abs=2e-4)


def test_a_flag_given_overrides_the_file(tmp_path, capsys):
    out = _replay_json(
        capsys, "--config", str(_write(tmp_path)), "--billing", "unit", "--max-instances", "3", "--policy", "full-site"
    )
    assert (out["billing"], out["max_instances"], out["market"]) == ("unit", 3, "spot")
    assert list(out["policies"]) == ["full-site"]


def test_a_billing_flag_keeps_the_money_an_hour_of_the_files_prices(tmp_path, capsys):
    """The file prices per second; --billing unit bills whole hours of the same 0.17 an hour, and hourly
    prices (price_per_hour) mean the same money whatever the billing."""
    path = _write(tmp_path)
    hourly = tmp_path / "hourly.yaml"
    hourly.write_text(
        path.read_text()
        .replace(f"price: {0.17 / 3600}, spot_price: {0.06 / 3600}", "price_per_hour: 0.17, spot_price_per_hour: 0.06")
        .replace(f"price: {0.34 / 3600}", "price_per_hour: 0.34")
    )
    assert "price_per_hour" in hourly.read_text()
    for billing in ("unit", "second"):
        flags = ["--billing", billing, "--policy", "full-site"]
        per_unit = _replay_json(capsys, "--config", str(path), *flags)["policies"]["full-site"]
        per_hour = _replay_json(capsys, "--config", str(hourly), *flags)["policies"]["full-site"]
        assert per_unit["cost"] == pytest.approx(per_hour["cost"], rel=1e-6)
        # Six c5.xlarge on spot at 0.06 an hour: whole hours, or the seconds of the run.
        hours = per_unit["cost_units"] if billing == "unit" else per_unit["cost_units"] / 3600
        assert per_unit["cost"] == pytest.approx(0.06 * hours, rel=0.02)


def test_a_bad_config_is_one_line_naming_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("steering: {instance_types: [{name: c5.xlarge, cores: 0}]}\n")
    assert main(["replay", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml" in err and "cores" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
