"""The PNG timeline report, drawn from a real replay, and the decisions-log reader."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from wire_daemon.core.config import EmulationConfig, ReplayConfig, SteeringConfig
from wire_daemon.core.errors import InputError
from wire_daemon.emulated.traces import bundled_trace_path, load_trace
from wire_daemon.runtime.replay import replay
from wire_daemon.service.report import DPI, FIGSIZE_IN, load_decisions, render_report

EXPECTED_SIZE = (int(FIGSIZE_IN[0] * DPI), int(FIGSIZE_IN[1] * DPI))


@pytest.fixture(scope="module")
def replay_records() -> list[dict]:
    config = ReplayConfig(emulation=EmulationConfig(time_scale=20), steering=SteeringConfig(charging_unit_s=60))
    result = replay(load_trace(bundled_trace_path()), "wire", config)
    return [r.to_json() for r in result.records]


def _read_png(path: Path) -> np.ndarray:
    import matplotlib.image as mpimg

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return mpimg.imread(path)


def _assert_drawn(path: Path) -> np.ndarray:
    pixels = _read_png(path)
    height, width = pixels.shape[:2]
    assert (width, height) == EXPECTED_SIZE
    rgb = pixels[..., :3]
    assert rgb.std() > 0.05, "the image is (nearly) blank"
    colored = np.abs(rgb - rgb.mean(axis=2, keepdims=True)).max(axis=2) > 0.15
    assert colored.mean() > 0.002, "no coloured lines were drawn"
    return rgb


def test_report_from_replay(tmp_path: Path, replay_records: list[dict]) -> None:
    assert len(replay_records) > 3 and any(r["launched"] for r in replay_records)
    out = render_report(replay_records, tmp_path / "sub" / "report.png", "Replay of the bundled trace (wire)")
    assert out == tmp_path / "sub" / "report.png"
    _assert_drawn(out)


def test_report_with_cost_adds_a_panel(tmp_path: Path, replay_records: list[dict]) -> None:
    cost = 0
    records = []
    for r in replay_records:
        cost += r["pool"]
        records.append({**r, "cost_units": cost})
    plain = _assert_drawn(render_report(replay_records, tmp_path / "plain.png", "t"))
    with_cost = _assert_drawn(render_report(records, tmp_path / "cost.png", "t"))
    assert not np.array_equal(plain, with_cost)


def test_report_with_money_adds_its_own_panel(tmp_path: Path, replay_records: list[dict]) -> None:
    units = [{**r, "cost_units": n} for n, r in enumerate(replay_records)]
    money = [{**r, "cost_money": 0.25 * r["cost_units"]} for r in units]
    with_units = _assert_drawn(render_report(units, tmp_path / "units.png", "t"))
    with_money = _assert_drawn(render_report(money, tmp_path / "money.png", "t"))
    assert not np.array_equal(with_units, with_money)


def test_report_from_jsonl_with_epoch_times(tmp_path: Path, replay_records: list[dict]) -> None:
    log_path = tmp_path / "decisions.jsonl"
    with log_path.open("w") as f:
        for r in replay_records:
            f.write(json.dumps({**r, "time": 1_700_000_000 + r["time"]}) + "\n")
    records = load_decisions(log_path)
    assert [r["time"] - 1_700_000_000 for r in records] == [r["time"] for r in replay_records]
    assert records[0]["prediction_policies"]  # keys are strings after JSON; the report does not use them
    _assert_drawn(render_report(records, tmp_path / "live.png", "live run"))


def test_report_refuses_no_records(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no decision record to draw"):
        render_report([], tmp_path / "x.png", "empty")


def _write(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines))


def test_load_decisions_rotated_and_bad_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log_path = tmp_path / "decisions.jsonl"
    _write(tmp_path / "decisions.jsonl.2", [json.dumps({"time": 1}), json.dumps({"time": 2})])
    _write(tmp_path / "decisions.jsonl.1", [json.dumps({"time": 3}), "{not json", "", "[1, 2]"])
    _write(log_path, [json.dumps({"time": 4}), json.dumps({"pool": 3}), json.dumps({"time": 5})])
    _write(tmp_path / "decisions.jsonl.old", [json.dumps({"time": 99})])  # not a numbered sibling
    with caplog.at_level(logging.WARNING, logger="wire_daemon.service.report"):
        records = load_decisions(log_path, rotated=True)
    assert [r["time"] for r in records] == [1, 2, 3, 4, 5]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 3
    assert all("\n" not in w for w in warnings)
    assert any(w.startswith(f"{tmp_path / 'decisions.jsonl.1'}:2: ") and "not JSON" in w for w in warnings)
    assert any(w.startswith(f"{tmp_path / 'decisions.jsonl.1'}:4: ") for w in warnings)
    assert any(w.startswith(f"{log_path}:2: ") and "time" in w for w in warnings)
    assert [r["time"] for r in load_decisions(log_path)] == [4, 5]  # current file only


def test_load_decisions_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such decisions log"):
        load_decisions(tmp_path / "absent.jsonl")


def test_report_command_draws_a_replay_written_by_replay_decisions_out(tmp_path, capsys):
    from wire_daemon.cli.main import main

    log = tmp_path / "decisions.jsonl"
    assert main(["replay", "--time-scale", "20", "--charging-unit", "1", "--decisions-out", str(log)]) == 0
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) > 3 and {"time", "pool", "target", "launched", "terminated"} <= set(records[0])
    out = tmp_path / "timeline.png"
    assert main(["report", str(log), "--out", str(out)]) == 0
    assert f"wrote {out} ({len(records)} decisions)" in capsys.readouterr().out
    _assert_drawn(out)
    assert main(["report", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl: no such decisions log" in capsys.readouterr().err
