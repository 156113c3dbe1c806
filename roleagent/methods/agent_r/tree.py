"""Agent-R's search trees as data (Yuan et al., 2025, "Agent-R", arXiv 2501.11425): a flat,
JSON-friendly list of nodes per (task, seed), its leaf paths and their values, one JSON file
per tree. The search that grows them is :mod:`roleagent.methods.agent_r.mcts`."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roleagent.types import Step, Task, Trajectory


@dataclass
class Node:
    """One turn of the tree (the root: the state after reset). Indices refer to ``Tree.nodes``."""

    index: int
    parent: int | None
    depth: int
    text: str = ""  # the assistant text as generated (Step.action_text); "" at the root
    action: str | None = None  # the parsed action; None when the output was invalid
    valid: bool = True
    observation: str = ""  # after the action (the root: after reset)
    admissible: list[str] | None = None  # after the action, when the environment lists them
    reward: float = 0.0  # the step's environment reward (no invalid-output penalty)
    score: float = 0.0  # the path's summed environment reward, clipped to [0, 1]
    done: bool = False
    success: bool = False
    terminal: bool = False
    disaster: bool = False
    visits: int = 0
    value_sum: float = 0.0
    children: list[int] = field(default_factory=list)
    chat: dict[str, Any] | None = None  # the prompt of this turn (step.extras["chat"])

    @property
    def value(self) -> float:
        """Q = value_sum / visits (0 while unvisited)."""
        return self.value_sum / self.visits if self.visits else 0.0


@dataclass
class Candidate:
    """One sampled turn from a node: what an expansion reports for each candidate."""

    text: str
    action: str | None
    valid: bool
    observation: str
    admissible: list[str] | None
    reward: float
    done: bool
    success: bool = False
    chat: dict[str, Any] | None = None


@dataclass
class Tree:
    task: Task
    seed: int
    instruction: str
    nodes: list[Node]
    iterations: int = 0  # descents started
    cursor: int | None = None  # the node the current descent continues from
    error: str | None = None  # why the tree stopped growing early (a replay mismatch)

    @property
    def root(self) -> Node:
        return self.nodes[0]

    @property
    def observation(self) -> str:
        return self.root.observation

    @property
    def admissible(self) -> list[str] | None:
        return self.root.admissible

    def path(self, index: int) -> list[int]:
        """Node indices from the root (excluded) down to ``index``."""
        out = []
        while self.nodes[index].parent is not None:
            out.append(index)
            index = self.nodes[index].parent
        return out[::-1]

    def path_texts(self, index: int) -> list[str]:
        return [self.nodes[i].text for i in self.path(index)]

    def leaf_paths(self) -> list[list[int]]:
        """The root-excluded path of every terminal leaf, depth first (the authors'
        ``find_leaf_paths``); unexpanded non-terminal leaves are left out."""
        out, stack = [], [0]
        while stack:
            node = self.nodes[stack.pop()]
            if node.terminal and not node.children and node.parent is not None:
                out.append(self.path(node.index))
            stack.extend(reversed(node.children))
        return out

    def path_value(self, path: Sequence[int]) -> float:
        """The leaf's mean value, value_sum / visits."""
        return self.nodes[path[-1]].value

    def turns(self, path: Sequence[int]) -> list[tuple[str, str]]:
        """``(assistant text, the observation that followed)`` per turn of ``path``."""
        return [(self.nodes[i].text, self.nodes[i].observation) for i in path]

    def trajectories(self) -> list[Trajectory]:
        """One trajectory per leaf path (rewards without invalid-output penalties)."""
        out = []
        for path in self.leaf_paths():
            steps, before = [], self.root.observation
            for i in path:
                n = self.nodes[i]
                steps.append(Step(before, None, n.text, n.action, n.valid, reward=n.reward, done=n.done))
                before = n.observation
            leaf = self.nodes[path[-1]]
            record = {"leaf": leaf.index, "value": leaf.value, "disaster": leaf.disaster}
            out.append(
                Trajectory(
                    task=self.task,
                    steps=steps,
                    success=leaf.success,
                    instruction=self.instruction,
                    final_observation=leaf.observation,
                    seed=self.seed,
                    extras={"mcts": record},
                )
            )
        return out

    def to_json(self) -> dict[str, Any]:
        task = {"task_id": self.task.id, "env": self.task.env, "split": self.task.split, "metadata": self.task.metadata}
        state = {"iterations": self.iterations, "cursor": self.cursor, "error": self.error}
        nodes = [dataclasses.asdict(n) for n in self.nodes]
        return task | {"seed": self.seed, "instruction": self.instruction} | state | {"nodes": nodes}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Tree:
        """Inverse of :meth:`to_json` (the task's payload is not stored, as in rollout dumps)."""
        try:
            task = Task(data["task_id"], data["env"], split=data["split"], metadata=dict(data["metadata"] or {}))
            nodes = [Node(**n) for n in data["nodes"]]
            tree = cls(
                task, data["seed"], data["instruction"], nodes, data["iterations"], data["cursor"], data["error"]
            )
        except (KeyError, TypeError) as error:
            raise ValueError(f"not an Agent-R tree record: {error}") from error
        if not nodes or any(n.index != i for i, n in enumerate(nodes)):
            raise ValueError("an Agent-R tree record needs nodes numbered 0, 1, ... in order")
        return tree

    def save(self, path: str | Path) -> Path:
        """Write the tree as JSON (via a temporary file, so a crash leaves no half file)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), ensure_ascii=False))
        os.replace(tmp, path)
        return path


def tree_filename(task_id: str, seed: int) -> str:
    """A safe file name per (task, seed); the id's hash keeps distinct ids apart.

    Example: ``tree_filename("textcraft/oak planks", 3)`` →
    ``"textcraft_oak_planks-<8 hex digits>-seed3.json"``.
    """
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", task_id).strip("._")[:100] or "task"
    return f"{safe}-{hashlib.sha1(task_id.encode()).hexdigest()[:8]}-seed{seed}.json"


def save_trees(trees: Sequence[Tree], directory: str | Path) -> list[Path]:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return [tree.save(directory / tree_filename(tree.task.id, tree.seed)) for tree in trees]


def load_trees(directory: str | Path) -> list[Tree]:
    """The trees :func:`save_trees` wrote to ``directory``, in file-name order."""
    return [Tree.from_json(json.loads(p.read_text())) for p in sorted(Path(directory).glob("*.json"))]
