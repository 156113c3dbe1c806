"""The report page: learning curves (inline SVG), evaluation tables, the wall-time
breakdown, Agent-In-World's failure modes, and the rollout browser, for one or more runs
overlaid. One self-contained HTML file: no network, no external asset.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from html import escape
from typing import Any

from roleagent.report.assets import CSS, JS
from roleagent.report.data import RunData
from roleagent.report.svg import Series, line_chart, stacked_bars

#: Chart sections: a title and the keys (exact, or a prefix ending in "/" or "_") they take,
#: in order; a key goes to the first section that takes it, the rest to "Other metrics".
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "Success and return",
        (
            "train/success",
            "train/success_",
            "train/successes",
            "train/episodes",
            "train/return",
            "train/length",
            "train/valid_action_ratio",
            "train/accepted_action_ratio",
            "train/crashed",
        ),
    ),
    (
        "Advantages and state (anchor) groups",
        ("train/advantage_", "train/anchor_", "train/zero_variance_groups"),
    ),
    ("Prediction (World-In-Agent)", ("train/wia_",)),
    (
        "Policy update",
        ("update/kl", "update/approx_kl", "update/entropy", "update/clip_frac", "update/grad_norm", "update/"),
    ),
    ("Speed", ("speed/", "time/iteration_s")),
    ("Agent-In-World", ("aiw/",)),
    ("SEAL: weights and failure profile", ("seal/",)),
    ("Rollout reuse and environment", ("rollout/", "env_restarts", "score/")),
)

#: Top-level phases of an iteration, in ``time/*_s`` (``rollout_s`` is split into its parts).
ROLLOUT_PARTS = ("generate_s", "extension_s", "env_s")


def _takes(pattern: str, key: str) -> bool:
    return key.startswith(pattern) if pattern.endswith(("/", "_")) else key == pattern


def numeric_keys(runs: list[RunData]) -> list[str]:
    """Keys with a number in some iteration record, in first-seen order (``iteration`` out)."""
    keys: dict[str, None] = {}
    for run in runs:
        for record in run.train:
            for key, value in record.items():
                if key != "iteration" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    keys.setdefault(key)
    return list(keys)


def sectioned(keys: list[str]) -> list[tuple[str, list[str]]]:
    """``[(section title, keys)]`` for the curves (time/* other than the iteration's total
    are drawn in the wall-time section)."""
    left = [k for k in keys if not (k.startswith("time/") and k != "time/iteration_s")]
    out = []
    for title, patterns in SECTIONS:
        taken = [k for p in patterns for k in left if _takes(p, k)]
        taken = list(dict.fromkeys(taken))
        left = [k for k in left if k not in taken]
        if taken:
            out.append((title, taken))
    if left:
        out.append(("Other metrics", left))
    return out


def _curve(runs: list[RunData], key: str) -> str:
    series = [Series(run.name, [r["iteration"] for r in run.train], [r.get(key) for r in run.train]) for run in runs]
    return line_chart(key, series)


def eval_x(label: str, iterations: int) -> int | None:
    """Where an evaluation sits on the iteration axis: ``base`` (a warm-started run's
    model before SFT) → -1, ``before``/``sft`` → 0, ``iter5`` → 5, ``after`` → the run's
    iterations; other labels have no place (None)."""
    if label == "base":
        return -1
    if label in ("before", "sft"):
        return 0
    if label == "after":
        return iterations
    match = re.fullmatch(r"iter(\d+)", label)
    return int(match.group(1)) if match else None


def _eval_curves(runs: list[RunData]) -> str:
    splits = list(dict.fromkeys(str(r.get("split", "")) for run in runs for r in run.evals))
    charts = []
    for split in splits:
        series = []
        for run in runs:
            iterations = int(run.config.get("iterations", len(run.train)))
            points = [
                (x, r.get("eval/success"))
                for r in run.evals
                if str(r.get("split", "")) == split and (x := eval_x(str(r["eval"]), iterations)) is not None
            ]
            series.append(Series(run.name, [x for x, _ in points], [y for _, y in points]))
        charts.append(line_chart(f"eval/success ({split})", series))
    return "".join(charts)


def _eval_tables(runs: list[RunData]) -> str:
    """One table per run: a row per evaluation (label, split), the success per task type."""
    out = []
    for run in runs:
        if not run.evals:
            continue
        interval = ["eval/success_ci_low", "eval/success_ci_high"]
        types = dict.fromkeys(k for r in run.evals for k in r if k.startswith("eval/success_") and k not in interval)
        columns = ["eval/success", *interval, *types, "eval/return", "eval/length", "eval/crashed_episodes"]
        head = "".join(f"<th>{escape(c.removeprefix('eval/'))}</th>" for c in columns)
        rows = []
        for r in run.evals:
            cells = "".join(f'<td class="num">{_cell(r.get(c))}</td>' for c in columns)
            rows.append(f"<tr><td>{escape(str(r['eval']))}</td><td>{escape(str(r.get('split', '')))}</td>{cells}</tr>")
        out.append(
            f"<h3>{escape(run.name)}</h3><table><tr><th>evaluation</th><th>split</th>{head}</tr>{''.join(rows)}</table>"
        )
    return "".join(out) or '<p class="note">no evaluation records</p>'


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return "–" if value is None else escape(str(value))


def time_breakdown(run: RunData) -> dict[str, float]:
    """Mean seconds per iteration spent in each phase: the rollout's parts (generation,
    rollout extensions, environment, the rest of the rollout), advantages, update, each
    method's hook, and the rest of the iteration (dumps, bookkeeping)."""
    if not run.train:
        return {}

    def mean(key: str) -> float:
        values = [r[key] for r in run.train if isinstance(r.get(key), (int, float))]
        return sum(values) / len(values) if values else 0.0

    parts = {f"rollout: {p.removesuffix('_s')}": mean(f"time/{p}") for p in ROLLOUT_PARTS}
    parts["rollout: other"] = max(mean("time/rollout_s") - sum(parts.values()), 0.0)
    parts["advantages"] = mean("time/advantage_s")
    parts["update"] = mean("time/update_s")
    known = {"time/rollout_s", "time/advantage_s", "time/update_s", "time/iteration_s"} | {
        f"time/{p}" for p in ROLLOUT_PARTS
    }
    methods = sorted({k for r in run.train for k in r if k.startswith("time/") and k not in known})
    for key in methods:
        parts[f"method: {key.removeprefix('time/').removesuffix('_s')}"] = mean(key)
    top = sum(v for k, v in parts.items() if not k.startswith("rollout: ")) + mean("time/rollout_s")
    parts["other"] = max(mean("time/iteration_s") - top, 0.0)
    return parts


def _time_section(runs: list[RunData]) -> str:
    rows = [(run.name, time_breakdown(run)) for run in runs]
    chart = stacked_bars("mean seconds per iteration, by phase", rows)
    curves = "".join(_curve(runs, k) for k in numeric_keys(runs) if k.startswith("time/") and k != "time/iteration_s")
    return (chart or '<p class="note">no timings</p>') + f'<div class="charts">{curves}</div>'


def failure_mode_counts(run: RunData) -> dict[str, dict[int, int]]:
    """``{failure type: {iteration: failures recorded}}`` from Agent-In-World's memory."""
    out: dict[str, Counter] = {}
    for f in run.failures:
        out.setdefault(str(f["dominant_type"]), Counter())[int(f["iteration"])] += 1
    return {k: dict(v) for k, v in out.items()}


def _failure_section(runs: list[RunData]) -> str:
    charts = []
    for run in runs:
        counts = failure_mode_counts(run)
        if not counts:
            continue
        iterations = sorted({i for c in counts.values() for i in c})
        series = [Series(t, iterations, [float(c.get(i, 0)) for i in iterations]) for t, c in sorted(counts.items())]
        charts.append(line_chart(f"{run.name}: failures recorded per type", series, legend=True))
    if not charts:
        return '<p class="note">no failure memory (Agent-In-World off)</p>'
    return f'<div class="charts">{"".join(charts)}</div>'


def _overview(runs: list[RunData]) -> str:
    rows = []
    for run in runs:
        c = run.config
        methods = [m for m in ("wia", "aiw", "seal", "agent_r", "sft") if (c.get(m) or {}).get("enabled")]
        env = (c.get("env") or {}).get("name", "?")
        algo = (c.get("algo") or {}).get("name", "?")
        skipped = f" ({len(run.skipped_files)} older iteration dumps left out)" if run.skipped_files else ""
        rows.append(
            f"<tr><td>{escape(run.name)}</td><td>{escape(str(run.path))}</td><td>{escape(str(algo))}</td>"
            f"<td>{escape(str(env))}</td><td>{escape(', '.join(methods) or '-')}</td>"
            f'<td class="num">{len(run.train)}</td><td>{len(run.rollouts)} files{escape(skipped)}</td></tr>'
        )
    head = "<tr><th>run</th><th>path</th><th>algo</th><th>env</th><th>methods</th><th>iterations</th><th>rollouts</th></tr>"
    return f"<table>{head}{''.join(rows)}</table>"


def embedded_json(value: Any) -> str:
    """JSON safe inside ``<script type="application/json">``: ``<``, ``>``, ``&`` and the
    line separators are written as ``\\u`` escapes, so no text can close the element."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    for char, code in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, code)
    return text


def render_page(runs: list[RunData], *, title: str = "roleagent report") -> str:
    """The whole HTML page for ``runs`` (overlaid in every chart)."""
    curves = "".join(
        f'<h3>{escape(section)}</h3><div class="charts">{"".join(_curve(runs, k) for k in keys)}</div>'
        for section, keys in sectioned(numeric_keys(runs))
    )
    data = {"runs": [{"name": r.name, "files": r.rollouts, "failures": r.failures} for r in runs]}
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<style>{CSS}</style></head>
<body>
<h1>{escape(title)}</h1>
<div id="js-errors"></div>
<h2>Runs</h2>{_overview(runs)}
<h2>Evaluations</h2><div class="charts">{_eval_curves(runs)}</div>{_eval_tables(runs)}
<h2 id="curves">Learning curves</h2>{curves or '<p class="note">no iteration records</p>'}
<h2>Wall time per iteration</h2>{_time_section(runs)}
<h2>Agent-In-World: failure modes over iterations</h2>{_failure_section(runs)}
<h2 id="rollouts">Rollout browser</h2>
<p class="note">A task's G rollouts side by side; per step the action, reward, advantage (episode and step
parts), state-group id and size, World-In-Agent's predictions and scores, SEAL's turn label and weight.</p>
<div class="controls">run <select id="rb-run"></select> file <select id="rb-file"></select>
task <select id="rb-task"></select></div>
<div id="rb-view"></div>
<script type="application/json" id="report-data">{embedded_json(data)}</script>
<script>{JS}</script>
</body></html>
"""
