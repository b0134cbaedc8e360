"""The config most service tests start from: the emulated site, fast, with its files in the test's directory."""

from __future__ import annotations

from pathlib import Path


def emulated_config(tmp_path: Path, speedup: float = 1e6, extra: str = "") -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        f"""
site: {{kind: emulated, speedup: {speedup}}}
emulation: {{time_scale: 20}}
steering: {{charging_unit_s: 900}}
state_path: {tmp_path / "state.sqlite"}
log: {{decisions_path: {tmp_path / "decisions.jsonl"}}}
{extra}
"""
    )
    return path
