"""World-In-Agent, Role-Agent's predictive reward (Wang et al., 2026, arXiv 2606.10917,
§3.2, eqs. 2–9): all of it that is not pure maths (that is ``roleagent.algos.wia``).

Role-Agent is **GiGPO with prediction-modulated returns**: GiGPO's episode advantage plus
a state-group advantage whose step return is ``R_t = R_task · (1 + R_pre)`` with
``R_pre`` from the LMS scores of the policy's own predictions of the next H states. This
module is the one place that says so:

1. the predictor role: after the actor chooses a_t, the same model is prompted with the
   augmented prompt x_pre (task, current state, the action) to predict the next H
   observations ŝ_{t,1..H} (eq. 2). The answer format is
   ``<state1>…</state1><state2>…</state2>…``; the assistant turn is pre-filled with
   ``<state1>`` so small models start in format. A missing or unparsable state is the
   empty string (it scores 0 against any non-empty real state). Two prompts
   (``wia.prompt``): ``separate`` is x_pre as above (:func:`predictor_messages`, the
   paper's); ``continuation`` (default) continues the actor's chat token for token: its
   prompt, the sampled action ids, then a user message with the same request
   (:func:`prediction_request`: the action taken and the states to predict), so the
   predictor sees the same information plus the actor's context, and with the engine's
   prefix cache the action pass's KV is reused (only the request is prefilled). A
   continuation that would exceed the engine's ``max_prompt_tokens`` falls back to the
   separate prompt for that turn (never left-truncated);
2. :class:`PredictionExtension`: that prediction as one more batched generation per
   rollout turn, recorded in ``step.extras["wia"]`` (``predictions``; ``prompt_ids``,
   ``ids``, ``logprobs`` of the generation), scored at the end of the episode
   (``scores``: r̃_{t,h}, eq. 4, NaN past the end or without a prediction);
3. :func:`role_agent_estimator`, the ``role_agent`` advantage estimator (eq. 9);
4. :class:`WorldInAgent`, the method (section ``wia``) that plugs 2 into the rollouts and
   optionally trains the prediction tokens (``wia.train_predictions``).

The predictor's supervised warm start (``sft.predictor``: these prompts, the environment's
real next observations as targets) and its held-out competence metric are
``roleagent.sft.predictor``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from roleagent import algos
from roleagent.engine.base import SamplingParams
from roleagent.fields import ConfigError
from roleagent.methods.role_agent.aiw.analysis import point_biserial
from roleagent.trainer.advantages import Advantages, StepBatch, step_part
from roleagent.trainer.methods import Method
from roleagent.trainer.samples import TrainSample
from roleagent.types import Trajectory

PREFIX = "<state1>"


def prediction_request(action: str, horizon: int) -> str:
    """The action and what to predict: the end of x_pre, and the whole user message of the
    continuation prompt.

    >>> prediction_request("open door", 2)
    'Action taken: open door\\n\\nPredict the next 2 observations the environment will show, in this format: <state1>...</state1><state2>...</state2>'
    """
    tags = "".join(f"<state{h}>...</state{h}>" for h in range(1, horizon + 1))
    steps = "the next observation" if horizon == 1 else f"the next {horizon} observations"
    return f"Action taken: {action}\n\nPredict {steps} the environment will show, in this format: {tags}"


def predictor_messages(
    *, instruction: str, observation: str, action: str, horizon: int, max_observation_chars: int = 400
) -> list[dict[str, str]]:
    """x_pre for one step: predict the observations after ``action`` and the next H−1 steps."""
    content = (
        f"{instruction.strip()}\n\nCurrent observation: {observation[:max_observation_chars]}\n"
        + prediction_request(action, horizon)
    )
    return [
        {"role": "system", "content": "You predict how a text environment responds to actions."},
        {"role": "user", "content": content},
    ]


def parse_predictions(text: str, horizon: int) -> list[str]:
    """Predicted states ŝ_{t,1..H} from a generation that followed the ``<state1>`` prefix.

    >>> parse_predictions("You see a key.</state1><state2>You win.</state2>", 2)
    ['You see a key.', 'You win.']
    >>> parse_predictions("garbage", 2)
    ['garbage', '']
    """
    text = PREFIX + text
    out = []
    for h in range(1, horizon + 1):
        match = re.search(rf"<state{h}>(.*?)(?:</state{h}>|<state{h + 1}>|$)", text, re.DOTALL)
        out.append(" ".join(match.group(1).split()) if match else "")
    return out


def stop_strings(horizon: int) -> tuple[str, ...]:
    return (f"</state{horizon}>",)


# ------------------------------------------------------------ rollout extension ------


class PredictionExtension:
    """Predict the next ``horizon`` observations after every valid action, in one batched
    generation per turn; score them when the episode ends."""

    name = "wia"

    def __init__(
        self, horizon: int, *, max_new_tokens: int, temperature: float, top_p: float, prompt: str = "continuation"
    ):
        self.horizon = horizon
        self.prompt = prompt  # continuation | separate (``wia.prompt``)
        self.sampling = SamplingParams(
            max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, stop=stop_strings(horizon)
        )

    def after_actions(self, engine, turns) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = [{"predictions": []} for _ in turns]
        rows = [i for i, turn in enumerate(turns) if turn.valid]
        prompts = [self.prompt_ids(engine, turns[i]) for i in rows]
        if prompts:
            for i, gen in zip(rows, engine.generate(prompts, self.sampling)):
                records[i] = {
                    "predictions": parse_predictions(gen.text, self.horizon),
                    "prompt_ids": gen.prompt_ids,
                    "ids": gen.ids,
                    "logprobs": gen.logprobs,
                    "cut": gen.truncated,  # stopped by wia.max_new_tokens, not by the closing tag
                }
        return records

    def prompt_ids(self, engine, turn) -> list[int]:
        """The prediction prompt of one turn (``wia.prompt``; the module docstring)."""
        if self.prompt == "continuation" and turn.prompt_ids:
            request = [{"role": "user", "content": prediction_request(turn.action, self.horizon)}]
            ids = engine.extend_chat(turn.prompt_ids, turn.action_ids, request, response_prefix=PREFIX)
            if ids is not None:
                return ids
        messages = predictor_messages(
            instruction=turn.instruction, observation=turn.observation, action=turn.action, horizon=self.horizon
        )
        return engine.encode_chat(messages, response_prefix=PREFIX)

    def finish(self, trajectory: Trajectory) -> None:
        score_predictions(trajectory, self.horizon)


def score_predictions(trajectory: Trajectory, horizon: int) -> None:
    """Fill ``step.extras["wia"]["scores"]`` with r̃_{t,h} (eq. 4); NaN past the end or when
    no prediction was made (invalid action), so those terms drop out of R_pre."""
    steps = trajectory.steps
    if not steps:
        return
    records = [s.extras.setdefault("wia", {"predictions": []}) for s in steps]
    future = [s.observation for s in steps[1:]] + [trajectory.final_observation]
    predictions = [r["predictions"] if r["predictions"] else [None] * horizon for r in records]
    matrix = algos.prediction_score_matrix(predictions, future, horizon=horizon)  # (T, H)
    for record, row in zip(records, matrix):
        record["scores"] = [float(x) for x in row] if record["predictions"] else [math.nan] * horizon


# ------------------------------------------------------------ advantage estimator ----


def prediction_scores(steps: Sequence) -> np.ndarray:
    """(n, H) scores of the steps' World-In-Agent records, NaN-padded; (n, 1) zeros when no
    step has one (World-In-Agent off: R_t = R_task, the "w/o predictive reward" ablation)."""
    rows = [list(s.extras["wia"].get("scores", [])) if "wia" in s.extras else None for s in steps]
    if all(row is None for row in rows):
        return np.zeros((len(rows), 1))
    horizon = max(len(row) for row in rows if row is not None)
    padded = [(row or []) + [math.nan] * (horizon - len(row or [])) for row in rows]
    return np.asarray(padded, dtype=np.float64).reshape(len(rows), horizon)


def role_agent_estimator(batch: StepBatch, cfg) -> Advantages:
    """Role-Agent ``A = A^S(R_t) + α·A^E`` (eq. 9) over ``batch``, with R_t modulated by the
    steps' prediction scores (``algos.role_agent_advantage_parts``) and A^E's statistics
    per ``algo.episode_stats`` (``algos.wia.episode_advantages``).

    Parts: ``episode`` (A^E), ``step`` (A^S) and ``step_task``, the A^S the same steps would
    get from R_task alone (prediction weight 0: GiGPO's step part on this batch), which is
    not trained on; it says what the predictions changed (``WorldInAgent.after_iteration``)."""

    def parts(weight: float):
        a_state, a_episode, groups = algos.role_agent_advantage_parts(
            batch.group_ids,
            batch.traj_ids,
            batch.rewards,
            batch.states,
            scores,
            penalties=batch.penalties,
            penalty_placement=cfg.penalty_placement,
            gamma=cfg.gamma,
            mode=cfg.norm,
            similarity_threshold=cfg.similarity_threshold,
            episode_stats=cfg.episode_stats,
            prediction_weight=weight,
        )
        return step_part(a_state, groups, batch, cfg), a_episode, groups

    scores = prediction_scores(batch.steps)
    a_state, a_episode, groups = parts(cfg.prediction_weight)
    a_task = parts(0.0)[0]
    return Advantages(
        a_state + cfg.alpha * a_episode, {"episode": a_episode, "step": a_state, "step_task": a_task}, groups
    )


def credit_metrics(steps: Sequence) -> dict[str, float]:
    """What the predictions did to the step credit of one iteration's ``steps`` (their
    ``extras["algo"]`` records, written by the trainer after this estimator):
    ``credit_credited`` / ``credit_sign_changed`` / ``credit_corr`` compare the trained A^S
    with the ``step_task`` part (``algos.credit_change``), and ``score_std_in_group`` is the
    mean standard deviation of the steps' mean prediction scores inside the state groups of
    two or more scored steps, the only place a score can move credit."""
    records = [(s.extras["algo"], s.extras.get("wia", {}).get("scores", [])) for s in steps if "algo" in s.extras]
    records = [(algo, [x for x in scores if not math.isnan(x)]) for algo, scores in records if "step_task" in algo]
    if not records:
        return {}
    change = algos.credit_change([a["step"] for a, _ in records], [a["step_task"] for a, _ in records])
    out = {f"credit_{k}": float(v) for k, v in change.items()}
    groups: dict[int, list[float]] = {}
    for algo, scores in records:
        if scores:
            groups.setdefault(algo["state_group"], []).append(float(np.mean(scores)))
    spreads = [float(np.std(v)) for v in groups.values() if len(v) > 1]
    if spreads:
        out["score_std_in_group"] = float(np.mean(spreads))
    return out


# ------------------------------------------------------------------------ method -----


class WorldInAgent(Method):
    """Section ``wia``: predictions in the rollouts, optionally trained (``train_predictions``)."""

    name = "wia"

    def __init__(self, context, config):
        super().__init__(context, config)
        settings = context.settings
        self.horizon = config.horizon or algos.prediction_horizon(settings.max_steps, config.horizon_fraction)
        self.extension = PredictionExtension(
            self.horizon,
            max_new_tokens=config.max_new_tokens,
            temperature=settings.temperature,
            top_p=settings.top_p,
            prompt=config.prompt,
        )

    @classmethod
    def check_config(cls, cfg) -> None:
        if cfg.algo.name != "role_agent":
            raise ConfigError("wia.enabled needs algo.name=role_agent (set wia.enabled=false for other algorithms)")

    def rollout_extension(self) -> PredictionExtension:
        return self.extension

    def after_iteration(self, trajectories, iteration: int) -> dict[str, float]:
        """``wia/score``: the mean over trajectories of their mean prediction score;
        ``wia/success_corr``: its point-biserial correlation with success (Role-Agent App. B.2);
        ``wia/credit_*`` and ``wia/score_std_in_group``: what the predictions did to the step
        credit (:func:`credit_metrics`); ``wia/tokens`` and ``wia/cut``: the predictions' mean
        length in tokens and the share cut at ``wia.max_new_tokens`` (their cost)."""

        def scores_of(t: Trajectory) -> list[float]:  # the scored predictions (NaN: none parsed)
            return [x for step in t.steps for x in step.extras.get("wia", {}).get("scores", []) if not math.isnan(x)]

        out: dict[str, float] = {}
        scored = [(float(np.mean(s)), t.success) for t in trajectories if (s := scores_of(t))]
        if scored:
            scores, successes = zip(*scored)
            out = {"score": float(np.mean(scores)), "success_corr": point_biserial(list(scores), list(successes))[0]}
        made = [r for t in trajectories for step in t.steps if "ids" in (r := step.extras.get("wia", {}))]
        if made:
            out |= {
                "tokens": float(np.mean([len(r["ids"]) for r in made])),
                "cut": float(np.mean([r["cut"] for r in made])),
            }
        return out | credit_metrics([step for t in trajectories for step in t.steps])

    def extra_samples(self, step, advantage: float) -> list[TrainSample]:
        record = step.extras.get("wia", {})
        if not (self.config.train_predictions and record.get("ids")):
            return []
        return [TrainSample(record["prompt_ids"], record["ids"], record["logprobs"], advantage)]
