"""SEAL (Hu et al., 2026) in the training loop: diagnosis → weights, profile → interface.

``SealMethod`` (section ``seal``) plugs into the loop as a
:class:`roleagent.trainer.methods.Method`. Per iteration k:

1. rollouts on interface I_k (train tasks; the env applies the evolved interface to the
   ``train`` split only, evaluation always sees the plain one);
2. ``adjust_advantages``: each trajectory's diagnosis (the last step's
   ``info["diagnosis"]``, or, for a trajectory the rollout cut before the env finished
   it, a replay on the env workers bounded by the worker timeout) gives turn labels
   y_1..y_K and

       w(τ) = clip(mean_k ρ(y_k), w_min, w_max),    Â = w(τ) · A        (w > 0: sign kept)

   where A is the group-normalised advantage of every step sample of τ (w is recorded
   in ``trajectory.extras["seal"]["weight"]``, so rollout dumps show it) and ρ are the
   static utilities (``STATIC_UTILITIES`` + ``seal.utilities``) or, with
   ``seal.utility_ema``, the EMA ones. A trajectory without a diagnosis (crashed, not
   diagnosable, replay failed or timed out) gets w = 1;
3. the policy update;
4. ``after_iteration``: with ``seal.utility_ema`` (the authors' code's closed loop) the
   utilities take one EMA step with this iteration's labels and verifier rewards; with
   ``seal.interface_updates`` (the paper's closed loop) the failure profile (paper
   priority labels, per trajectory) is updated and pushed to every env worker
   (``pool.call_all("set_profile", state)``), which selects the guidelines of I_{k+1}
   and, with the env's ``activation="profile"``, which cues it shows (Hu et al., 2026, §3.3).

**Ordering (decided here).** The EMA utilities that weight iteration k's batch are those
after iteration k − 1's update: ``update`` runs after weighting, in ``after_iteration``.
Reasons: (a) the paper's loop builds interface I_{k+1} from the diagnoses of round k, and
we keep the two halves of the loop symmetric (both adapt from the previous rounds); (b) a
batch never sets the utilities that weight itself, so a batch dominated by one failure
cannot amplify its own weight within the same update. The authors' trainer observes the
batch first and then weights it with the updated utilities (one EMA step earlier than
here). Iteration 0 uses the static utilities.

**Rewards** fed to the profile and the EMA are the binary verifier outcome
(``Trajectory.success``), never the shaped return with format penalties.

**State.** ``state_dict`` holds the failure profile and the EMA state; on load the
profile is pushed to the workers at once, so a resumed run's next rollout sees exactly
the interface an uninterrupted run would. A worker restarted mid-iteration (crash, or a
diagnosis replay that timed out) starts with an empty profile until the next push (end of
that iteration; evaluation is plain anyway).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from roleagent.algos.seal import (
    STATIC_UTILITIES,
    ClosedLoopWeights,
    expand_to_samples,
    reweight_advantages,
    seal_trajectory_weights,
)
from roleagent.methods.seal.config import SEALConfig, validate_seal
from roleagent.trainer.advantages import StepBatch
from roleagent.trainer.methods import Method
from roleagent.types import Step, Trajectory


def _last_diagnosis(trajectory: Trajectory) -> dict[str, Any] | None:
    for step in reversed(trajectory.steps):
        if isinstance(step.info, dict) and isinstance(step.info.get("diagnosis"), dict):
            return step.info["diagnosis"]
    return None


def _replay_copy(trajectory: Trajectory) -> Trajectory:
    """What a diagnosis replay reads (task, each step's action text and validity), without
    the token ids and log-probs, so the copy sent to a worker process stays small."""
    steps = [
        Step(
            observation="",
            state_key=None,
            action_text=s.action_text,
            action=s.action,
            valid=s.valid,
        )
        for s in trajectory.steps
    ]
    return Trajectory(
        task=trajectory.task,
        steps=steps,
        success=trajectory.success,
        instruction=trajectory.instruction,
        seed=trajectory.seed,
    )


class SealMethod(Method):
    """Diagnosis-guided advantage reweighting + utility EMA + interface evolution."""

    name = "seal"
    config_class = SEALConfig

    def __init__(
        self, context, cfg: SEALConfig, *, diagnose: Callable[[Trajectory], dict[str, Any] | None] | None = None
    ) -> None:
        """``context.pool`` is the trainer's env pool (for replay diagnosis on its workers
        and profile pushes; ``context`` may be None without one); ``diagnose`` replaces
        the pool's replay with an in-process function (tests)."""
        super().__init__(context, cfg)
        self.pool = getattr(context, "pool", None)
        pool = self.pool
        self._diagnose = diagnose
        self.utilities = {**STATIC_UTILITIES, **{k: float(v) for k, v in cfg.utilities.items()}}
        self.ema = (
            ClosedLoopWeights(
                self.utilities,
                beta=cfg.beta,
                alpha=cfg.alpha,
                confidence_samples=cfg.confidence_samples,
                window=cfg.window,
                w_min=cfg.w_min,
                w_max=cfg.w_max,
            )
            if (cfg.reweight and cfg.utility_ema)
            else None
        )
        self.profile = None
        if cfg.interface_evolution and cfg.interface_updates:
            from roleagent.envs.bfcl.interface import FailureProfile

            self.profile = FailureProfile(cfg.profile_window)
            meta = getattr(pool, "meta", None)
            if meta is not None:
                if "set_profile" not in getattr(meta, "remote_methods", ()):
                    raise ValueError(
                        f"seal.interface_updates: {type(meta).__name__} cannot receive a "
                        "failure profile (no 'set_profile' in remote_methods)"
                    )
                if getattr(meta, "interface_mode", "evolved") != "evolved":
                    raise ValueError(
                        "seal.interface_evolution needs the env built with interface='evolved' "
                        "(roleagent.trainer.checks.prepare sets it; a Trainer calls it)"
                    )
        self._batch_metrics: dict[str, float] = {}

    @classmethod
    def check_config(cls, cfg) -> None:
        validate_seal(cfg)

    @classmethod
    def resolve_config(cls, cfg) -> None:
        """``env.kwargs.interface`` follows ``seal.interface_evolution`` unless given."""
        if "interface" not in cfg.env.kwargs:
            cfg.env.kwargs["interface"] = "evolved" if cfg.seal.interface_evolution else "plain"

    # ----------------------------------------------------------------- diagnoses ------

    def prepare_diagnoses(self, trajectories: list[Trajectory]) -> None:
        """Set ``trajectory.diagnosis`` on every trajectory that has none yet: the last
        step's ``info["diagnosis"]``, else (``seal.diagnose_unfinished``) a replay on the
        pool's worker slots, all in parallel, each bounded by the worker timeout
        (``EnvPool.diagnose_many``). A replay that raises, times out or finds nothing
        leaves ``{"unavailable": reason}``: the trajectory gets w = 1 and is not replayed
        again."""
        todo = []
        for t in trajectories:
            if t.crashed or not t.steps or t.diagnosis is not None:
                continue
            t.diagnosis = _last_diagnosis(t)
            if t.diagnosis is None and self.config.diagnose_unfinished:
                todo.append(t)
        if not todo:
            return
        for t, (status, value) in zip(todo, self._replay(todo)):
            if status == "ok" and isinstance(value, dict) and "turn_labels" in value:
                t.diagnosis = value
            else:
                reason = "no diagnosis" if status == "ok" else str(value).splitlines()[0][:300]
                t.diagnosis = {"unavailable": f"{status}: {reason}"}

    def _replay(self, trajectories: list[Trajectory]) -> list[tuple[str, Any]]:
        if self._diagnose is not None:
            out = []
            for t in trajectories:
                try:
                    out.append(("ok", self._diagnose(t)))
                except Exception as error:  # noqa: BLE001 - a failed replay costs one diagnosis
                    out.append(("error", f"{type(error).__name__}: {error}"))
            return out
        if self.pool is None:
            return [("error", "no env pool to replay on")] * len(trajectories)
        return self.pool.diagnose_many([_replay_copy(t) for t in trajectories])

    def diagnosis(self, trajectory: Trajectory) -> dict[str, Any] | None:
        """The trajectory's diagnosis (cached on ``trajectory.diagnosis``); None when it
        crashed, cannot be diagnosed or its replay failed."""
        if trajectory.crashed or not trajectory.steps:
            return None
        self.prepare_diagnoses([trajectory])
        d = trajectory.diagnosis
        return d if isinstance(d, dict) and "turn_labels" in d else None

    def current_utilities(self) -> dict[str, float]:
        return self.ema.utilities() if self.ema is not None else dict(self.utilities)

    def trajectory_weights(self, trajectories: list[Trajectory]) -> np.ndarray:
        """w per trajectory from the current utilities; 1 where there is no diagnosis."""
        self.prepare_diagnoses(trajectories)
        diagnoses = [self.diagnosis(t) for t in trajectories]
        labels = [d["turn_labels"] if d is not None else [] for d in diagnoses]
        w = seal_trajectory_weights(labels, self.current_utilities(), w_min=self.config.w_min, w_max=self.config.w_max)
        w[[i for i, d in enumerate(diagnoses) if d is None]] = 1.0
        return w

    # ------------------------------------------------------------------- hooks -------

    def adjust_advantages(self, batch: StepBatch, advantages: np.ndarray) -> np.ndarray:
        if not batch.trajectories:
            self._batch_metrics = {}
            return advantages
        w = self.trajectory_weights(batch.trajectories)
        diagnosed = [self.diagnosis(t) is not None for t in batch.trajectories]
        for trajectory, weight in zip(batch.trajectories, w):
            trajectory.extras["seal"] = {"weight": float(weight), "applied": bool(self.config.reweight)}
        self._batch_metrics = {
            "weight_mean": float(w.mean()),
            "weight_min": float(w.min()),
            "weight_max": float(w.max()),
            "diagnosed": float(np.mean(diagnosed)),
            "diagnosis_unavailable": float(
                np.mean([isinstance(t.diagnosis, dict) and "unavailable" in t.diagnosis for t in batch.trajectories])
            ),
        }
        if not self.config.reweight or len(advantages) == 0:
            return advantages
        adjusted = reweight_advantages(advantages, expand_to_samples(w, batch.traj_ids))
        self._batch_metrics["advantage_abs_mean_before"] = float(np.abs(advantages).mean())
        return adjusted

    def after_iteration(self, trajectories: list[Trajectory], iteration: int) -> dict[str, float]:
        pairs = [(d, float(t.success)) for t in trajectories if (d := self.diagnosis(t)) is not None]
        metrics = dict(self._batch_metrics)
        self._batch_metrics = {}
        metrics.update(diagnosis_metrics(trajectories, [d for d, _ in pairs]))
        if self.ema is not None and pairs:
            self.ema.update([d["turn_labels"] for d, _ in pairs], [r for _, r in pairs])
        if self.ema is not None:
            metrics.update({f"rho_{k}": v for k, v in sorted(self.ema.utilities().items())})
        if self.profile is not None:
            for d, reward in pairs:
                self.profile.update_from_diagnosis(d, reward)
            self.push_profile()
            metrics["profile_size"] = float(len(self.profile))
            metrics["guidelines"] = float(len(self.profile.select_guidelines()))
        return metrics

    def push_profile(self) -> None:
        if self.profile is not None and self.pool is not None:
            self.pool.call_all("set_profile", self.profile.state_dict())

    # ----------------------------------------------------------------- state ----------

    def state_dict(self) -> dict[str, Any]:
        return {
            "utility_ema": self.ema.state_dict() if self.ema is not None else None,
            "profile": self.profile.state_dict() if self.profile is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not state:
            return
        ema_state = state.get("utility_ema")
        if self.ema is not None and ema_state is not None:
            self.ema.load_state_dict(ema_state)
        if self.profile is not None and state.get("profile") is not None:
            self.profile.load_state_dict(state["profile"])
            self.push_profile()


def diagnosis_metrics(trajectories: list[Trajectory], diagnoses: list[dict[str, Any]]) -> dict[str, float]:
    """Label distribution and tool-call validity of an iteration (all floats).

    ``label_<tag>``: share of ground-truth turns with that code-vocabulary tag;
    ``dominant_<type>``: share of diagnosed trajectories with that dominant type;
    ``valid_call_ratio``: calls that parsed and passed the schema checks (executed:
    status ok / tool_error / exec_error) over all calls; ``calls_per_turn``: calls per
    stepped model turn; ``call_turn_ratio``: stepped model turns with at least one call.
    """
    out: dict[str, float] = {}
    turns = Counter(tag for d in diagnoses for tag in d.get("turn_labels", []))
    total = sum(turns.values())
    for tag, n in sorted(turns.items()):
        out[f"label_{tag}"] = n / total
    dominant = Counter(d.get("dominant_type", "pass") for d in diagnoses)
    for tag, n in sorted(dominant.items()):
        out[f"dominant_{tag}"] = n / len(diagnoses)
    calls = [c for t in trajectories for s in t.steps for c in (s.info or {}).get("calls", []) or []]
    stepped = [s for t in trajectories for s in t.steps if s.valid and not (s.info or {}).get("crashed")]
    executed = [c for c in calls if c.get("status") in ("ok", "tool_error", "exec_error")]
    out["calls"] = float(len(calls))
    out["valid_call_ratio"] = len(executed) / len(calls) if calls else 0.0
    out["calls_per_turn"] = len(calls) / len(stepped) if stepped else 0.0
    out["call_turn_ratio"] = float(np.mean([bool((s.info or {}).get("calls")) for s in stepped])) if stepped else 0.0
    return out
