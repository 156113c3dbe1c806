"""What the role warm starts' command lines share (``python -m roleagent.sft.predictor``,
``.judge``, ``.analyst``, ``.asl_warm_start``; ``roleagent sft``): the recipe's policy and
engine, and the arguments every ``data|eval RECIPE`` command takes."""

from __future__ import annotations

import argparse

from roleagent.fields import ConfigError


def load_engine(cfg, *, lora: bool = False):
    """``(policy, engine)`` for ``cfg`` (``model.init_from`` loaded, ``threads`` applied, the
    engine's sampling seeded with ``seed``);
    ``lora``: fresh adapters to train (then the engine must run weights here)."""
    import torch

    from roleagent.engine import create_engine, engine_settings
    from roleagent.models.loading import engine_policy

    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    policy = engine_policy(cfg.model, seed=cfg.seed, init_from=cfg.model.init_from, lora=lora)
    if lora and policy.model is None:
        raise ConfigError(f"model.engine={cfg.model.engine} runs no weights here: sft needs model.engine=hf")
    engine = create_engine(
        cfg.model.engine, policy, settings=engine_settings(cfg), max_prompt_tokens=cfg.rollout.max_prompt_tokens
    )
    engine.seed(cfg.seed)  # sampled measurements draw as a run with this seed does
    return policy, engine


def role_parser(prog: str, usage: str) -> argparse.ArgumentParser:
    """``data|eval RECIPE`` with ``--out``, ``--examples``, ``--limit``, ``--rows`` and ``--set``;
    a role adds its own options."""
    parser = argparse.ArgumentParser(prog=prog, usage=usage)
    parser.add_argument("command", choices=("data", "eval"))
    parser.add_argument("recipe")
    parser.add_argument("--out", default="")
    parser.add_argument("--examples", default="")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--rows", default="")
    parser.add_argument("--set", action="append", default=[])
    return parser
