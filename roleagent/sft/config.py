"""The ``sft:`` section of a recipe: the supervised warm start (``roleagent.sft``)."""

from __future__ import annotations

from dataclasses import dataclass

from roleagent.fields import _f


@dataclass
class SFTConfig:
    enabled: bool = _f(
        False,
        "warm start: evaluate the base policy, fine-tune it on expert demonstrations (roleagent.sft) "
        "into run_dir/sft, evaluate it, then run RL from it with fresh LoRA adapters",
    )
    expert_tasks: int = _f(
        100, "training-split tasks the environment's expert plays once each; its successful episodes are the data"
    )
    data: str = _f("", "a JSONL file of chat examples (roleagent.sft.data) used besides the expert's; '' = none")
    predictor: bool = _f(
        False,
        "also warm-start the World-In-Agent predictor (roleagent.sft.predictor): every step of the expert's "
        "episodes becomes one more example, the rollout's prediction prompt (wia.prompt, the horizon H) "
        "with the environment's real next H observations as target; needs wia.enabled",
    )
    predictor_eval_tasks: int = _f(
        8,
        "sft.predictor: further training games the expert plays (never SFT data, never a panel game) whose "
        "transitions measure the predictor before and after SFT (wia_predictor/* metrics); 0 = no measurement",
    )
    judge: bool = _f(
        False,
        "also warm-start the Agent-R judge (roleagent.sft.judge, roleagent.sft.judge_stage): after the expert "
        "SFT its policy grows Agent-R trees on training goals, each failed path's transition point (the first "
        "step after which no successful path continues) becomes judge examples (Table 4 prompt and answer), "
        "and a second SFT on them and the expert's examples follows; needs agent_r.enabled",
    )
    judge_tasks: int = _f(16, "sft.judge: training goals whose Agent-R trees give the judge's examples")
    judge_eval_tasks: int = _f(
        8,
        "sft.judge: held-out goals (never SFT data, never a panel game) whose trees measure the judge before "
        "and after its SFT (agent_r_judge/* metrics); 0 = no measurement",
    )
    epochs: int = _f(3, "passes over the SFT examples")
    lr: float = _f(2e-4, "AdamW learning rate of the SFT (LoRA when model.lora_rank > 0, else all weights)")
    lr_schedule: str = _f("constant", "constant | cosine over the run's optimizer steps (roleagent.trainer.optimizer)")
    warmup_steps: int = _f(0, "optimizer steps of linear warm-up")
    min_lr_ratio: float = _f(0.0, "cosine: the rate ends at min_lr_ratio * lr")
    weight_decay: float = _f(0.0, "AdamW weight decay")
    batch_examples: int = _f(16, "examples per optimizer step (the loss is the token mean over their targets)")
    micro_batch_tokens: int = _f(4096, "padded tokens per forward/backward (gradient accumulation beyond it)")
    grad_clip: float = _f(1.0, "gradient norm clip")
