"""The searching ALFWorld expert (``roleagent.envs.alfworld.search``, ``expert="search"``)."""

from __future__ import annotations

import doctest

import pytest

from roleagent.envs.alfworld import search


def test_worked_examples():
    assert doctest.testmod(search).failed == 0


def test_search_prefers_opening_then_the_first_unvisited_place_in_admissible_order():
    adm = ["go to drawer 1", "go to bed 1", "go to desk 1", "open drawer 2", "look"]
    plan = ["go to desk 1", "take pen 1 from desk 1"]
    assert search.search_action(plan, "", {"bed 1"}, "The drawer 2 is closed.", adm) == "open drawer 2"
    assert search.search_action(plan, "", {"bed 1"}, "On the bed 1, you see nothing.", adm) == "go to desk 1"
    assert search.search_action(plan, "", {"bed 1", "desk 1", "drawer 1"}, "", adm) is None  # nowhere left
    assert search.search_action(["go to desk 1"], "", set(), "", adm) is None  # nothing to find


def test_bad_expert_name_is_a_clear_error():
    pytest.importorskip("alfworld")
    from roleagent.envs.alfworld.env import AlfWorldEnv

    with pytest.raises(ValueError, match="expert must be"):
        AlfWorldEnv(expert="oracle")


@pytest.mark.slow
def test_searching_expert_takes_nothing_it_has_not_seen_and_solves_most_games():
    pytest.importorskip("alfworld")
    from roleagent.envs.alfworld.env import AlfWorldEnv

    env = AlfWorldEnv(difficulty="easy", max_steps=12, expert="search")
    planner = AlfWorldEnv(difficulty="easy", max_steps=12)
    solved, searched = 0, 0
    try:
        for task in env.tasks("train")[:8]:
            observation, _ = env.reset(task)
            observed = observation
            for _ in range(12):
                action = env.expert_action()
                if action.startswith("take ") or action.startswith("use "):
                    target = action[5:].split(" from ")[0] if action.startswith("take ") else action[4:]
                    assert search.seen(target, observed), (task.id, action)
                result = env.step(action)
                observed += "\n" + result.observation
                if result.done:
                    break
            solved += bool(result.info["success"])
            planner.reset(task)
            searched += planner.expert_action() != search_first_step(env, task)
    finally:
        env.close()
        planner.close()
    assert solved >= 6  # the planner needs 4-9 steps; searching costs a few more
    assert searched > 0  # the two experts differ where the planner knows more than it saw


def search_first_step(env, task) -> str:
    env.reset(task)
    return env.expert_action()
