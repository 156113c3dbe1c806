"""Rollouts: the policy (or the environment's expert) playing batched multi-turn episodes.

- :mod:`roleagent.rollout.episodes`: the loop (:func:`run_episodes`), one batched model call
  per turn for every active episode, with the methods' rollout extensions, context modes,
  expert play and replayed prefixes (its module docstring);
- :mod:`roleagent.rollout.extensions`: what a method adds to every turn (World-In-Agent's
  predictions), and whether the environments step meanwhile (``rollout.overlap_env``);
- :mod:`roleagent.rollout.actions`: who chooses each turn's action, an ``ActionSource``
  (the policy, free or constrained; the environment's expert; a replayed prefix);
- :mod:`roleagent.rollout.actor`: the actor role every method shares, its prompts and the
  parsing of its outputs. Method-specific roles live with their method (the World-In-Agent
  predictor in ``roleagent.methods.role_agent.wia``, the Agent-In-World analyst in
  ``roleagent.methods.role_agent.aiw``).
"""

from roleagent.rollout.actions import EXPERT, POLICY, ActionSource
from roleagent.rollout.episodes import RolloutSettings, RolloutStats, rollout_settings, run_episodes
from roleagent.rollout.extensions import RolloutExtension, Turn

__all__ = [
    "EXPERT",
    "POLICY",
    "ActionSource",
    "RolloutExtension",
    "RolloutSettings",
    "RolloutStats",
    "Turn",
    "rollout_settings",
    "run_episodes",
]
