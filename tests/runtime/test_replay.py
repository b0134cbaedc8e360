"""Replay end to end on the bundled real trace: determinism, accounting, the CLI."""

import json
import math

import pytest

from wire_daemon.cli.main import main
from wire_daemon.core.config import EmulationConfig, ReplayConfig, SteeringConfig
from wire_daemon.emulated.traces import bundled_trace_path, load_trace
from wire_daemon.runtime.policies import POLICY_NAMES, compared_policies
from wire_daemon.runtime.replay import compare, replay


@pytest.fixture(scope="module")
def montage():
    return load_trace(bundled_trace_path())


def _config(**emulation):
    return ReplayConfig(
        steering=SteeringConfig(charging_unit_s=900.0), emulation=EmulationConfig(time_scale=20.0, **emulation)
    )


def test_replay_is_deterministic_for_a_seed(montage):
    def fingerprint(result):
        summary = result.summary() | {"wall_s": 0, "decision_mean_ms": 0, "decision_max_ms": 0}
        records = [rec.to_json() | {"decision_s": 0} for rec in result.records]
        return json.dumps([summary, records], sort_keys=True)

    assert fingerprint(replay(montage, "wire", _config(seed=3))) == fingerprint(
        replay(montage, "wire", _config(seed=3))
    )
    assert fingerprint(replay(montage, "wire", _config(seed=3))) != fingerprint(
        replay(montage, "wire", _config(seed=4))
    )


def test_every_policy_finishes_every_task_and_bills_whole_units(montage):
    results = compare(montage, _config())
    assert (
        set(results)
        == set(compared_policies(_config().steering))
        == set(POLICY_NAMES) - {"annex-spot", "reactive-spot"}
    )
    full = results["full-site"]
    assert full.relative_time == 1.0
    assert full.cost_units == 12 * math.ceil(full.makespan_s / 900.0)  # every started unit, 12 instances
    for result in results.values():
        assert result.records[-1].done < montage.n_tasks  # the loop ran while work remained
        assert 0 < result.utilization <= 1.0
        assert result.makespan_s >= full.makespan_s * 0.999
    assert results["wire"].cost_units < full.cost_units


def test_full_site_makespan_is_close_to_the_critical_path(montage):
    result = replay(montage, "full-site", ReplayConfig())
    # Critical path 21.1 s (MANIFEST) + 8 levels of submit delay and negotiation + transfers.
    assert 21.1 < result.makespan_s < 21.1 + 8 * 6.0 + 10


def test_cli_json_has_the_documented_keys(capsys):
    assert main(["replay", "--compare", "--json", "--charging-unit", "15"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["policies"]) == set(compared_policies(SteeringConfig()))
    for summary in out["policies"].values():
        assert {"cost_units", "cost", "makespan_s", "relative_time", "utilization", "interruptions"} <= set(summary)
        # One on-demand type at 1 per instance-hour: a 15-minute unit costs a quarter.
        assert summary["cost"] == pytest.approx(summary["cost_units"] / 4)


def test_cli_market_flags_bring_in_the_spot_peers_and_count_their_reclaims(capsys):
    args = ["replay", "--compare", "--json", "--time-scale", "20", "--billing", "second", "--market", "auto"]
    assert main([*args, "--interruptions", "0.5", "--storm", "--seed", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["policies"]) == set(POLICY_NAMES) and out["billing"] == "second" and out["storm"]
    spot = out["policies"]["annex-spot"]
    assert spot["interruptions"] >= 1 and spot["interrupted_slot_s"] > 0
    assert spot["cost"] < out["policies"]["full-site"]["cost"]  # spot: about a third of the price


def test_cli_refuses_an_impossible_market_in_one_line(capsys):
    assert main(["replay", "--interruptions", "-1"]) == 2
    assert "--interruptions must be >= 0" in capsys.readouterr().err


@pytest.mark.parametrize("flags", [["--interruptions", "0.2"], ["--storm"], ["--compare", "--storm"]])
def test_cli_refuses_reclaims_where_nothing_buys_spot(capsys, flags):
    """On-demand only: the reclaims asked for would silently not happen."""
    assert main(["replay", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "buys none (market on-demand)" in err and "--market spot or auto" in err


def test_cli_takes_reclaims_where_a_replayed_policy_buys_spot(capsys):
    assert main(["replay", "--policy", "annex-spot", "--interruptions", "20", "--time-scale", "20", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["policies"]["annex-spot"]["interruptions"] >= 1


def test_cli_text_table_and_verbose_decisions(capsys):
    assert main(["replay", "--policy", "wire", "--verbose", "--time-scale", "10"]) == 0
    out = capsys.readouterr().out
    assert "== decisions: wire ==" in out
    assert "t=       0s" in out
    assert "wire" in out.splitlines()[-1] or "prediction error" in out


def test_cli_names_a_missing_trace(tmp_path, capsys):
    missing = tmp_path / "nope.json"
    assert main(["replay", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "nope.json" in err and "Traceback" not in err


def test_cli_rejects_bad_values(capsys):
    assert main(["replay", "--slots", "0"]) == 2
    assert "--slots must be > 0" in capsys.readouterr().err  # the flag, not the config key (issue 13)
