"""Rollouts: the policy (or the environment's expert) playing batched multi-turn episodes.

- :mod:`roleagent.rollout.episodes`: the loop (:func:`run_episodes`), one batched model call
  per turn for every active episode, with the methods' rollout extensions, context modes,
  expert play and replayed prefixes (its module docstring);
- :mod:`roleagent.rollout.actions`: how each turn's action is chosen (replayed, expert,
  free or constrained decoding);
- :mod:`roleagent.rollout.actor`: the actor role every method shares, its prompts and the
  parsing of its outputs. Method-specific roles live with their method (the World-In-Agent
  predictor in ``roleagent.methods.role_agent.wia``, the Agent-In-World analyst in
  ``roleagent.methods.role_agent.aiw``).
"""

from roleagent.rollout.episodes import (
    RolloutExtension,
    RolloutSettings,
    RolloutStats,
    Turn,
    rollout_settings,
    run_episodes,
)

__all__ = ["RolloutExtension", "RolloutSettings", "RolloutStats", "Turn", "rollout_settings", "run_episodes"]
