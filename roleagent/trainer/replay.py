"""SFT replay in the RL update (PPO-ptx): RL moves the policy without unlearning its warm start.

Ouyang et al. (2022, arXiv 2203.02155, eq. 2, "PPO-ptx") add the pre-training
log-likelihood to the PPO objective so that RL does not regress what it does not reward.
Here the replayed data is the warm start's own: the expert's examples of training games
(``run_dir/sft/expert.jsonl``, ``roleagent.sft.warm_start``). Each optimizer step of the RL
update (``roleagent.trainer.update``) minimises

    L = L_PPO + c · L_SFT,    L_SFT = − Σ_{loss tokens t} log π(x_t | x_<t) / (number of loss tokens)

with ``c`` = ``optim.sft_replay_coef`` and L_SFT the SFT stage's token-mean cross-entropy
(``roleagent.sft.train``: temperature 1, the whole vocabulary) over
``optim.sft_replay_examples`` examples drawn afresh for that step. Worked example: c = 0.5
and a draw whose three loss tokens have log-probs (−0.1, −0.2, −0.3) add 0.5 · 0.2 = 0.1 to
the step's loss; at the warm start L_SFT is the SFT's final loss (small), so the term pulls
only as far as RL has moved the policy away from the expert's actions.

Why (``benchmarks/RESULTS.md``, "The RL phase from run 3's SFT checkpoint"): the main job's
two RL iterations lost 3 of its 15 ``valid_seen`` games on every seed, and a control that
trained the same samples with shuffled advantages did not, so the loss came from what the
advantages teach (mostly one task type's lamp behaviour), not from the size of the step.

Where the data comes from (:func:`replay_path`): ``optim.sft_replay_data`` if set, else the
run's own warm start (``sft.enabled``: written before RL starts), else the warm start that
``model.init_from`` names (an SFT checkpoint ``.../sft/final`` next to its ``expert.jsonl``).
Single process only: under data parallel or FSDP the term is refused, not silently dropped.
"""

from __future__ import annotations

import random
from pathlib import Path

from roleagent.fields import ConfigError

EXPERT = "expert.jsonl"


def replay_path(cfg) -> Path:
    """The examples ``optim.sft_replay_data`` names or implies (module docstring); raises
    :class:`ConfigError` when there are none to find. A run that warms up itself gets its
    path before the file exists (the warm start writes it)."""
    if cfg.optim.sft_replay_data:
        path = Path(cfg.optim.sft_replay_data)
    elif cfg.sft.enabled and cfg.sft.expert_tasks > 0:
        return Path(cfg.run_dir) / "sft" / EXPERT
    elif cfg.model.init_from:
        path = Path(cfg.model.init_from).parent / EXPERT
    else:
        path = None
    if path is None or not path.is_file():
        where = f" ({path} does not exist)" if path is not None else ""
        raise ConfigError(
            f"optim.sft_replay_coef > 0 needs examples to replay{where}: set optim.sft_replay_data to a "
            "JSONL of chat examples, or warm-start the run (sft.enabled with sft.expert_tasks > 0, or "
            "model.init_from=<run>/sft/final beside its expert.jsonl)"
        )
    return path


class SFTReplay:
    """The replay term of one run: its examples, read and encoded at the first step (the
    warm start writes them after the trainer is built), and drawn from the update's ``rng``."""

    def __init__(self, path: Path, encode, *, coef: float, n_examples: int, micro_batch_tokens: int):
        self.path, self.encode = path, encode
        self.coef, self.n_examples, self.micro_batch_tokens = coef, n_examples, micro_batch_tokens
        self._examples = None

    def examples(self) -> list:
        if self._examples is None:
            from roleagent.sft.sources import read_examples

            if not self.path.is_file():
                raise ConfigError(f"optim.sft_replay_coef > 0: {self.path} does not exist (no examples to replay)")
            self._examples = [self.encode(e) for e in read_examples(self.path)]
        return self._examples

    def backward(self, policy, rng: random.Random) -> float:
        """Accumulate ``coef`` times the gradient of L_SFT on a fresh draw; returns L_SFT."""
        from roleagent.sft.train import sft_step_loss

        examples = self.examples()
        batch = rng.sample(examples, min(self.n_examples, len(examples)))
        loss, _ = sft_step_loss(policy, batch, self.micro_batch_tokens, scale=self.coef)
        return loss


def sft_replay(cfg, engine) -> SFTReplay | None:
    """The run's replay term, or None when ``optim.sft_replay_coef`` is 0."""
    o = cfg.optim
    if o.sft_replay_coef <= 0:
        return None
    from roleagent.sft.data import encode_example

    return SFTReplay(
        replay_path(cfg),
        lambda example: encode_example(engine, example),
        coef=o.sft_replay_coef,
        n_examples=o.sft_replay_examples,
        micro_batch_tokens=o.micro_batch_tokens,
    )
