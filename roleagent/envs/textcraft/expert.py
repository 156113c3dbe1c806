"""A planner over TextCraft's crafting tree: the environment's expert.

TextCraft (Prasad et al., 2023, arXiv 2311.05772) has two useful commands: ``get N item``
for a base item (one no recipe makes) and ``craft K item using k1 a, k2 b`` which applies
ONE recipe once: the ingredient counts must equal the recipe's, and each ingredient must
name a concrete item ("2 oak planks", not the tag "2 planks"). So making ``n`` of an item
whose recipe yields ``K`` takes ``ceil(n / K)`` craft commands, after gathering
``ceil(n / K) * k`` of every ingredient; base items come in one ``get`` of the whole
shortfall.

:func:`plan` returns the full command list from a given inventory to the goal; the
environment's ``expert_action`` replays ``plan(...)[0]`` from the live inventory at every
step, so the expert recovers from any state a policy leaves behind. Where an item has
several recipes, or a tag ingredient several concrete items, every option is simulated and
the best kept: fewest recipes outside the instruction's list (``preferred``), then fewest
commands, then the alphabetically first command, so plans are deterministic.

Worked example (the one the tests reuse), goal ``minecraft:stick`` from an empty
inventory, preferring ``craft 4 oak planks using 1 oak logs``::

    get 1 oak logs
    craft 4 oak planks using 1 oak logs
    craft 4 stick using 2 oak planks

and from ``{"minecraft:oak_planks": 1}`` the same three commands (one plank is short, a
log makes four); from ``{"minecraft:oak_planks": 2}`` only the last one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from math import ceil
from typing import Any


class Unsolvable(ValueError):
    """No sequence of commands makes the item (no recipe and not gettable)."""


@dataclass
class _Sim:
    """A simulated episode: the inventory, the commands so far, recipes off the list."""

    inventory: dict[str, int]
    actions: list[str] = field(default_factory=list)
    off_list: int = 0

    def copy(self) -> _Sim:
        return _Sim(dict(self.inventory), list(self.actions), self.off_list)

    def score(self) -> tuple[int, int, list[str]]:
        return (self.off_list, len(self.actions), self.actions)


def name_of(item_id: str) -> str:
    """``minecraft:oak_planks`` -> ``oak planks`` (the game's spelling)."""
    return item_id.removeprefix("minecraft:").replace("_", " ")


def recipe_closure(tree: Any, item: str) -> list[Any]:
    """Every recipe reachable from ``item``: its recipes (an item's own, else its tag's)
    and, recursively, those of their ingredients; each recipe once, first-seen order.

    The same set as textcraft 0.0.3's ``CraftingTree.traverse_recipe_tree``, which
    however extends the tree's own recipe lists in place (``recipes.extend``), so after a
    few resets ``itemid_recipes["minecraft:stick"]`` also holds the planks' recipes and
    the game's ``craft`` can answer a command with another item. This never mutates."""
    out: dict[int, Any] = {}
    stack = [item]
    seen = set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        for recipe in tree.itemid_recipes.get(name) or tree.tag_recipes.get(name) or []:
            out.setdefault(id(recipe), recipe)
            stack.extend(reversed([i.item_tag.name for i in recipe.input_items]))
    return list(out.values())


def plan(tree: Any, goal: str, inventory: dict[str, int], preferred: Iterable[str] = ()) -> list[str]:
    """The commands that craft ``goal`` from ``inventory`` (item id -> count).

    ``tree`` is textcraft's ``CraftingTree``; ``preferred`` the recipe strings the
    instruction lists (``Recipe.recipe_str``). Raises :class:`Unsolvable` when the goal
    cannot be made. Example: see the module docstring."""
    sim = _Sim({k: v for k, v in inventory.items() if v > 0})
    _Planner(tree, frozenset(preferred)).acquire(goal, 1, sim, ())
    return sim.actions


class _Planner:
    def __init__(self, tree: Any, preferred: frozenset[str]):
        self.tree = tree
        self.preferred = preferred

    def acquire(self, item: str, n: int, sim: _Sim, path: tuple[str, ...]) -> None:
        """Make ``sim.inventory[item] >= n``."""
        short = n - sim.inventory.get(item, 0)
        if short <= 0:
            return
        if item in path:
            raise Unsolvable(f"{item} needs itself ({' <- '.join(path)})")
        recipes = [r for r in self.tree.itemid_recipes.get(item, []) if r.output_item.item_tag.item_id == item]
        if not recipes:
            if self.tree.is_craftable(item) or self.tree.is_tag(item) or not self.tree.is_valid_item(item):
                raise Unsolvable(f"{item} has no recipe and cannot be fetched with get")
            sim.actions.append(f"get {short} {name_of(item)}")
            sim.inventory[item] = n
            return
        listed = [r for r in recipes if r.recipe_str in self.preferred]
        self._best(sim, [(r, r not in listed and bool(self.preferred)) for r in recipes], item, short, path)

    def _best(self, sim: _Sim, options: list, item: str, short: int, path: tuple[str, ...]) -> None:
        """Apply the best of ``options`` ((recipe, off_list) pairs) to ``sim``."""
        best, errors = None, []
        for recipe, off_list in options:
            trial = sim.copy()
            trial.off_list += off_list
            try:
                self.use(recipe, ceil(short / recipe.output_item.count), trial, path + (item,))
            except Unsolvable as error:
                errors.append(str(error))
                continue
            if best is None or trial.score() < best.score():
                best = trial
        if best is None:
            raise Unsolvable(f"no recipe for {item} works: {'; '.join(errors)}")
        sim.inventory, sim.actions, sim.off_list = best.inventory, best.actions, best.off_list

    def use(self, recipe: Any, times: int, sim: _Sim, path: tuple[str, ...]) -> None:
        """Gather ingredients for ``times`` applications of ``recipe``, then craft."""
        parts = []
        for ingredient in recipe.input_items:
            need = ingredient.count * times
            concrete = self.concrete(ingredient.item_tag, need, sim, path)
            sim.inventory[concrete] -= need  # held for this recipe: siblings cannot use it
            parts.append(f"{ingredient.count} {name_of(concrete)}")
        output = recipe.output_item
        item = output.item_tag.item_id
        sim.inventory = {k: v for k, v in sim.inventory.items() if v > 0}
        sim.inventory[item] = sim.inventory.get(item, 0) + output.count * times
        command = f"craft {output.count} {name_of(item)} using {', '.join(parts)}"
        sim.actions.extend([command] * times)

    def concrete(self, tag: Any, need: int, sim: _Sim, path: tuple[str, ...]) -> str:
        """Acquire ``need`` of one concrete item for ingredient ``tag``; its id."""
        if tag.item_id is not None:
            self.acquire(tag.item_id, need, sim, path)
            return tag.item_id
        best, errors = None, []
        for candidate in sorted(set(self.tree.get_items_with_tags(tag.tag))):
            trial = sim.copy()
            try:
                self.acquire(candidate, need, trial, path)
            except Unsolvable as error:
                errors.append(str(error))
                continue
            if best is None or trial.score() < best[0].score():
                best = (trial, candidate)
        if best is None:
            raise Unsolvable(f"no item of tag {tag.tag} can be made: {'; '.join(errors)}")
        sim.inventory, sim.actions, sim.off_list = best[0].inventory, best[0].actions, best[0].off_list
        return best[1]
