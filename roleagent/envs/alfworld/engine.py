"""The real ALFWorld text engine: TextWorld's PDDL backend behind alfworld's wrappers.

A game is played exactly as ``alfworld.agents.environment.AlfredTWEnv`` plays it:
``textworld.envs.pddl.PddlEnv`` (fast-downward inside) wrapped by alfworld's
``AlfredDemangler`` (ALFRED ids -> "apple 1") and ``AlfredInfos``, with
``EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])``. The planner's
plan (what ``EnvInfos(policy_commands=True)`` returns) is computed only when asked.

Each ``PddlEnv`` loads its own copy of fast-downward's shared library, so several
engines in one process (the env and the generator's planner check) do not interfere.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from typing import Any

from roleagent.envs.alfworld import generator as G
from roleagent.envs.alfworld import scenes as S

WELCOME = "-= Welcome to TextWorld, ALFRED! =-"
#: Longest plan accepted for a generated game (the default episode has 50 steps).
MAX_PLAN_LENGTH = 40


@functools.lru_cache(maxsize=1)
def game_logic() -> tuple[str, str]:
    """(domain, grammar) text from the installed alfworld wheel."""
    data = S.alfworld_data_dir()
    with open(os.path.join(data, "alfred.pddl")) as fh:
        domain = fh.read()
    with open(os.path.join(data, "alfred.twl2")) as fh:
        grammar = fh.read()
    return domain, grammar


def alfworld_version() -> str:
    try:
        from importlib.metadata import version

        return version("alfworld")
    except Exception:  # noqa: BLE001 - not installed from a distribution
        from alfworld.info import __version__

        return __version__


@functools.lru_cache(maxsize=1)
def logic_fingerprint() -> str:
    """Hash of everything generated content depends on (cache key of the game folder)."""
    domain, grammar = game_logic()
    text = "|".join([G.GENERATOR_VERSION, alfworld_version(), domain, grammar])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def make_engine():
    """A fresh TextWorld PDDL environment with alfworld's wrappers (not yet loaded)."""
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    from textworld.envs.pddl import PddlEnv

    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    env = PddlEnv(infos)
    for wrapper in (AlfredDemangler(shuffle=False), AlfredInfos):
        env = wrapper(env)
    return env


def plan(engine) -> list[str]:
    """The planner's commands from the engine's current state (ALFWorld's policy_commands)."""
    inner = engine.unwrapped
    return list(inner._pddl_state.replan(inner._entity_infos))


def strip_welcome(text: str) -> str:
    text = text.strip()
    if text.startswith(WELCOME):
        text = text[len(WELCOME) :].lstrip("\n")
    return text


def instruction_of(observation: str) -> str:
    for part in reversed(observation.split("\n\n")):
        if part.strip().startswith("Your task is to:"):
            return part.strip()
    return ""


# --------------------------------------------------------------- planner check ------

_checker = None


def _checker_engine():
    global _checker
    if _checker is None:
        _checker = make_engine()
    return _checker


def check_solvable(game: dict[str, Any], path_hint: str) -> list[str]:
    """Play the planner's plan on the real engine; return it, or raise GenerationError."""
    engine = _checker_engine()
    tmp_dir = tempfile.mkdtemp(prefix="alfcheck-")
    tmp = os.path.join(tmp_dir, "game.tw-pddl")
    try:
        with open(tmp, "w") as fh:
            json.dump(game, fh)
        engine.load(tmp)
        state = engine.reset()
        if state["won"]:
            raise G.GenerationError(f"{path_hint}: goal already satisfied at start")
        commands = plan(engine)
        if not commands or len(commands) > MAX_PLAN_LENGTH:
            raise G.GenerationError(f"{path_hint}: planner found no plan of <= {MAX_PLAN_LENGTH} steps")
        for command in commands:
            if command not in state["admissible_commands"]:
                raise G.GenerationError(f"{path_hint}: plan step {command!r} is not admissible")
            state, _, _ = engine.step(command)
        if not state["won"]:
            raise G.GenerationError(f"{path_hint}: the plan does not win")
        return commands
    finally:
        try:
            os.remove(tmp)
            os.rmdir(tmp_dir)
        except OSError:
            pass


def _atomic_write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(path))
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def materialize(spec: G.Spec, folder: str, attempts: int = 8) -> str:
    """Write ``folder/game.tw-pddl`` (+ ``traj_data.json``) for a spec; return the game path.

    Deterministic: the same spec always yields the same bytes. If the planner check fails
    (it should not: generation is solvable by construction), the placement seed is
    re-derived (spec.seed, attempt) with the same scene, object and receptacle types.
    Files are written to a temporary name and ``os.replace``-d, so concurrent workers
    building the same game never see a partial file.
    """
    game_path = os.path.join(folder, "game.tw-pddl")
    if os.path.exists(game_path):
        return game_path
    domain, grammar = game_logic()
    errors = []
    for attempt in range(attempts):
        trial = (
            spec
            if attempt == 0
            else G.Spec(
                spec.task_type,
                spec.scene,
                spec.object_target,
                spec.parent_target,
                spec.toggle_target,
                G._rng("retry", spec.seed, attempt).getrandbits(62),
                spec.knobs,
            )
        )
        game, traj = G.game_json(trial, domain, grammar)
        try:
            commands = check_solvable(game, folder)
        except G.GenerationError as exc:
            errors.append(str(exc))
            continue
        game["solvable"] = True
        traj["roleagent"]["expert_plan"] = commands
        traj["roleagent"]["attempt"] = attempt
        _atomic_write(os.path.join(folder, "traj_data.json"), json.dumps(traj, indent=1, sort_keys=True))
        _atomic_write(game_path, json.dumps(game))
        return game_path
    raise RuntimeError(f"could not generate a solvable game in {folder}: {errors}")
