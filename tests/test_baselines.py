"""Prompting baselines: ReAct's prompt and parsing, examples from training tasks,
Reflexion's memory across trials (scripted engines on the scripted corridor), and
`roleagent eval --policy react|reflexion` end to end."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from roleagent.baselines.react import Episode, Turn, parse_chat, parse_line, react_messages
from roleagent.baselines.reflexion import REFLECT_INSTRUCTION, ReflectionMemory, reflection_messages, run_reflexion
from roleagent.baselines.runner import expert_examples, play
from roleagent.engine.base import SamplingParams
from roleagent.envs.workers import EnvPool
from roleagent.evaluation import success_by_type

PARAMS = SamplingParams(max_new_tokens=16, temperature=0.0)
# scripted eval task 0: 3 rooms, the key in room 1 (roleagent.envs.scripted)
SOLUTION = ["think: the key first", "go right", "take key", "go right", "open door"]


def test_parse_lines():
    assert parse_line("> Think: where is it?\nmore") == ("think", "where is it?")
    assert parse_line("  open door.") == ("act", "open door")
    assert parse_line("   ") == ("invalid", "")
    assert parse_chat("thought: call it\n[f(x=1)]\n") == ("act", "[f(x=1)]")


def test_react_prompt_shows_example_memory_and_recent_turns():
    turns = [Turn(f"go right {k}", f"room {k}") for k in range(4)]
    e = Episode("open the door", "You are in room 0.", example="Task: x\n> take key", reflections=["R1"], turns=turns)
    system, user = react_messages(e, history=2)
    assert system["role"] == "system" and "think:" in system["content"]
    text = user["content"]
    assert text.index("Task: x\n> take key") < text.index("- R1") < text.index("Task: open the door")
    assert "(2 earlier lines omitted)" in text and "> go right 2\nroom 2\n> go right 3\nroom 3" in text
    assert "go right 1" not in text


def test_examples_come_from_training_tasks():
    with EnvPool("scripted", {}, slots=1, processes=False) as pool:
        panel = pool.meta.tasks("eval")[:2]
        examples = expert_examples(pool, panel, "train", seed=0)
    # train task 0: 2 rooms, key in room 0: take key, go right, open door
    assert list(examples) == ["key_door"]
    assert examples["key_door"].startswith(  # the task the expert played, as reset gave it
        "Task: open the door at the end of the corridor\nYou are in room 0. You see a key.\n"
        "> think: My task is to open the door at the end of the corridor."
    )
    assert "> take key\nYou pick up the key.\n> go right" in examples["key_door"]
    assert examples["key_door"].endswith("> open door\nThe door opens. You win.")


class Replies:
    """A scripted engine's policy: the next line of ``script`` per episode, keyed by the
    number of ``> `` lines already in its prompt; reflections are ``R<n>``."""

    def __init__(self, script, wrong=None):
        self.script, self.wrong, self.reflections = script, wrong, 0
        self.prompts: list[str] = []

    def __call__(self, prompt: str, call: int) -> str:
        self.prompts.append(prompt)
        if REFLECT_INSTRUCTION in prompt:
            self.reflections += 1
            return f"R{self.reflections}"
        task = prompt.split("Here is your task.")[1]
        done = task.count("\n> ") - 1  # the last one is the pre-filled "> "
        script = self.script if (self.wrong is None or "- R1" in prompt) else self.wrong
        return script[min(done, len(script) - 1)]


def _play(engine, pool, jobs, reflections=lambda task: []):
    return play(engine, pool, jobs, max_steps=6, params=PARAMS, reflections=reflections)


def test_react_plays_thoughts_and_actions(scripted_engine):
    replies = Replies(SOLUTION)
    engine = scripted_engine(replies)
    with EnvPool("scripted", {}, slots=1, processes=False) as pool:
        [t] = _play(engine, pool, [(pool.meta.tasks("eval")[0], 0)])
    assert t.success and len(t.steps) == 5
    assert t.steps[0].info == {"thought": "the key first"} and t.steps[0].action is None
    assert [s.action for s in t.steps[1:]] == ["go right", "take key", "go right", "open door"]
    assert "> think: the key first\nOK.\n> go right\nYou are in room 1. You see a key." in replies.prompts[2]


def test_reflexion_memory_carries_across_trials(scripted_engine, tmp_path):
    replies = Replies(SOLUTION, wrong=["look"])
    engine = scripted_engine(replies)
    memory = ReflectionMemory(str(tmp_path / "memory.sqlite"))
    with EnvPool("scripted", {}, slots=2, processes=False) as pool:
        tasks = pool.meta.tasks("eval")[:1]
        jobs = [(task, 0) for task in tasks]
        per_trial = run_reflexion(
            lambda wave, refl: _play(engine, pool, wave, refl), engine, jobs, memory, trials=3, params=PARAMS
        )
    assert [success_by_type(ts)["All"] for ts in per_trial] == [0.0, 100.0, 100.0]
    assert replies.reflections == 1  # a solved task is neither replayed nor reflected on
    assert memory.recent(tasks[0].id) == ["R1"]
    reflect_prompt = next(p for p in replies.prompts if REFLECT_INSTRUCTION in p)
    assert "> look" in reflect_prompt  # the failed trajectory is shown
    memory.close()
    assert ReflectionMemory(str(tmp_path / "memory.sqlite")).recent(tasks[0].id) == ["R1"]  # persisted


def test_memory_keeps_the_last_reflections():
    memory = ReflectionMemory()
    for k in range(5):
        memory.add("t", k + 1, f"R{k + 1}")
    memory.add("other", 1, "X")
    assert memory.recent("t", keep=3) == ["R3", "R4", "R5"]


def test_reflection_prompt_marks_thoughts():
    from roleagent.types import Step, Task, Trajectory

    t = Trajectory(task=Task("t", "x", "eval"), instruction="open the door", final_observation="room 1")
    t.steps = [
        Step("room 0", 0, "think: hmm", None, True, info={"thought": "hmm"}),
        Step("room 0", 0, "go right", "go right", True),
    ]
    text = reflection_messages(t)[1]["content"]
    assert text.startswith("Task: open the door\nroom 0\n> think: hmm\nOK.\n> go right\nroom 1\n\n")


@pytest.mark.parametrize("policy", ["react", "reflexion"])
def test_cli_eval_prompting_baseline(policy, tmp_path):
    command = [
        sys.executable,
        "-m",
        "roleagent.cli",
        "eval",
        "--env",
        "scripted",
        "--policy",
        policy,
        "--max-tasks",
        "2",
    ]
    command += ["--workers", "1", "--trials", "2", "--out", str(tmp_path)]
    command += ["--set", "model.name=tiny", "--set", "threads=1", "--set", "rollout.max_steps=2"]
    command += ["--set", "rollout.max_new_tokens=6", "--set", "env.processes=false"]
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert lines[-3 if policy == "reflexion" else -2].split() == ["scripted", "success", "(%)", "key_door", "All"]
    rows = ["react eval"] if policy == "react" else ["reflexion eval after trial 1", "reflexion eval after trial 2"]
    assert [line[: len(r)] for line, r in zip(lines[-len(rows) :], rows)] == rows
    if policy == "reflexion":
        assert (tmp_path / "reflexion.sqlite").is_file()
