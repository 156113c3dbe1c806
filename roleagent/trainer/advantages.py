"""Flatten trajectories into step arrays and call an advantage estimator by name.

This is the only bridge between the data model (``roleagent.types``) and the algorithm
layer (``roleagent.algos``), which sees nothing but arrays. ``algo.name`` picks the
estimator from :data:`ESTIMATORS` (a short name → ``"module:function"``), from the
``roleagent.estimators`` entry-point group, or as an explicit ``"module:function"``.

An estimator is ``fn(batch: StepBatch, cfg: AlgoConfig) -> Advantages | np.ndarray``
(with ``fn.uses_critic = True`` when it reads the critic's values ``batch.values``):
one advantage per step sample of ``batch`` (shape (n,)), plus, where the method has
them, its named parts (``episode``, ``step``) and the state-group id of each sample; the
trainer writes all of them into the rollout dumps (``step.extras["algo"]``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from roleagent import algos
from roleagent.algos.gae import gae, whiten
from roleagent.config import AlgoConfig
from roleagent.fields import ConfigError, from_dict
from roleagent.plugins import PluginError, load_object, resolve
from roleagent.types import Trajectory

#: Built-in estimators. Role-Agent's lives with the method that defines it.
ESTIMATORS: dict[str, str] = {
    "grpo": "roleagent.trainer.advantages:grpo",
    "rloo": "roleagent.trainer.advantages:rloo",
    "gigpo": "roleagent.trainer.advantages:gigpo",
    "ppo": "roleagent.trainer.advantages:ppo",
    "role_agent": "roleagent.methods.role_agent.wia:role_agent_estimator",
}


@dataclass
class StepBatch:
    """Step samples of the non-crashed trajectories, each trajectory's steps in time order."""

    trajectories: list[Trajectory]
    group_ids: np.ndarray  # (n,) task id of each step's episode group
    traj_ids: np.ndarray  # (n,) index into ``trajectories``
    rewards: np.ndarray  # (n,) raw environment rewards (no invalid-action penalty)
    penalties: np.ndarray  # (n,) invalid-action penalty of each step (0 when valid)
    states: list  # (n,) state keys
    actions: list = field(default_factory=list)  # (n,) executed actions (None: unparsable)
    values: np.ndarray | None = None  # (n,) the critic's V(s) of each step (critic.enabled), else None

    @classmethod
    def from_trajectories(cls, trajectories: list[Trajectory]) -> StepBatch:
        kept = [t for t in trajectories if not t.crashed and t.steps]
        group_ids, traj_ids, rewards, penalties, states, actions = [], [], [], [], [], []
        for index, trajectory in enumerate(kept):
            for step in trajectory.steps:
                group_ids.append(trajectory.task.id)
                traj_ids.append(index)
                rewards.append(step.env_reward)
                penalties.append(step.penalty)
                states.append(step.state_key)
                actions.append(step.action)
        return cls(
            trajectories=kept,
            group_ids=np.asarray(group_ids, dtype=object),
            traj_ids=np.asarray(traj_ids, dtype=np.int64),
            rewards=np.asarray(rewards, dtype=np.float64),
            penalties=np.asarray(penalties, dtype=np.float64),
            states=states,
            actions=actions,
        )

    @property
    def steps(self) -> list:
        """The step objects, in sample order."""
        return [s for t in self.trajectories for s in t.steps]

    def __len__(self) -> int:
        return len(self.rewards)


@dataclass
class Advantages:
    """An estimator's answer: ``value`` (n,) is trained on; ``parts`` (name → (n,)) and
    ``state_group`` (n,) are what it was made of, for the rollout dumps."""

    value: np.ndarray
    parts: dict[str, np.ndarray] = field(default_factory=dict)
    state_group: np.ndarray | None = None


#: ``fn(batch, algo)``, or ``fn(batch, algo, settings)`` when ``fn.config_class`` is set
Estimator = Callable[..., "Advantages | np.ndarray"]


def estimator(name: str) -> Estimator:
    """The estimator registered as ``name`` (short name, entry point or ``module:function``)."""
    return load_object(resolve("estimators", name, ESTIMATORS))


def check_estimator(name: str) -> bool:
    """``algo.name`` names a callable estimator (imported, not run); returns whether it
    reads the critic's values (its ``uses_critic`` attribute, default False)."""
    try:
        fn = estimator(name)
    except PluginError as error:
        raise ConfigError(f"algo.name: {error}") from None
    if not callable(fn):
        raise ConfigError(f"algo.name={name!r}: {fn!r} is not callable")
    return bool(getattr(fn, "uses_critic", False))


def estimator_settings(cfg: Any) -> Any:
    """The settings of a plug-in estimator that declares a ``config_class``: ``cfg.algo_settings``
    checked against it (unknown keys and wrong types are :class:`ConfigError`); ``None`` for
    an estimator without one. The built-in estimators read the typed ``algo`` section."""
    name = cfg.algo.name
    config_class = getattr(estimator(name), "config_class", None)
    if config_class is None:
        if cfg.algo_settings:
            where = "its settings are the 'algo' section" if name in ESTIMATORS else "it declares no config_class"
            raise ConfigError(f"algo_settings: algo.name={name} takes none ({where})")
        return None
    return from_dict(config_class, cfg.algo_settings, "algo_settings")


def compute_advantages(batch: StepBatch, cfg: AlgoConfig, settings: Any = None) -> Advantages:
    """One advantage per step sample for ``cfg.name``. Shape (n,). An estimator that declares
    a ``config_class`` is called with its ``settings`` too (``None``: that class's defaults;
    :func:`estimator_settings` builds them from the config)."""
    if len(batch) == 0:
        return Advantages(np.zeros(0))
    fn = estimator(cfg.name)
    config_class = getattr(fn, "config_class", None)
    if config_class is None:
        out = fn(batch, cfg)
    else:
        out = fn(batch, cfg, settings if settings is not None else config_class())
    out = out if isinstance(out, Advantages) else Advantages(np.asarray(out, dtype=np.float64))
    if out.value.shape != (len(batch),):
        raise ValueError(f"estimator {cfg.name!r} returned shape {out.value.shape}, expected ({len(batch)},)")
    return out


def _placed(batch: StepBatch, cfg: AlgoConfig) -> dict:
    return dict(penalties=batch.penalties, penalty_placement=cfg.penalty_placement)


def grpo(batch: StepBatch, cfg: AlgoConfig) -> Advantages:
    """GRPO: the trajectory score normalised within its group (Shao et al., 2024, arXiv 2402.03300)."""
    a = algos.grpo_advantages(batch.group_ids, batch.traj_ids, batch.rewards, mode=cfg.norm, **_placed(batch, cfg))
    return Advantages(a, {"episode": a})


def rloo(batch: StepBatch, cfg: AlgoConfig) -> Advantages:
    """RLOO: the trajectory score minus the leave-one-out mean of its group (Ahmadian et al., 2024)."""
    a = algos.rloo_advantages(batch.group_ids, batch.traj_ids, batch.rewards, **_placed(batch, cfg))
    return Advantages(a, {"episode": a})


def gigpo(batch: StepBatch, cfg: AlgoConfig) -> Advantages:
    """GiGPO (Feng et al., 2025, arXiv 2505.10978): ``A = A^E + step_weight · A^S``."""
    a_episode, a_step, groups = algos.gigpo_advantage_parts(
        batch.group_ids,
        batch.traj_ids,
        batch.rewards,
        batch.states,
        gamma=cfg.gamma,
        similarity_threshold=cfg.similarity_threshold,
        mode=cfg.norm,
        **_placed(batch, cfg),
    )
    a_step = step_part(a_step, groups, batch, cfg)
    return Advantages(a_episode + cfg.step_weight * a_step, {"episode": a_episode, "step": a_step}, groups)


def step_part(a_step: np.ndarray, groups: np.ndarray, batch: StepBatch, cfg: AlgoConfig) -> np.ndarray:
    """GiGPO's and Role-Agent's step part ``A^S`` after ``algo.same_action_groups``: as
    computed (``keep``) or 0 in the anchor groups where every sample took the same action
    (``zero``; ``algos.same_action_groups``)."""
    if cfg.same_action_groups == "keep":
        return a_step
    return np.where(algos.same_action_groups(groups, batch.actions), 0.0, a_step)


def ppo(batch: StepBatch, cfg: AlgoConfig) -> Advantages:
    """PPO with a critic: GAE over each trajectory's steps (Schulman et al., 2016, arXiv
    1506.02438) from the critic's values ``batch.values``, with ``algo.gamma`` and
    ``algo.lam``, then normalised over the batch (``algo.norm``: mean_std_norm whitens as
    verl's GAE does, mean_norm only centres). The invalid-action penalty is placed as for
    the other estimators: ``"reward"`` folds it into the step reward before GAE, ``"step"``
    (verl-agent's) subtracts it from the step's own advantage and value target afterwards.
    Parts: ``gae`` (before normalisation), ``returns`` (the critic's targets), ``value``."""
    if batch.values is None:
        raise ValueError("algo.name=ppo needs the critic's values of the batch: set critic.enabled=true")
    folded, own = algos.split_penalties(batch.penalties, len(batch), placement=cfg.penalty_placement)
    raw, returns = gae(batch.traj_ids, batch.rewards - folded, batch.values, gamma=cfg.gamma, lam=cfg.lam)
    raw, returns = raw - own, returns - own
    value = whiten(raw, std=cfg.norm == "mean_std_norm")
    return Advantages(value, {"gae": raw, "returns": returns, "value": np.asarray(batch.values, dtype=np.float64)})


ppo.uses_critic = True  # the trainer runs the critic and fills batch.values (config: critic.enabled)


def state_group_sizes(state_group: np.ndarray) -> np.ndarray:
    """How many step samples share each sample's state group: ``[0, 1, 0]`` → ``[2, 1, 2]``."""
    _, inverse, counts = np.unique(np.asarray(state_group), return_inverse=True, return_counts=True)
    return counts[inverse.reshape(-1)]


def write_records(batch: StepBatch, advantages: Advantages) -> None:
    """``step.extras["algo"]``: the advantage, its parts, the state group of each step and
    that group's size (GiGPO's step part is 0 in a group of one)."""
    sizes = None if advantages.state_group is None else state_group_sizes(advantages.state_group)
    for i, step in enumerate(batch.steps):
        record = {"advantage": float(advantages.value[i])}
        record.update({name: float(part[i]) for name, part in advantages.parts.items()})
        if sizes is not None:
            record["state_group"] = int(advantages.state_group[i])
            record["state_group_size"] = int(sizes[i])
        step.extras["algo"] = record


def zero_variance_fraction(batch: StepBatch) -> float:
    """Share of episode groups whose trajectories all have the same score (no GRPO signal)."""
    scores: dict[str, set[float]] = {}
    for trajectory in batch.trajectories:
        scores.setdefault(trajectory.task.id, set()).add(round(trajectory.episode_return, 9))
    return float(np.mean([len(s) == 1 for s in scores.values()])) if scores else 0.0
