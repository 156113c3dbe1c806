"""``roleagent view``: browse a run's rollout dumps (and failure memory) in the terminal, or
Agent-R search trees (a tree JSON file, or a directory of them)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from roleagent.sqlite_copy import database_copy
from roleagent.terminal import printable


def _show(text: str = "") -> None:
    """Print model or environment text with its control characters escaped."""
    print(printable(text))


def _is_trajectory(record: object) -> bool:
    """A dumped trajectory as the views read it (``Trajectory.to_json``)."""
    if not isinstance(record, dict) or not isinstance(record.get("task_id"), str):
        return False
    number = isinstance(record.get("return"), (int, float)) and not isinstance(record.get("return"), bool)
    steps = record.get("steps")
    return number and isinstance(steps, list) and all(isinstance(s, dict) for s in steps)


def _load(path: Path) -> list[tuple[int, dict]]:
    """``(index, trajectory)`` of a rollout dump, numbered by line; a torn line (a killed
    writer) or a record that is not a trajectory is skipped, with a note saying so."""
    out, skipped = [], 0
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    for i, line in enumerate(lines):
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if _is_trajectory(record):
            out.append((i, record))
        else:
            skipped += 1
    if skipped:
        _show(f"({path.name}: skipped {skipped} unreadable line(s))")
    return out


def view_run(
    run: Path,
    *,
    file: str | None = None,
    task: str | None = None,
    index: int | None = None,
    failed: bool = False,
    memory: bool = False,
) -> int:
    rollouts = run / "rollouts"
    if not rollouts.exists():
        _show(f"{run} has no rollouts/ folder: is it a run directory?")
        return 2
    if memory:
        return _view_memory(run)
    if file is None:
        _show(f"run {run}")
        if (run / "eval_table.txt").exists():
            _show((run / "eval_table.txt").read_text())
        for path in sorted(rollouts.glob("*.jsonl")):
            records = [r for _, r in _load(path)]
            success = sum(bool(r.get("success")) for r in records)
            _show(f"  {path.stem:20s} {len(records):4d} trajectories, {success} successful")
        _show("show one file with --file NAME, one trajectory with --index K, a task's rollouts with --group TASK_ID")
        return 0
    path = rollouts / f"{Path(file).stem}.jsonl"
    if not path.exists():
        _show(f"no rollout file {path}")
        return 2
    records = _load(path)
    if task:
        records = [(i, r) for i, r in records if r["task_id"] == task]
    if failed:
        records = [(i, r) for i, r in records if not r.get("success")]
    if index is not None:
        matches = [r for i, r in records if i == index]
        if not matches:
            _show(f"no trajectory {index} in {path.name} (after filters)")
            return 2
        _print_trajectory(index, matches[0])
        return 0
    for i, r in records:
        status = "OK  " if r.get("success") else ("CRASH" if r.get("crashed") else "fail")
        task_id = printable(r["task_id"], lines=False)
        _show(f"{i:4d} {status} {task_id:45s} steps={len(r['steps']):3d} return={r['return']:.2f}")
    return 0


def view_group(run: Path, task_id: str, *, file: str | None = None, width: int = 34) -> int:
    """``roleagent view RUN --group TASK_ID``: the task's rollouts in one dump (default: the
    last iteration's) side by side, per step the action, reward, advantage with its episode
    and step parts, and the state group with its size."""
    rollouts = run / "rollouts"
    files = sorted(rollouts.glob("iter_*.jsonl")) if file is None else [rollouts / f"{Path(file).stem}.jsonl"]
    if not files or not files[-1].exists():
        _show(f"no rollout file {files[-1] if files else rollouts / 'iter_*.jsonl'}")
        return 2
    if width < 12:
        _show(f"--width={width}: must be >= 12")
        return 2
    loaded = _load(files[-1])
    records = [(i, r) for i, r in loaded if r["task_id"] == task_id]
    if not records:
        tasks = sorted({r["task_id"] for _, r in loaded})
        _show(f"no rollouts of task {task_id!r} in {files[-1].name}; its tasks: {', '.join(tasks)}")
        return 2
    by_seed: dict = {}
    for i, r in records:
        by_seed.setdefault(r.get("seed"), []).append((i, r))
    for seed, group in by_seed.items():
        _show(f"{task_id} in {files[-1].name}, seed {seed}: {len(group)} rollouts")
        _show("\n".join(group_lines(group, width)))
    return 0


def _cell_lines(step: dict, width: int) -> list[str]:
    """What a step shows in its column: the action, reward and advantage, the parts, the
    state group, World-In-Agent's first prediction score."""
    action = step["action"] if step["action"] is not None else f"(invalid) {step['action_text']!r}"
    algo = step.get("extras", {}).get("algo", {})
    lines = [action, f"r={step['reward']:+.2f}" + (f" A={algo['advantage']:+.3f}" if "advantage" in algo else "")]
    parts = " ".join(f"{k[0].upper()}={algo[k]:+.3f}" for k in ("episode", "step") if k in algo)
    if parts:
        lines.append(parts)
    if "state_group" in algo:
        lines.append(
            f"group {algo['state_group']}" + (f" (n={algo['state_group_size']})" if "state_group_size" in algo else "")
        )
    scores = step.get("extras", {}).get("wia", {}).get("scores", [])
    if scores:
        lines.append("pred score " + " ".join("nan" if x is None or x != x else f"{x:.2f}" for x in scores))
    return [printable(line.replace("\n", " "), lines=False)[:width] for line in lines]


def group_lines(group: list[tuple[int, dict]], width: int) -> list[str]:
    """Rows of the side-by-side view: a header per rollout, then per step ``t`` the lines of
    each rollout's step (blank where a rollout had already ended)."""
    heads = []
    for i, r in group:
        status = "OK" if r["success"] else ("CRASH" if r.get("crashed") else "fail")
        weight = r.get("extras", {}).get("seal", {}).get("weight")
        heads.append(f"#{i} {status} R={r['return']:.2f}" + (f" w={weight:.2f}" if weight is not None else ""))
    labels = [(r.get("diagnosis") or {}).get("turn_labels") or [] for _, r in group]
    rows = [" | ".join(h[:width].ljust(width) for h in heads).rstrip()]
    for t in range(max(len(r["steps"]) for _, r in group)):
        cells = []
        for (_, r), turn_labels in zip(group, labels):
            cell = _cell_lines(r["steps"][t], width) if t < len(r["steps"]) else []
            if t < len(turn_labels):
                cell.append(printable(f"SEAL {turn_labels[t]}", lines=False)[:width])
            cells.append(cell)
        rows.append("-" * ((width + 3) * len(group) - 3) + f" t={t}")
        for k in range(max(len(c) for c in cells)):
            texts = [c[k] if k < len(c) else "" for c in cells]
            while texts and not texts[-1]:  # no separators after the last non-blank column
                texts.pop()
            rows.append(" | ".join(text.ljust(width) for text in texts).rstrip())
    return rows


def _print_trajectory(index: int, r: dict) -> None:
    _show(f"#{index} {r['task_id']} seed={r['seed']} success={r['success']} return={r['return']:.2f}")
    for t, step in enumerate(r["steps"]):
        _show(f"\n--- step {t} (reward {step['reward']:+.2f}{'' if step['valid'] else ', INVALID'})")
        _show(f"observation: {step['observation']}")
        _show(f"generated:   {step['action_text']!r}")
        _show(f"action:      {step['action']}")
        _print_records(step.get("extras", {}))
    _show(f"\nfinal observation: {r.get('final_observation', '')}")
    if r.get("extras"):
        _show(f"methods: {r['extras']}")
    if r.get("diagnosis"):
        _show(f"diagnosis: {r['diagnosis']}")


def _print_records(extras: dict) -> None:
    """What the algorithm and the methods recorded for a step (``Step.extras``)."""
    algo = extras.get("algo")
    if algo:
        _show(
            "advantage:   " + " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in algo.items())
        )
    wia = extras.get("wia", {})
    for h, (pred, score) in enumerate(zip(wia.get("predictions", []), wia.get("scores", []))):
        _show(f"predicted s+{h + 1}: {pred!r} (LMS {score})")
    for name, record in extras.items():
        if name not in ("algo", "wia"):
            _show(f"{name}: {record}")


def _view_memory(run: Path) -> int:
    db = run / "failure_memory.sqlite"
    if not db.exists():
        _show(f"{run} has no failure memory (Agent-In-World was off)")
        return 0
    try:  # a copy: a read-only (archived) run folder opens, and its -wal stays as it is
        with database_copy(db) as copy:
            conn = sqlite3.connect(copy)
            try:
                tables = {
                    row[0]: _table(conn, row[0])
                    for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
                }
            finally:
                conn.close()
    except (sqlite3.Error, OSError) as error:
        _show(f"{db}: cannot read the failure memory ({error})")
        return 2
    for table, (columns, rows) in tables.items():
        _show(f"== {table} ({len(rows)} shown)")
        for row in rows:
            _show("  " + " | ".join(f"{c}={printable(str(v)[:60], lines=False)}" for c, v in zip(columns, row)))
    return 0


def _table(conn: sqlite3.Connection, table: str) -> tuple[list[str], list[tuple]]:
    """A table's column names and first 50 rows (``table`` comes from sqlite_master)."""
    rows = conn.execute(f"SELECT * FROM {table} LIMIT 50").fetchall()
    return [d[0] for d in conn.execute(f"SELECT * FROM {table} LIMIT 0").description], rows


def is_tree_path(path: Path) -> bool:
    """A tree file (``*.json``) or a directory of tree files that is not a run directory."""
    if path.is_file():
        return path.suffix == ".json"
    return path.is_dir() and not (path / "rollouts").exists() and any(path.glob("*.json"))


def view_trees(path: Path) -> int:
    """Print each tree indented: per node its depth, visits N, mean value Q, reward r and
    score s, T when terminal, D on a disaster, and the action (or the invalid text)."""
    from roleagent.methods.agent_r.tree import Tree

    for file in [path] if path.is_file() else sorted(path.glob("*.json")):
        try:
            tree = Tree.from_json(json.loads(file.read_text()))
        except (OSError, ValueError) as error:
            _show(f"{file}: {error}")
            return 2
        leaves = tree.leaf_paths()
        _show(
            f"{tree.task.id} seed={tree.seed}: {len(tree.nodes)} nodes, {len(leaves)} terminal leaves, "
            f"{tree.iterations} iterations" + (f", stopped: {tree.error}" if tree.error else "")
        )
        stack = [0]
        while stack:
            node = tree.nodes[stack.pop()]
            flags = ("T" if node.terminal else "-") + ("D" if node.disaster else "-")
            label = (
                repr(node.observation[:60])
                if node.parent is None
                else printable(node.action or f"(invalid) {node.text!r}", lines=False)
            )
            _show(
                f"{'  ' * node.depth}[{node.index}] d={node.depth} N={node.visits} Q={node.value:.3f} "
                f"r={node.reward:+.2f} s={node.score:.2f} {flags} {label}"
            )
            stack.extend(reversed(node.children))
    return 0
