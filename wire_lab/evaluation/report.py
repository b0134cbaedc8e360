"""Tables, plots and the summary page of an evaluation (``wire_lab.evaluation.runs``).

Everything here is computed from the runs: medians over traces and seeds per
setting, runtime scale, charging unit, interval group and policy; per-trace
cells; WIRE's prediction-error quantiles; the decision overhead and the
memory peaks. The hand-written reading of the numbers lives in ``notes.md``
beside the outputs and is included in the summary as is.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from wire_daemon.runtime.policies import POLICY_NAMES
from wire_daemon.runtime.replay import MEDIUM_STAGE_S, SHORT_STAGE_S, STAGE_CLASSES
from wire_lab.evaluation.runs import GROUPS, SETTINGS, MemoryRun, Run

PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99)
COLORS = {
    "wire": "#1f77b4",
    "full-site": "#7f7f7f",
    "pure-reactive": "#d62728",
    "reactive-conserving": "#ff7f0e",
    "pfa": "#2ca02c",
    "oracle": "#9467bd",
    "target-slowdown": "#17becf",
}


@dataclass(frozen=True)
class ReportMeta:
    command: str
    date: str
    version: str  # the checkout's commit
    machine: str
    wall_s: float
    cpu_s: float
    reused_jobs: int
    jobs: int
    grid: str  # one line: traces, settings, units, scales, seeds


# --- small statistics ------------------------------------------------------------


def median(values: Iterable[float]) -> float:
    data = [v for v in values if v is not None and not math.isnan(v)]
    return float(np.median(data)) if data else float("nan")


def _fmt(x: float, digits: int = 2) -> str:
    return "-" if math.isnan(x) else f"{x:.{digits}f}"


def _ok(runs: Iterable[Run]) -> list[Run]:
    return [r for r in runs if r.ok]


def _keys(runs: Sequence[Run], attr: str) -> list:
    return sorted({getattr(r, attr) for r in runs})


def _settings_in(runs: Sequence[Run]) -> list[str]:
    present = {r.setting for r in runs}
    return [s for s in SETTINGS if s in present]


def _policies_in(runs: Sequence[Run]) -> list[str]:
    present = {r.policy for r in runs}
    return [p for p in POLICY_NAMES if p in present]


# --- tables: per setting and scale ----------------------------------------------------


def summary_tables(runs: Sequence[Run]) -> list[str]:
    """Per setting and scale: median cost ratio / relative time / utilization per group, policy and u."""
    lines: list[str] = []
    policies = _policies_in(runs)
    for s in _settings_in(runs):
        mine = [r for r in runs if r.setting == s]
        for k in _keys(mine, "time_scale"):
            at_k = [r for r in mine if r.time_scale == k]
            units = _keys(at_k, "u_min")
            lines += [f"### {SETTINGS[s].label}; runtime scale K = {k:g}", ""]
            lines += ["| group | policy | " + " | ".join(f"u = {u:g} min" for u in units) + " |"]
            lines += ["|---|---|" + "---|" * len(units)]
            for group in (*GROUPS, "all"):
                in_group = [r for r in at_k if group in ("all", r.group)]
                if not in_group:
                    continue
                label = f"**{group}** ({_count_runs(in_group)})"
                for p in policies:
                    cells = [_cell([r for r in in_group if r.policy == p and r.u_min == u]) for u in units]
                    lines.append(f"| {label} | {p} | " + " | ".join(cells) + " |")
                    label = ""
            lines.append("")
    return lines


def _count_runs(runs: Sequence[Run]) -> str:
    per_u = defaultdict(set)
    for r in runs:
        per_u[r.u_min].add((r.trace, r.seed))
    counts = sorted({len(v) for v in per_u.values()})
    return "n = " + "/".join(str(c) for c in counts)


def _cell(runs: Sequence[Run]) -> str:
    ok = _ok(runs)
    if not runs:
        return ""
    text = (
        f"{_fmt(median(r.cost_ratio for r in ok))} / {_fmt(median(r.relative_time for r in ok))} "
        f"/ {_fmt(median(r.utilization for r in ok))}"
    )
    late = len(runs) - len(ok)
    return text + (f" ({late} timeout)" if late else "")


def per_trace_tables(runs: Sequence[Run]) -> list[str]:
    """Per setting, scale and u: one row per trace, cost (units) / relative time per policy (medians over seeds)."""
    lines: list[str] = []
    policies = _policies_in(runs)
    for s in _settings_in(runs):
        for k in _keys([r for r in runs if r.setting == s], "time_scale"):
            for u in _keys([r for r in runs if r.setting == s and r.time_scale == k], "u_min"):
                mine = [r for r in runs if (r.setting, r.time_scale, r.u_min) == (s, k, u)]
                lines += [f"## {SETTINGS[s].label}; K = {k:g}; u = {u:g} min", ""]
                lines += ["| trace | tasks | full-site makespan (s) | intervals | " + " | ".join(policies) + " |"]
                lines += ["|---|---|---|---|" + "---|" * len(policies)]
                by_trace = defaultdict(list)
                for r in mine:
                    by_trace[r.trace].append(r)
                for trace, rs in sorted(by_trace.items(), key=lambda kv: (median(r.intervals for r in kv[1]), kv[0])):
                    cells = [_trace_cell([r for r in rs if r.policy == p]) for p in policies]
                    lines.append(
                        f"| {trace} | {rs[0].tasks} | {median(r.fullsite_makespan_s for r in rs):.1f} | "
                        f"{median(r.intervals for r in rs):.2f} | " + " | ".join(cells) + " |"
                    )
                lines.append("")
    return lines


def _trace_cell(runs: Sequence[Run]) -> str:
    ok = _ok(runs)
    if not ok:
        return "timeout" if runs else ""
    return f"{median(r.cost_units for r in ok):g} / {median(r.relative_time for r in ok):.2f}"


# --- overhead and memory ----------------------------------------------------------------


def overhead_table(runs: Sequence[Run]) -> list[str]:
    """Decision time per iteration and as a share of the aggregate task time, per setting, scale and policy."""
    policies = [p for p in _policies_in(runs) if p != "full-site"]
    lines = [
        "| setting | K | policy | mean decision (ms) | max decision (ms) "
        "| median share of task time (%) | max share (%) |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in _settings_in(runs):
        for k in _keys([r for r in runs if r.setting == s], "time_scale"):
            for p in policies:
                ok = [
                    r
                    for r in _ok(runs)
                    if (r.setting, r.time_scale, r.policy) == (s, k, p) and r.decision_share_pct is not None
                ]
                if not ok:
                    continue
                mean_ms = 1e3 * sum(r.decision_total_s for r in ok) / max(sum(r.iterations for r in ok), 1)
                shares = [r.decision_share_pct for r in ok]
                lines.append(
                    f"| {s} | {k:g} | {p} | {mean_ms:.2f} | {max(r.decision_max_ms for r in ok):.1f} | "
                    f"{median(shares):.2g} | {max(shares):.2g} |"
                )
    return lines + [""]


def memory_table(memory: Sequence[MemoryRun]) -> list[str]:
    if not memory:
        return ["(no memory measurement in this run)", ""]
    policies = [p for p in POLICY_NAMES if any(m.policy == p for m in memory)]
    by_trace: dict[str, dict[str, MemoryRun]] = defaultdict(dict)
    for m in memory:
        by_trace[m.trace][m.policy] = m
    lines = [
        "| trace | tasks | workflow model (MB) | peak while loading (MB) | "
        + " | ".join(f"replay peak, {p} (MB)" for p in policies)
        + " |",
        "|---|---|---|---|" + "---|" * len(policies),
    ]
    for trace, runs in sorted(by_trace.items(), key=lambda kv: (next(iter(kv[1].values())).tasks, kv[0])):
        first = next(iter(runs.values()))
        cells = " | ".join(f"{runs[p].replay_peak_mb:.2f}" if p in runs else "-" for p in policies)
        lines.append(f"| {trace} | {first.tasks} | {first.model_mb:.2f} | {first.load_peak_mb:.1f} | {cells} |")
    return lines + [""]


# --- prediction error -----------------------------------------------------------------------


def error_rows(pooled: dict[tuple[str, float, str], np.ndarray]) -> list[dict]:
    """Quantiles of WIRE's per-task prediction error, per setting, scale and stage class."""
    rows = []
    units = dict(STAGE_CLASSES)
    for (s, k, cls), err in sorted(
        pooled.items(), key=lambda kv: (list(SETTINGS).index(kv[0][0]), kv[0][1], _class_order(kv[0][2]))
    ):
        row = {"setting": s, "time_scale": k, "stage_class": cls, "unit": units[cls], "tasks": int(err.size)}
        if err.size:
            row["mean_abs"] = round(float(np.mean(np.abs(err))), 4)
            row |= {f"p{q}": round(float(np.percentile(err, q)), 4) for q in PERCENTILES}
            row["p90_abs"] = round(float(np.percentile(np.abs(err), 90)), 4)
        rows.append(row)
    return rows


def _class_order(cls: str) -> int:
    return [c for c, _ in STAGE_CLASSES].index(cls)


def write_error_csv(rows: Sequence[dict], path: Path) -> None:
    names = [
        "setting",
        "time_scale",
        "stage_class",
        "unit",
        "tasks",
        "mean_abs",
        *(f"p{q}" for q in PERCENTILES),
        "p90_abs",
    ]
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=names, restval="")
        writer.writeheader()
        writer.writerows(rows)


def error_table(rows: Sequence[dict]) -> list[str]:
    lines = [
        "| setting | K | stage class | unit | tasks | median | mean abs | 90th pct abs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["tasks"]:
            lines.append(
                f"| {r['setting']} | {r['time_scale']:g} | {r['stage_class']} | {r['unit']} | {r['tasks']} | "
                f"{r['p50']:.3f} | {r['mean_abs']:.3f} | {r['p90_abs']:.3f} |"
            )
        else:
            lines.append(f"| {r['setting']} | {r['time_scale']:g} | {r['stage_class']} | {r['unit']} | 0 | - | - | - |")
    return lines + [""]


# --- headline ---------------------------------------------------------------------------------


def headline_table(runs: Sequence[Run]) -> list[str]:
    """Per setting and scale: medians of WIRE and PFA against full-site, and how often WIRE is cheaper."""
    lines = [
        "| setting | K | runs | WIRE cost / full-site | WIRE rel. time | WIRE cheaper than full-site | "
        "PFA cost / full-site | PFA rel. time | WIRE cheaper than PFA | WIRE rel. time, >= 10 intervals |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in _settings_in(runs):
        for k in _keys([r for r in runs if r.setting == s], "time_scale"):
            jobs = _by_job([r for r in runs if r.setting == s and r.time_scale == k])
            pairs = [(j["wire"], j["full-site"], j.get("pfa")) for j in jobs.values() if "wire" in j and j["wire"].ok]
            if not pairs:
                continue
            wire = [w for w, _, _ in pairs]
            pfa = [p for _, _, p in pairs if p is not None and p.ok]
            cheaper = sum(w.cost_units < f.cost_units for w, f, _ in pairs)
            vs_pfa = sum(w.cost_units < p.cost_units for w, _, p in pairs if p is not None and p.ok)
            long = [w.relative_time for w in wire if w.group == GROUPS[2]]
            lines.append(
                f"| {s} | {k:g} | {len(pairs)} | {_fmt(median(w.cost_ratio for w in wire))} | "
                f"{_fmt(median(w.relative_time for w in wire))} | {cheaper} of {len(pairs)} | "
                f"{_fmt(median(p.cost_ratio for p in pfa))} | {_fmt(median(p.relative_time for p in pfa))} | "
                f"{vs_pfa} of {len(pfa)} | {_fmt(median(long))} ({len(long)} runs) |"
            )
    return lines + [""]


def _by_job(runs: Iterable[Run]) -> dict[tuple, dict[str, Run]]:
    out: dict[tuple, dict[str, Run]] = defaultdict(dict)
    for r in runs:
        out[(r.setting, r.trace, r.time_scale, r.u_min, r.seed)][r.policy] = r
    return out


# --- plots --------------------------------------------------------------------------------------


def _pyplot():
    import matplotlib  # here, not at the top: the runs need no plotting

    matplotlib.use("Agg")  # files only: the evaluation runs headless
    import matplotlib.pyplot as plt

    return plt


def plot_error_cdf(pooled: dict[tuple[str, float, str], np.ndarray], path: Path, setting: str = "paper") -> None:
    """Fig. 4: CDF of WIRE's per-task prediction error by stage class, one curve per runtime scale."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 4), dpi=100)
    titles = {
        "short": f"short stages (mean <= {SHORT_STAGE_S:g} s): error (s)",
        "medium": f"medium stages (<= {MEDIUM_STAGE_S:g} s): error (s)",
        "long": "long stages: relative error",
    }
    scales = sorted({k for s, k, _ in pooled if s == setting})
    for ax, (cls, _) in zip(axes, STAGE_CLASSES):
        for k in scales:
            err = np.sort(pooled.get((setting, k, cls), np.zeros(0)))
            if err.size:
                ax.step(err, np.arange(1, err.size + 1) / err.size, where="post", label=f"K = {k:g} ({err.size} tasks)")
        if not ax.get_legend_handles_labels()[0]:
            ax.text(0.5, 0.5, "no measured task in this class", ha="center", va="center", transform=ax.transAxes)
        ax.axvline(0.0, color="black", linewidth=0.5)
        ax.set_title(titles[cls], fontsize=10)
        ax.set_ylabel("fraction of tasks")
        ax.set_ylim(0, 1)
        _clip_x(ax, [pooled.get((setting, k, cls), np.zeros(0)) for k in scales])
        if cls == "long":  # relative errors: a few tasks overrun their prediction many times over
            ax.set_xscale("symlog", linthresh=1.0)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(
        f"WIRE prediction error per task (predicted - measured execution time), {SETTINGS[setting].label}", fontsize=11
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _clip_x(ax, samples: Sequence[np.ndarray]) -> None:
    """Show the 1st to 99th percentile: a few extreme tasks would squash every curve."""
    data = np.concatenate([s for s in samples if s.size]) if any(s.size for s in samples) else np.zeros(0)
    if data.size:
        lo, hi = np.percentile(data, [1, 99])
        pad = 0.05 * max(hi - lo, 1e-3)
        ax.set_xlim(lo - pad, hi + pad)


def plot_measure(runs: Sequence[Run], measure: str, path: Path, ylabel: str, title: str) -> None:
    """Fig. 5 / Fig. 6: box plots over traces and seeds, per policy, unit and setting; one panel per scale."""
    plt = _pyplot()
    scales = _keys(runs, "time_scale")
    policies = _policies_in(runs)
    columns = [(s, u) for s in _settings_in(runs) for u in _keys([r for r in runs if r.setting == s], "u_min")]
    fig, axes = plt.subplots(1, len(scales), figsize=(5.5 * len(scales), 4.8), dpi=100, squeeze=False)
    width = 0.8 / max(len(policies), 1)
    for ax, k in zip(axes[0], scales):
        for i, p in enumerate(policies):
            data, positions = [], []
            for c, (s, u) in enumerate(columns):
                values = [
                    getattr(r, measure)
                    for r in _ok(runs)
                    if (r.setting, r.time_scale, r.u_min, r.policy) == (s, k, u, p)
                ]
                if values:
                    data.append(values)
                    positions.append(c + (i - (len(policies) - 1) / 2) * width)
            if not data:
                continue
            box = ax.boxplot(
                data,
                positions=positions,
                widths=width * 0.9,
                patch_artist=True,
                manage_ticks=False,
                flierprops={"markersize": 2},
                medianprops={"color": "black"},
            )
            for patch in box["boxes"]:
                patch.set_facecolor(COLORS.get(p, "white"))
            box["boxes"][0].set_label(p)
        ax.axhline(1.0, color="black", linewidth=0.6)
        ax.set_yscale("log")
        ax.set_xticks(np.arange(len(columns)))
        ax.set_xticklabels([f"{s}\nu={u:g} min" for s, u in columns], fontsize=8)
        ax.set_xlim(-0.5, len(columns) - 0.5)
        ax.set_title(f"runtime scale K = {k:g}", fontsize=10)
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3, which="both")
    axes[0][0].legend(fontsize=8, loc="best")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_groups(runs: Sequence[Run], path: Path, setting: str = "paper") -> None:
    """Cost ratio against relative time per interval group: where each policy lands (medians per trace and u)."""
    plt = _pyplot()
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    mine = [r for r in _ok(runs) if r.setting == setting and r.policy != "full-site"]
    groups = [g for g in GROUPS if any(r.group == g for r in mine)]
    if not groups:
        return
    fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 4.5), dpi=100, squeeze=False)
    for ax, g in zip(axes[0], groups):
        for p in _policies_in(mine):
            pts = [r for r in mine if r.group == g and r.policy == p]
            ax.scatter(
                [r.relative_time for r in pts],
                [r.cost_ratio for r in pts],
                s=10,
                alpha=0.5,
                color=COLORS.get(p),
                label=p,
            )
        ax.axhline(1.0, color="black", linewidth=0.5)
        ax.axvline(1.0, color="black", linewidth=0.5)
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(ScalarFormatter())
            axis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("relative execution time (full-site = 1)")
        ax.set_ylabel("cost / full-site cost")
        ax.set_title(f"{g} ({SETTINGS[setting].label.split(':')[0]})", fontsize=10)
        ax.grid(alpha=0.3, which="both")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# --- documents ------------------------------------------------------------------------------------


def write_md(path: Path, parts: Iterable[list[str]]) -> None:
    path.write_text("\n".join(line for part in parts for line in part).rstrip("\n") + "\n")


def readme_md(meta: ReportMeta, runs: Sequence[Run], error_lines: list[str], notes: list[str]) -> list[str]:
    timeouts = sum(not r.ok for r in runs)
    return [
        "# Evaluation: the WIRE paper's experiments on real traces",
        "",
        f"Produced on {meta.date} (UTC), wire_daemon at {meta.version}, on {meta.machine}, by",
        "",
        "```",
        meta.command,
        "```",
        "",
        f"Grid: {meta.grid}. {len(runs)} policy runs in {meta.jobs} jobs "
        f"({meta.reused_jobs} taken from the cache of an earlier, interrupted run of the same code); "
        f"{meta.wall_s:.0f} s wall time, {meta.cpu_s:.0f} s CPU in the replays; "
        f"{timeouts} run(s) hit the CPU-time limit.",
        "",
        "Every setting uses 12 instances x 4 slots, one instance up when the workflow is submitted, and the "
        "defaults of `wire_daemon.core.config` otherwise. *Cost ratio* is a policy's cost in charging units over "
        "the full-site cost of the same trace, setting, unit, scale and seed; *relative time* is its makespan "
        "over the full-site makespan; *utilization* is busy slot-seconds over paid slot-seconds. Runs are "
        "grouped by how many intervals the full-site makespan spans.",
        "",
        "Files:",
        "",
        "- `runs.csv`: every policy run (one row per trace x setting x u x K x seed x policy);",
        "- `tables.md`: medians per setting, scale, interval group, policy and u; decision overhead; memory;",
        "- `per_trace.md`: one row per trace for every setting, scale and u;",
        "- `prediction_errors.csv`: quantiles of WIRE's per-task prediction error (Fig. 4);",
        "- `fig4_prediction_error_cdf.png`, `fig5_cost.png`, `fig6_relative_time.png`, `groups_paper.png`.",
        "",
        "## Headline",
        "",
        *headline_table(runs),
        "## Prediction error (WIRE, paper setting)",
        "",
        *error_lines,
        "## Reading the numbers",
        "",
        *notes,
    ]


def tables_md(meta: ReportMeta, runs: Sequence[Run], memory: Sequence[MemoryRun]) -> list[str]:
    return [
        "# Evaluation tables",
        "",
        f"From `{meta.command}` on {meta.date}. Each cell: **median cost ratio / median relative time / "
        "median utilization** over the traces and seeds of the group (n = traces x seeds per unit). "
        "Cost ratio and relative time are against full-site on the same trace, unit, scale and seed.",
        "",
        "## Cost, time and utilization",
        "",
        *summary_tables(runs),
        "## Decision overhead",
        "",
        "Decision time (Analyze + Plan, measured in the replay) summed over a run, as a share of the aggregate "
        "task time (total slot occupancy of the workflow's tasks at that scale). Wall-clock measures: they vary "
        "with the machine's load.",
        "",
        *overhead_table(runs),
        "## Peak memory",
        "",
        "Python heap measured with tracemalloc, per trace: the workflow model kept after loading the trace, "
        "the peak while loading it (the parsed JSON document dominates and is freed), and the peak of one "
        "replay with the model already in memory, which holds the emulated world, the run state and the "
        "policy's own state and work. Full-site's policy keeps no state: its replay peak is the world's "
        "(with 12 instances from the start). Paper setting, u = 60 min, K = 1, seed 0; "
        "one warm-up replay per policy first.",
        "",
        *memory_table(memory),
    ]


def notes_md(path: Path) -> list[str]:
    if not path.exists():
        return ["(No hand-written notes yet: see the tables.)", ""]
    return path.read_text().rstrip("\n").splitlines() + [""]


def write_report(
    out: Path,
    meta: ReportMeta,
    runs: Sequence[Run],
    pooled: dict[tuple[str, float, str], np.ndarray],
    memory: Sequence[MemoryRun],
) -> None:
    """Every output but runs.csv (written by the caller): tables, per-trace tables, errors, plots, README."""
    errors = error_rows(pooled)
    write_error_csv(errors, out / "prediction_errors.csv")
    write_md(out / "tables.md", [tables_md(meta, runs, memory)])
    write_md(
        out / "per_trace.md",
        [
            [
                "# Per-trace results",
                "",
                f"From `{meta.command}` on {meta.date}. "
                "Each cell: **cost (charging units) / relative time**, medians over seeds.",
                "",
            ],
            per_trace_tables(runs),
        ],
    )
    plot_error_cdf(pooled, out / "fig4_prediction_error_cdf.png")
    plot_measure(
        runs,
        "cost_ratio",
        out / "fig5_cost.png",
        "cost / full-site cost",
        "Cost in charging units relative to full-site, over traces and seeds",
    )
    plot_measure(
        runs,
        "relative_time",
        out / "fig6_relative_time.png",
        "makespan / full-site makespan",
        "Relative execution time (makespan / full-site makespan), over traces and seeds",
    )
    plot_groups(runs, out / "groups_paper.png")
    paper_errors = [r for r in errors if r["setting"] == "paper"]
    write_md(out / "README.md", [readme_md(meta, runs, error_table(paper_errors), notes_md(out / "notes.md"))])


def library_version(repo: Path) -> str:
    """The checkout's commit, and whether wire_daemon/ differs from it (read-only git calls)."""
    import subprocess

    def git(*cmd: str) -> str:
        done = subprocess.run(["git", "-C", str(repo), *cmd], capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return "an unknown commit"
    dirty = git("status", "--porcelain", "--", "wire_daemon")
    return f"commit {commit}" + (" with uncommitted changes" if dirty else "")
