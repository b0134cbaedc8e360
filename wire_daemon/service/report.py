"""Timeline report (PNG) of a decisions log: pool, tasks, predicted load and cost.

A decisions-log record is one JSON object per MAPE iteration
(``DecisionRecord.to_json()``, plus an optional cumulative ``cost_units``).
Each record describes the interval that starts at its ``time`` and holds until
the next record, so every series is drawn as a post-step line; the last step is
extended by one interval (the median spacing) so it stays visible.

``time`` is seconds: from the run's start in a replay or on the emulated
site (virtual time), or Unix time for a daemon on a real submit host. The
time axis shows wall-clock UTC times for the latter, and virtual time since
the run started for the former, labelled as such. The operator's commands
(pause, hold, ...) are drawn as vertical lines; the shutdown record ends the
series.

Bad input gets one line naming the file: a log with no decision record, an
output that is not a ``.png``, a place that cannot be written.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from wire_daemon.core.errors import ConfigError, InputError
from wire_daemon.core.extras import require
from wire_daemon.service.wording import is_virtual

log = logging.getLogger(__name__)

FIGSIZE_IN = (12.0, 9.0)
DPI = 100  # with FIGSIZE_IN: a 1200 x 900 pixel image
_MAX_LABELLED_CHANGES = 40  # past this many launches (or releases), markers only
_COLORS = {
    "pool": "#1f77b4",
    "target": "#ff7f0e",
    "running": "#2ca02c",
    "idle": "#d62728",
    "upcoming": "#9467bd",
    "cost": "#8c564b",
    "launch": "#17becf",
    "release": "#e377c2",
}


# -- reading ---------------------------------------------------------------------------------


def load_decisions(path: str | Path, rotated: bool = False) -> list[dict]:
    """Records of a JSON-lines decisions log, oldest first.

    With ``rotated``, the siblings ``PATH.N`` ... ``PATH.2``, ``PATH.1`` are read
    first (the highest number is the oldest, as logging's rotating handler
    names them). A line that is not a JSON object with a numeric ``time`` is
    skipped with one warning naming the file and line.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(str(path), "no such decisions log")
    records: list[dict] = []
    for part in (_rotated_siblings(path) if rotated else []) + [path]:
        records.extend(_read_jsonl(part))
    return records


def _rotated_siblings(path: Path) -> list[Path]:
    pattern = re.compile(re.escape(path.name) + r"\.(\d+)$")
    numbered = [(int(m.group(1)), p) for p in path.parent.iterdir() if (m := pattern.match(p.name))]
    return [p for _, p in sorted(numbered, reverse=True)]


def _read_jsonl(path: Path) -> list[dict]:
    records = []
    with path.open(encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            record, problem = _parse_line(line)
            if problem:
                log.warning("%s:%d: skipped decisions-log line: %s", path, lineno, problem)
            else:
                records.append(record)
    return records


def _parse_line(line: str) -> tuple[dict, str]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        return {}, f"not JSON ({exc.msg})"
    if not isinstance(record, dict):
        return {}, "not a JSON object"
    if not isinstance(record.get("time"), (int, float)) or isinstance(record.get("time"), bool):
        return {}, "no numeric 'time'"
    return record, ""


# -- series ------------------------------------------------------------------------------------


def _series(records: list[dict], key: str) -> np.ndarray:
    """One numeric column; a missing or non-numeric value becomes NaN (a gap in the line)."""
    return np.array([_number(r.get(key)) for r in records], dtype=float)


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return float("nan")
    return float(value)


def _peak(records: list[dict], key: str) -> float:
    values = _series(records, key)
    values = values[~np.isnan(values)]
    return float(values.max()) if len(values) else 0.0


def check_output(out: Path) -> Path:
    """``--out``: a .png file name (the report is a PNG image)."""
    if out.suffix.lower() != ".png":
        raise ConfigError(f"--out {out}: the report is a PNG image; give a file name ending in .png")
    return out


class _Axis:
    """Where each record's time goes on the x axis, and how the axis reads."""

    def __init__(self, times: np.ndarray, virtual: bool) -> None:
        self.virtual = virtual
        self.t0 = float(times[0])
        span = float(times[-1] - times[0]) if len(times) else 0.0
        if virtual:
            self.scale, unit = (1.0, "s") if span <= 600 else (60.0, "min") if span <= 10 * 3600 else (3600.0, "h")
            self.label = f"virtual time since the run started ({unit}; the emulated site's clock, not the wall clock)"
        else:
            self.scale = 1.0 / 86400.0  # matplotlib dates: days
            start = datetime.fromtimestamp(self.t0, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
            self.label = f"time (UTC; first decision {start})"

    def __call__(self, t: np.ndarray | float) -> np.ndarray:
        t = np.asarray(t, dtype=float)
        if self.virtual:
            return (t - self.t0) / self.scale
        import matplotlib.dates as mdates

        return np.asarray(t / 86400.0 + mdates.date2num(datetime(1970, 1, 1, tzinfo=UTC)))

    def style(self, ax) -> None:
        if self.virtual:
            ax.set_xlim(left=0)
            return
        import matplotlib.dates as mdates

        locator = mdates.AutoDateLocator(tz=UTC)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=UTC))


def _extended(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Append one more step so that the last value of a post-step line is drawn."""
    one_minute_in_days = 1.0 / 1440.0  # matplotlib dates are days
    step = float(np.median(np.diff(x))) if len(x) > 1 else (one_minute_in_days if x[0] > 1e4 else 1.0)
    return np.append(x, x[-1] + step), np.append(y, y[-1])


# -- drawing ----------------------------------------------------------------------------------


def render_report(decisions: Iterable[dict], out_png: Path, title: str, source: Path | str | None = None) -> Path:
    """Draw the timeline of ``decisions`` into ``out_png`` (FIGSIZE_IN at DPI) and return its path.

    ``source`` names the log in the one-line error a log without decisions gets.
    """
    out_png = check_output(Path(out_png))
    timed = sorted((r for r in decisions if isinstance(r.get("time"), (int, float))), key=lambda r: r["time"])
    records = [r for r in timed if r.get("event") is None]
    if not records:
        raise InputError(
            str(source or "the decisions"),
            "no decision record to draw (not a decisions log of wire-daemon run or replay --decisions-out?)",
        )
    controls = [r for r in timed if r.get("event") == "control"]
    matplotlib = require("matplotlib", "plots", "wire-daemon report")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    axis = _Axis(_series(records, "time"), is_virtual(records[0]))
    x, xlabel = axis(_series(records, "time")), axis.label
    has_cost = any(isinstance(r.get("cost_units"), (int, float)) for r in records)
    has_money = any(isinstance(r.get("cost_money"), (int, float)) for r in records)
    panels = 2 + has_cost + has_money
    fig, axes = plt.subplots(
        panels,
        1,
        sharex=True,
        figsize=FIGSIZE_IN,
        dpi=DPI,
        gridspec_kw={"height_ratios": [1, 1, *([0.7] * (panels - 2))]},
    )
    try:
        _draw_pool(axes[0], x, records)
        _draw_tasks(axes[1], x, records)
        if has_cost:
            _draw_cost(axes[2], x, records)
        if has_money:
            _draw_money(axes[-1], x, records)
        _draw_controls(axes, axis, controls)
        _finish(fig, axes, xlabel, title, _subtitle(records), axis)
        try:
            out_png.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(out_png, dpi=DPI)
        except OSError as exc:
            raise InputError(str(out_png), f"cannot write the report ({exc.strerror or exc})") from None
    finally:
        plt.close(fig)
    return out_png


def _draw_controls(axes, axis: _Axis, controls: list[dict]) -> None:
    """The operator's commands, as dotted vertical lines with the command's name."""
    for r in controls:
        xi = float(axis(r["time"]))
        label = str(r.get("command", "operator")) + (f" {r['count']}" if r.get("command") == "hold" else "")
        for ax in axes:
            ax.axvline(xi, color="#555555", linestyle=":", linewidth=1.2)
        axes[0].annotate(label, (xi, 1.0), xycoords=("data", "axes fraction"), rotation=90, va="top", fontsize=8)


def _draw_pool(ax, x: np.ndarray, records: list[dict]) -> None:
    for key, label, style in (("pool", "pool size (instances)", "-"), ("target", "target pool size", "--")):
        xs, ys = _extended(x, _series(records, key))
        ax.plot(xs, ys, style, drawstyle="steps-post", color=_COLORS[key], linewidth=2.2, label=label)
    _draw_changes(ax, x, records)
    ax.set_ylabel("instances")
    ax.set_title("Pool", loc="left", fontsize=11, fontweight="bold")
    _integer_y(ax)


def _draw_changes(ax, x: np.ndarray, records: list[dict]) -> None:
    """Markers where instances were launched / released, at the resulting target."""
    for key, marker, label in (("launched", "^", "launch"), ("released", "v", "release")):
        hits = [(xi, _number(r.get("target")), len(r.get(key) or [])) for xi, r in zip(x, records) if r.get(key)]
        if not hits:
            continue
        xs, ys, _ = zip(*hits)
        labelled = len(hits) <= _MAX_LABELLED_CHANGES
        ax.scatter(
            xs,
            ys,
            marker=marker,
            s=90 if labelled else 30,
            color=_COLORS[label],
            zorder=5,
            edgecolor="black",
            linewidth=0.6,
            label=f"{label} (count beside marker)" if labelled else label,
        )
        for xi, yi, n in hits if labelled else ():
            ax.annotate(
                str(n),
                (xi, yi),
                textcoords="offset points",
                xytext=(7, 4 if key == "launched" else -12),
                fontsize=9,
                color="black",
            )


def _draw_tasks(ax, x: np.ndarray, records: list[dict]) -> None:
    series = (
        ("running", "running tasks (busy slots)", "-"),
        ("idle", "idle tasks (queued)", "-"),
        ("upcoming_tasks", "predicted upcoming load (tasks)", ":"),
    )
    for key, label, style in series:
        xs, ys = _extended(x, _series(records, key))
        color = _COLORS["upcoming" if key == "upcoming_tasks" else key]
        ax.plot(xs, ys, style, drawstyle="steps-post", color=color, linewidth=2.2, label=label)
    ax.set_title("Tasks", loc="left", fontsize=11, fontweight="bold")
    if _queues_dwarf_running(records):
        ax.set_yscale("symlog", linthresh=10)  # keep a few running tasks visible under thousands queued
        ax.set_ylim(bottom=0)
        ax.set_ylabel("tasks (log scale above 10)")
    else:
        ax.set_ylabel("tasks")
        _integer_y(ax)


def _queues_dwarf_running(records: list[dict]) -> bool:
    top = max(_peak(records, k) for k in ("idle", "upcoming_tasks", "running"))
    running = _peak(records, "running")
    return bool(top >= 100 and top > 20 * max(running, 1.0))


def _draw_cost(ax, x: np.ndarray, records: list[dict]) -> None:
    xs, ys = _extended(x, _series(records, "cost_units"))
    ax.plot(
        xs,
        ys,
        "-",
        drawstyle="steps-post",
        color=_COLORS["cost"],
        linewidth=2.2,
        label="cumulative cost (charging units)",
    )
    ax.set_ylabel("charging units")
    ax.set_title("Cost", loc="left", fontsize=11, fontweight="bold")
    _integer_y(ax)


def _draw_money(ax, x: np.ndarray, records: list[dict]) -> None:
    """The bill at the configured prices (spent and committed), as the daemon logged it at each decision."""
    xs, ys = _extended(x, _series(records, "cost_money"))
    ax.plot(xs, ys, "-", drawstyle="steps-post", color=_COLORS["cost"], linewidth=2.2, label="money paid so far")
    ax.set_ylabel("money")
    ax.set_title("Money", loc="left", fontsize=11, fontweight="bold")
    low, high = ax.get_ylim()
    ax.set_ylim(min(0.0, low), max(high * 1.1, 0.01))


def _integer_y(ax) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    low, high = ax.get_ylim()
    ax.set_ylim(min(0.0, low), max(high * 1.1, 1.0))


def _finish(fig, axes, xlabel: str, title: str, subtitle: str, axis: _Axis) -> None:
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False)
        ax.tick_params(labelsize=10)
    axes[-1].set_xlabel(xlabel, fontsize=11)
    axis.style(axes[-1])
    fig.suptitle(title, fontsize=15, fontweight="bold", y=0.985)
    fig.text(0.5, 0.935, subtitle, ha="center", fontsize=11, color="#444444")
    fig.subplots_adjust(left=0.07, right=0.76, top=0.9, bottom=0.08, hspace=0.3)


def _subtitle(records: list[dict]) -> str:
    policies = sorted({str(r["policy"]) for r in records if r.get("policy")})
    cost = [r["cost_units"] for r in records if isinstance(r.get("cost_units"), (int, float))]
    facts = [f"{len(records)} decisions"]
    if policies:
        facts.insert(0, "policy " + ", ".join(policies))
    if cost:
        facts.append(f"cost {cost[-1]:g} units")
    return " · ".join(facts)
