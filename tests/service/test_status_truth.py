"""Issue 13, items 3 and 4: a status that tells the truth, and a submit root that must exist."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from wire_daemon.cli.main import main
from wire_daemon.core.config import EmulationConfig, SteeringConfig
from wire_daemon.core.errors import ConfigError
from wire_daemon.core.journal import Journal
from wire_daemon.emulated.traces import bundled_trace_path, load_trace
from wire_daemon.execute.guarded_cloud import SafetyConfig
from wire_daemon.persist.store import StateStore
from wire_daemon.runtime.runtimes import SubmitHostRuntime
from wire_daemon.runtime.settings import CloudSettings, CondorSettings, Settings, SiteSettings, load_settings
from wire_daemon.service.daemon import Daemon
from wire_daemon.service.inspect import inspect_submit_dir
from wire_lab.live_writer import WriterOptions, build_live

from .emulated_config import emulated_config
from .test_submit_host import FakeDriver

DATA = Path(__file__).resolve().parents[1] / "data"
EPOCH = 1_700_000_000.0


def _condor(tmp_path: Path, root: Path | str, dry_run: bool = True) -> Path:
    path = tmp_path / "condor.yaml"
    path.write_text(
        f"""
policy: wire
site: {{kind: condor, submit_root: "{root}"}}
condor: {{control: "off", settle_s: 0}}
cloud:
  kind: ec2
  ec2: {{region: us-east-1, image_id: ami-0123456789abcdef0, instance_type: c5.large,
         endpoint_url: "http://127.0.0.1:9"}}
steering: {{interval_s: 60, charging_unit_s: 900, min_instances: 0}}
safety: {{dry_run: {str(dry_run).lower()}}}
state_path: {tmp_path / "state.sqlite"}
log: {{decisions_path: {tmp_path / "decisions.jsonl"}}}
"""
    )
    return path


def _live(root: Path, name: str, trace: Path, label: str, epoch: float = EPOCH):
    return build_live(
        load_trace(trace),
        root / name,
        EmulationConfig(initial_instances=2),
        4,
        3600.0,
        WriterOptions(epoch=epoch, label=label),
    )


# -- item 3 ---------------------------------------------------------------------------------------


def test_status_after_the_workflow_finished_is_final_and_the_log_ends_with_it(tmp_path, capsys):
    config = emulated_config(tmp_path)
    assert main(["run", "--config", str(config)]) == 0
    capsys.readouterr()
    assert main(["status", "--config", str(config)]) == 0
    text = capsys.readouterr().out
    assert "stopped " in text and ": the workflow finished (the figures below are final)" in text
    assert "finished" in text and "103/103 tasks done" in text
    assert "tasks: 103 of 103 done, 0 running, 0 queued, 0 held, 0 not ready" in text
    assert "pool: 0 instance(s): none" in text and "(terminated)" in text
    assert "0 committed (started, not yet ended)" in text

    assert main(["status", "--config", str(config), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["daemon"] == "down" and report["workflow_finished"] is True
    (workflow,) = report["workflows"]
    assert (workflow["name"], workflow["state"], workflow["done"], workflow["tasks"]) == (
        "montage-chameleon-2mass-01d-001",
        "finished",
        103,
        103,
    )
    assert report["pool"] == [] and report["tasks"]["running"] == 0
    assert report["cost"]["committed_units"] == 0 and report["cost"]["spent_units"] == report["cost_units"] >= 1
    assert all(e["lifecycle"] == "terminated" for e in report["ended_instances"])

    last = json.loads((tmp_path / "decisions.jsonl").read_text().splitlines()[-1])
    assert last["event"] == "shutdown" and last["finished"] is True and last["reason"] == "the workflow finished"
    assert (last["done"], last["running"], last["pool"]) == (103, 0, 0)


def test_status_while_running_shows_lifecycle_last_decision_in_words_and_committed_money(tmp_path):
    config = emulated_config(tmp_path)
    daemon = Daemon(load_settings(config), str(config), sleep=lambda s: None)
    for t in (0.0, 180.0, 360.0):
        daemon.runtime.sleep_until(t)
        daemon._iterate(t)
    snapshot = daemon.status_snapshot(360.0, daemon.last_record)
    assert snapshot.pool and all(i.lifecycle in ("booting", "joined", "draining") for i in snapshot.pool)
    assert snapshot.last_decision and snapshot.last_decision.words.startswith("pool ")
    cost = snapshot.cost
    assert cost and cost.committed_units == len(snapshot.pool)  # each live instance is inside one started unit
    assert cost.spent_units + cost.committed_units == cost.total_units == snapshot.cost_units
    assert snapshot.workflows and snapshot.workflows[0].state == "running"
    assert snapshot.tasks and 0 < snapshot.tasks.done < 103
    daemon._shutdown()


def test_the_submit_host_follows_workflows_by_the_names_inspect_gives(tmp_path):
    root = tmp_path / "submit"
    montage = _live(root, "run1", bundled_trace_path(), "montage")
    sra = _live(root, "run2", DATA / "srasearch-chameleon-30a-001.json", "sra")
    montage.advance_to(20.0)
    sra.advance_to(20.0)
    settings = Settings(
        site=SiteSettings(kind="condor", submit_root=str(root)),
        cloud=CloudSettings(kind="ec2"),
        condor=CondorSettings(control="off", settle_s=0.0),
        steering=SteeringConfig(min_instances=0),
        safety=SafetyConfig(),
    )
    store = StateStore(tmp_path / "state.sqlite")
    clock = {"t": EPOCH + 20.0}
    runtime = SubmitHostRuntime(settings, store, Journal(), driver=FakeDriver(), clock=lambda: clock["t"])
    runtime.refresh()
    runtime.loop.iterate(clock["t"])
    followed = {w["name"]: w for w in runtime.workflows()}
    names = {inspect_submit_dir(root / "run1").workflow, inspect_submit_dir(root / "run2").workflow}
    assert set(followed) == names == {"montage-0", "sra-0"}
    assert followed["montage-0"]["submit_dir"] == str(root / "run1") and followed["montage-0"]["state"] == "running"
    assert followed["montage-0"]["done"] == montage.site.n_done and followed["montage-0"]["tasks"] == 103
    assert {s.name.split("/")[0] for s in runtime.loop.state.workflow.stages} == names  # stages carry them too

    montage.run()
    clock["t"] = EPOCH + montage.site.last_finish + 1.0
    runtime.refresh()
    done = {w["name"]: w for w in runtime.workflows()}
    assert done["montage-0"]["state"] == "finished" and done["montage-0"]["done"] == 103
    assert done["montage-0"]["finished_at"] == clock["t"] and done["sra-0"]["state"] == "running"
    store.close()


@pytest.mark.slow
def test_a_dry_run_on_a_submit_host_shows_workflows_pool_and_money(tmp_path, capsys):
    root = tmp_path / "submit"
    live = _live(root, "run1", bundled_trace_path(), "montage", epoch=time.time() - 30.0)
    live.advance_to(30.0)
    config = _condor(tmp_path, root)
    assert main(["run", "--config", str(config), "--max-iterations", "1"]) == 0
    assert main(["hold", "2", "--config", str(config)]) == 0  # the next start brings the pool to 2
    assert main(["run", "--config", str(config), "--max-iterations", "1"]) == 0
    capsys.readouterr()
    assert main(["status", "--config", str(config)]) == 0
    text = capsys.readouterr().out
    assert "DRY-RUN: no cloud call is made" in text and "mode: held at 2 instance(s) by the operator" in text
    assert "montage-0" in text and f"{root / 'run1'}" in text and "running" in text
    assert "dry-run-0001         booting" in text and "dry-run-0002         booting" in text
    assert "0 spent (ended), 2 committed (started, not yet ended)" in text
    # A stage not started shows no prediction, or (the default policy, issue 12) a prior: never a made-up 0 s.
    no_prediction = "not started: no prediction yet" in text
    assert (no_prediction or "(policy 6)" in text or "(policy 7)" in text) and "predicted     0.0 s" not in text


# -- item 4 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["missing", "a file"])
def test_a_missing_or_wrong_submit_root_is_refused_by_check_config_and_run(tmp_path, capsys, kind):
    root = tmp_path / "nowhere"
    if kind == "a file":
        root.write_text("not a directory")
    config = _condor(tmp_path, root)
    assert main(["check-config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "site.submit_root" in err and str(root) in err
    assert ("does not exist" if kind == "missing" else "is not a directory") in err
    assert main(["run", "--config", str(config), "--max-iterations", "1"]) == 2
    assert "site.submit_root" in capsys.readouterr().err
    assert not (tmp_path / "decisions.jsonl").exists()


def test_a_missing_trace_is_refused_by_check_config(tmp_path, capsys):
    config = emulated_config(tmp_path, speedup=10)
    config.write_text(config.read_text().replace("speedup: 10}", f"speedup: 10, trace: {tmp_path / 'x.json'}}}"))
    assert main(["check-config", str(config)]) == 2
    assert "site.trace" in capsys.readouterr().err


def test_check_paths_names_the_file(tmp_path):
    from wire_daemon.runtime.settings import check_paths

    with pytest.raises(ConfigError, match=r"condor.yaml: site.submit_root '.*nowhere' does not exist"):
        check_paths(load_settings(_condor(tmp_path, tmp_path / "nowhere")))
