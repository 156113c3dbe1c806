"""The counts, 95 % Wilson intervals and verdicts of the method comparisons in
``benchmarks/RESULTS.md``, from the run files committed beside it (``learning_cpu.json``,
``learning_h100.json``, ``search_cpu.json``, ``asl_cpu.json``,
``agent_r_textcraft_cpu.json``, ``asl_p2_fresh_cpu.json``) and, for the BFCL, prompting and
main-job tables, from the counts RESULTS.md states.

These runs, except the fresh-panel replay's, predate per-game outcomes (``eval/outcomes``):
a count is success % × the panel size the text gives (:func:`_stats_table.from_percent`;
no crashed episode), and a game's outcome is known only where every game of an evaluation
failed or every one succeeded.
The tables are the benchmarks' own (``table`` of each script, the same code as their
``--summarize``), fed with these counts::

    python benchmarks/results_stats.py
"""

from __future__ import annotations

import json
from pathlib import Path

import _stats_table as st
import bench_agent_r
import bench_asl
import bench_fresh_panel
import bench_learning
import bench_search

HERE = Path(__file__).resolve().parent
#: panel sizes, as RESULTS.md states them
LEARNING_PANEL = 12  # the first 12 valid_seen games (CPU and H100)
SEARCH_PANEL = {"1-hop": 12, "2-hop": 8, "all": 20}  # the first 20 test questions, types interleaved
ASL_PANEL = 8  # the first 8 test questions
AGENT_R_PANEL = 16  # the first 16 goals of TextCraft's eval split


def load(name: str) -> dict:
    return json.loads((HERE / name).read_text())


def learning(name: str) -> str:
    saved = load(name)
    runs = [{**r, "final": st.from_percent(r["after"], LEARNING_PANEL)} for r in saved["runs"]]
    start = st.from_percent(saved["before"], LEARNING_PANEL)
    header = f"{name}: {LEARNING_PANEL}-game panel" + bench_learning.stopped_note(runs)
    return bench_learning.table(runs, saved["before"], list(bench_learning.CONFIGS), header, start)


def search() -> str:
    saved = load("search_cpu.json")
    runs = []
    for r in saved["runs"]:
        finals = {c: st.from_percent(v, SEARCH_PANEL[c]) for c, v in r["hops"].items()}
        runs.append({**r, "hop_finals": finals, "final": finals["all"]})
    warm = {c: st.from_percent(v, SEARCH_PANEL[c]) for c, v in saved["before"].items()}
    header = "search_cpu.json: {all} questions ({1-hop} one-hop, {2-hop} two-hop)".format_map(SEARCH_PANEL)
    return bench_search.table(runs, saved["before"], list(bench_search.ARMS), header, warm)


def asl() -> str:
    saved = load("asl_cpu.json")
    runs = [{**r, "final": st.from_percent(r["after"], ASL_PANEL)} for r in saved["runs"]]
    header = f"asl_cpu.json: {ASL_PANEL}-question panel"
    return bench_asl.table(
        runs, saved["before"], list(bench_asl.ARMS), header, st.from_percent(saved["before"], ASL_PANEL)
    )


def agent_r() -> str:
    saved = load("agent_r_textcraft_cpu.json")

    def restored(r: dict) -> dict:  # JSON made the loop lengths strings
        loops = {int(n): v for n, v in r["loops"].items()}
        return {**r, "loops": loops, "final": st.from_percent(r["success"], AGENT_R_PANEL)}

    runs = [restored(r) for r in saved["runs"]]
    return f"agent_r_textcraft_cpu.json: {AGENT_R_PANEL}-goal panel\n\n" + bench_agent_r.table(
        runs, restored(saved["start"]), "textcraft"
    )


def fresh() -> str:
    """``bench_fresh_panel``'s tables of the ASL runs from P2, from its recorded outcomes:
    the 24-iteration rule arm alone, then the 12-iteration arms against each other."""
    saved = load("asl_p2_fresh_cpu.json")
    runs, start, types = saved["runs"], saved["start"], saved["types"]
    header = f"asl_p2_fresh_cpu.json: {saved['panel']}"
    rule = {"Rule reward (EM), 24 iterations": runs["Rule reward (EM), 24 iterations"]}
    twelve = {arm: outcomes for arm, outcomes in runs.items() if arm.endswith(", 12 iterations")}
    first = bench_fresh_panel.tables(start, types, rule, header)
    return first + "\n" + bench_fresh_panel.tables(start, types, twelve, "")


def stated() -> str:
    """The tables whose counts RESULTS.md states: one run (or one policy) per row."""
    rows = [  # (table, first row -> second row, first (successes, games), second (successes, games))
        ("main job, valid_seen", "base -> after SFT", (0, 12), (3, 12)),
        ("main job, valid_seen", "after SFT -> after RL", (3, 12), (2, 12)),
        ("main job, valid_unseen", "base -> after SFT", (0, 12), (5, 12)),
        ("main job, valid_unseen", "after SFT -> after RL", (5, 12), (5, 12)),
        ("BFCL ground-truth SFT", "base -> after SFT", (0, 4), (0, 4)),
        ("SEAL vs vanilla (stale), seed 0", "before -> vanilla after", (0, 4), (0, 4)),
        ("SEAL vs vanilla (stale), seed 0", "before -> SEAL after", (0, 4), (0, 4)),
        ("prompting, ALFWorld", "ReAct -> Reflexion after trial 2", (0, 2), (0, 2)),
        ("prompting, ALFWorld", "Reflexion after trial 1 -> trial 2", (0, 2), (0, 2)),
        ("prompting, BFCL", "ReAct -> Reflexion after trial 2", (0, 2), (0, 2)),
        ("prompting, BFCL", "Reflexion after trial 1 -> trial 2", (0, 2), (0, 2)),
    ]
    lines = st.md_header(["table", "comparison (one run each)", "first, 95% CI", "second, 95% CI", "paired over games"])
    for name, row, (k0, n0), (k1, n1) in rows:
        cells = st.before_after_cells(st.from_percent(100 * k0 / n0, n0), [st.from_percent(100 * k1 / n1, n1)])
        lines.append(f"| {name} | {row} | " + " | ".join(cells) + " |")
    seal = {arm: {0: (0.0, st.from_percent(0.0, 4))} for arm in ("vanilla", "SEAL")}
    lines += ["", "SEAL vs vanilla (stale), seed 0:", "", *st.ordering_table([("vanilla", "SEAL")], seal)]
    return "\n".join(lines)


def main() -> None:
    sections = {
        "The five-configuration benchmark, 2-core CPU": learning("learning_cpu.json"),
        "The five-configuration benchmark, H100": learning("learning_h100.json"),
        "The search table": search(),
        "ASL vs the rule reward": asl(),
        "Agent-R on TextCraft": agent_r(),
        "The rule reward and ASL on a fresh search panel": fresh(),
        "Counts stated in RESULTS.md": stated(),
    }
    for title, text in sections.items():
        print(f"## {title}\n\n{text.strip()}\n")


if __name__ == "__main__":
    main()
