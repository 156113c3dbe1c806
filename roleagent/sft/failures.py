"""Failed episodes of rollout files as the data of the Agent-In-World roles' warm starts
(``roleagent.sft.analyst``, ``roleagent.sft.retriever``): reading them, holding out whole
games, and capping how many failures of one game are kept."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from roleagent.types import Trajectory


def read_failures(paths: Sequence[str]) -> list[Trajectory]:
    """The failed, uncrashed episodes of rollout JSONL files, in file order."""
    rows = [Trajectory.from_json(json.loads(x)) for p in paths for x in Path(p).read_text().splitlines() if x.strip()]
    return [t for t in rows if not t.success and not t.crashed]


def per_game(items: Sequence, n: int, game=lambda x: x.meta["task"], label=lambda x: x.meta["label"]) -> list:
    """At most ``n`` items of each game (``game(x)``, an example's ``meta["task"]``; 0: all),
    its failure types (``label(x)``) taken in turn in first-seen order: a game with labels
    a a a b and n = 3 keeps a b a."""
    if n <= 0:
        return list(items)
    games: dict[str, dict[str, list]] = {}
    for x in items:
        games.setdefault(game(x), {}).setdefault(label(x), []).append(x)
    out = []
    for labels in games.values():
        queues, kept, depth = list(labels.values()), [], 0
        while len(kept) < n and any(depth < len(q) for q in queues):
            kept += [q[depth] for q in queues if depth < len(q)][: n - len(kept)]
            depth += 1
        out += kept
    return out


def split_failures(
    pool, seed: int, rollouts, valid_rollouts, valid_games: int
) -> tuple[list[Trajectory], set[str], int]:
    """The failures of the rollout files (``valid_rollouts``' last), each with its task as
    ``pool``'s environment knows it (with its payload: the env finds the game's ground
    truth), the held-out games (``valid_games`` of ``rollouts``' games drawn with ``seed``,
    and every game of ``valid_rollouts``) and the number of ``rollouts``' games outside
    ``valid_rollouts``. The analyst's and the retriever's data commands hold out the same
    games."""
    train, valid = read_failures(rollouts), read_failures(valid_rollouts)
    games = sorted({t.task.id for t in train} - {t.task.id for t in valid})
    if not 0 <= valid_games < len(games):
        raise ValueError(f"--valid-games={valid_games}: the rollouts have {len(games)} games (keep at least one)")
    held = {games[i] for i in np.random.default_rng(seed).permutation(len(games))[:valid_games]}
    held |= {t.task.id for t in valid}
    known = {t.id: t for s in sorted({t.task.split for t in train + valid}) for t in pool.meta.tasks(s)}
    for t in train + valid:
        t.task = known.get(t.task.id, t.task)
    return train + valid, held, len(games)


def diagnosed(
    trajectories: Sequence[Trajectory], diagnose: Callable[[Trajectory], Any] | None
) -> list[tuple[Trajectory, dict[str, Any]]]:
    """The failed, uncrashed trajectories with a rule diagnosis, each with it."""
    out = []
    for t in trajectories:
        if t.success or t.crashed:
            continue
        d = t.diagnosis or (diagnose(t) if diagnose is not None else None)
        if d:
            out.append((t, d))
    return out
