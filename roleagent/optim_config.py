"""The ``optim:`` section of a recipe: the policy's RL update (``roleagent.trainer.update``)
and its optimizer (``roleagent.trainer.optimizer``: AdamW, schedule, clipping, non-finite
steps). The critic, SFT and Agent-R have their own sections with the same optimizer."""

from __future__ import annotations

from dataclasses import dataclass

from roleagent.fields import setting


@dataclass
class OptimConfig:
    lr: float = setting(1e-4, "AdamW learning rate (1e-4 suits LoRA; ~1e-6 for full fine-tuning)")
    lr_schedule: str = setting(
        "constant",
        "constant | cosine: the rate over the run's iterations * epochs * mini_batches optimizer steps "
        "(roleagent.trainer.optimizer)",
    )
    warmup_steps: int = setting(0, "optimizer steps of linear warm-up from lr/warmup_steps to lr")
    min_lr_ratio: float = setting(0.0, "cosine: the rate ends at min_lr_ratio * lr")
    weight_decay: float = setting(0.0, "AdamW weight decay")
    epochs: int = setting(1, "passes over each iteration's samples (verl's ppo_epochs, TRL's num_iterations)")
    mini_batches: int = setting(
        1,
        "optimizer steps per epoch: the iteration's samples split into this many mini-batches "
        "(verl: train_batch_size / ppo_mini_batch_size; TRL: steps_per_generation); an iteration "
        "makes epochs * mini_batches steps",
    )
    micro_batch_tokens: int = setting(2048, "padded tokens per forward/backward (gradient accumulation beyond it)")
    clip_low: float = setting(0.2, "PPO ratio lower clip 1 - clip_low")
    clip_high: float = setting(0.28, "PPO ratio upper clip 1 + clip_high")
    dual_clip: float | None = setting(None, "dual-clip constant c for negative advantages (3.0), null = off")
    kl_coef: float = setting(
        0.0,
        "k3 KL-to-reference loss coefficient, k3 clamped to +-10 as verl's low_var_kl (0 skips the reference pass; Role-Agent Table 5: 1e-3)",
    )
    entropy_coef: float = setting(0.0, "entropy bonus coefficient")
    sft_replay_coef: float = setting(
        0.0,
        "PPO-ptx (Ouyang et al., 2022): each optimizer step adds this times the SFT loss of "
        "sft_replay_examples warm-start examples, so RL does not unlearn them (roleagent.trainer.replay); 0 = off",
    )
    sft_replay_examples: int = setting(4, "examples drawn for each optimizer step's SFT replay term")
    sft_replay_data: str = setting(
        "",
        "chat examples (JSONL) to replay; '' = the warm start's expert.jsonl (the run's own, or the one "
        "beside model.init_from's SFT checkpoint)",
    )
    fsdp: bool = setting(
        False, "under torchrun: shard weights, gradients and AdamW state with FSDP2 (full fine-tuning; docs/scaling.md)"
    )
    grad_clip: float = setting(1.0, "gradient norm clip")
    max_nonfinite_skips: int = setting(
        3,
        "consecutive optimizer steps with a NaN/inf gradient norm that are skipped (gradients zeroed, counted in update/nonfinite_skipped, diagnosed in run_dir/nonfinite.jsonl) before the next one raises FloatingPointError; 0 raises at the first",
    )
    skip_zero_advantage: bool = setting(
        True,
        "skip the forward/backward of samples whose advantage is exactly 0; they stay in the "
        "token-mean denominator (verl-agent's: all tokens of the mini-batch), so the policy-gradient "
        "step is unchanged; only their KL/entropy terms are lost",
    )
    measure_shift: bool = setting(
        True,
        "after each update, one forward pass over the trained samples measures how far log pi of "
        "positive- and negative-advantage actions moved (update/logp_shift_pos, update/logp_shift_neg)",
    )
    recompute_old_logprobs: bool = setting(
        False,
        "before each update, recompute pi_old of the trained samples with the training forward "
        "(verl's compute_log_prob) instead of the rollout engine's log-probs; reports the gap "
        "(update/old_logp_gap): ~1e-5 in fp32, larger in bf16, where it would enter every ratio",
    )
    pack_episodes: bool = setting(
        True,
        "train nested steps of an episode (rollout.context=full) as one packed sequence: one "
        "forward/backward per episode, a mask over every step's action tokens, same loss and gradient",
    )
