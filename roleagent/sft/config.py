"""The ``sft:`` section of a recipe: the supervised warm start (``roleagent.sft``)."""

from __future__ import annotations

from dataclasses import dataclass

from roleagent.fields import ConfigError, setting


@dataclass
class SFTConfig:
    enabled: bool = setting(
        False,
        "warm start: evaluate the base policy, fine-tune it on expert demonstrations (roleagent.sft) "
        "into run_dir/sft, evaluate it, then run RL from it with fresh LoRA adapters",
    )
    expert_tasks: int = setting(
        100, "training-split tasks the environment's expert plays once each; its successful episodes are the data"
    )
    data: str = setting(
        "",
        "chat examples used besides the expert's: a JSONL or JSON file of roleagent's or AgentGym's AgentTraj "
        "records, or a datasets dataset (a save_to_disk folder, .parquet, .arrow; roleagent.sft.sources); '' = none",
    )
    predictor: bool = setting(
        False,
        "also warm-start the World-In-Agent predictor (roleagent.sft.predictor): every step of the expert's "
        "episodes becomes one more example, the rollout's prediction prompt (wia.prompt, the horizon H) "
        "with the environment's real next H observations as target; needs wia.enabled",
    )
    predictor_eval_tasks: int = setting(
        8,
        "sft.predictor: further training games the expert plays (never SFT data, never a panel game) whose "
        "transitions measure the predictor before and after SFT (wia_predictor/* metrics); 0 = no measurement",
    )
    asl_roles: bool = setting(
        False,
        "also warm-start ASL's prompt generator and GRM (roleagent.sft.asl_roles): the training split's "
        "labelled question/answer pairs become generator examples (the method's PG prompts, Figures 9-11, "
        "with the pair as target) and verifier examples (the GRM prompt with the gold or another question's "
        "answer, the exact-match verdict as target); an opt-in deviation from ASL's zero-data setting; "
        "needs asl.enabled",
    )
    asl_questions: int = setting(
        512, "sft.asl_roles: training-split questions whose pairs become the roles' SFT examples"
    )
    asl_eval_questions: int = setting(
        64,
        "sft.asl_roles: further training-split questions (never SFT data, never a panel task) whose examples "
        "measure the roles before and after SFT (asl_generator/*, asl_verifier/* metrics); 0 = no measurement",
    )
    asl_verifier_check: bool = setting(
        False,
        "sft.asl_roles: each verifier target first states whether the GRM's search results contain the "
        "student's answer, then the verdict (roleagent.sft.asl_roles.evidence_check); needs asl.grm_retrieval "
        "and asl.grm_verdicts: free",
    )
    analyst: bool = setting(
        False,
        "also warm-start the Agent-In-World analyst (roleagent.sft.analyst): the base policy plays "
        "sft.analyst_tasks training games, and each failure becomes one more example, the AIW analysis "
        "prompt (aiw.analysis_chars, aiw.observation_chars, aiw.analyst_prompt, aiw.answer_prefix) with a "
        "Figure-8 analysis built from the environment's rule diagnosis as target; needs aiw.enabled with "
        "aiw.analyst: policy",
    )
    analyst_tasks: int = setting(16, "sft.analyst: training games the base policy plays for the analyst's examples")
    analyst_episodes: int = setting(
        2, "sft.analyst: episodes per game, sampled at rollout.temperature (only the failures give examples)"
    )
    analyst_eval_tasks: int = setting(
        4,
        "sft.analyst: further training games (never SFT data, never a panel game) whose failures measure "
        "the analyst before and after SFT (aiw_analyst/* metrics); 0 = no measurement",
    )
    retriever: bool = setting(
        False,
        "also warm-start the Agent-In-World retriever (roleagent.sft.retriever): the failures of "
        "sft.analyst's training games are filed as a library, and each of them becomes one more example, the "
        "Figure-9 selection prompt over its candidates (shuffled) with the most relevant ones (same rule "
        "failure type, then same kind of task) as target; the failures of its held-out games measure the "
        "retriever before and after SFT (aiw_retriever/* metrics); needs sft.analyst and aiw.retriever: policy",
    )
    judge: bool = setting(
        False,
        "also warm-start the Agent-R judge (roleagent.sft.judge, roleagent.sft.judge_stage): after the expert "
        "SFT its policy grows Agent-R trees on training goals, each failed path's transition point (the first "
        "step after which no successful path continues) becomes judge examples (Table 4 prompt and answer), "
        "and a second SFT on them and the expert's examples follows; needs agent_r.enabled",
    )
    judge_tasks: int = setting(16, "sft.judge: training goals whose Agent-R trees give the judge's examples")
    judge_eval_tasks: int = setting(
        8,
        "sft.judge: held-out goals (never SFT data, never a panel game) whose trees measure the judge before "
        "and after its SFT (agent_r_judge/* metrics); 0 = no measurement",
    )
    judge_eval_goals: str = setting(
        "new",
        "sft.judge: where the held-out goals come from: new (never SFT data) | sft (SFT goals after the "
        "judge_tasks, needing sft.expert_tasks >= judge_tasks + judge_eval_tasks: a small policy's trees "
        "find successes only on goals it was fine-tuned on; its judge may be favoured there)",
    )
    judge_labels: str = setting(
        "tree",
        "sft.judge: the judge's training labels: tree (the transition point) | progress (roleagent.sft."
        "judge_progress: every step of every training tree, Good when it shortens the environment's expert "
        "plan, label-balanced; needs an environment with expert_distance, e.g. TextCraft)",
    )
    epochs: int = setting(3, "passes over the SFT examples")
    role_epochs: int = setting(
        0,
        "the first role_epochs passes train on every example, the later ones on the policy's alone (examples "
        "without a meta role: the expert's and sft.data's), so the roles' examples (predictor, analyst, "
        "retriever, judge, ASL roles) do not have the last word on the acting policy; 0 = every pass on every "
        "example",
    )
    lr: float = setting(2e-4, "AdamW learning rate of the SFT (LoRA when model.lora_rank > 0, else all weights)")
    lr_schedule: str = setting(
        "constant", "constant | cosine over the run's optimizer steps (roleagent.trainer.optimizer)"
    )
    warmup_steps: int = setting(0, "optimizer steps of linear warm-up")
    min_lr_ratio: float = setting(0.0, "cosine: the rate ends at min_lr_ratio * lr")
    weight_decay: float = setting(0.0, "AdamW weight decay")
    batch_examples: int = setting(16, "examples per optimizer step (the loss is the token mean over their targets)")
    micro_batch_tokens: int = setting(4096, "padded tokens per forward/backward (gradient accumulation beyond it)")
    grad_clip: float = setting(1.0, "gradient norm clip")


def check_warm_start(cfg) -> None:
    """Cross-field checks of the ``sft`` section against the run (``roleagent.config.validate``):
    the warm start has data, and each role's warm start has the method whose prompts it uses."""
    sft = cfg.sft
    if not 0 <= sft.role_epochs <= sft.epochs:
        raise ConfigError(f"sft.role_epochs={sft.role_epochs}: choose 0 (every pass) up to sft.epochs={sft.epochs}")
    if not sft.enabled:
        return
    if sft.expert_tasks == 0 and not sft.data and not sft.asl_roles:
        raise ConfigError("sft.enabled needs data: sft.expert_tasks > 0 or an sft.data file")
    if sft.asl_roles and not cfg.asl.enabled:
        raise ConfigError("sft.asl_roles needs asl.enabled (the roles' prompts are the ASL method's)")
    if sft.asl_verifier_check and not (cfg.asl.grm_retrieval and cfg.asl.grm_verdicts == "free"):
        raise ConfigError(
            "sft.asl_verifier_check needs asl.grm_retrieval (the results it checks) and asl.grm_verdicts: free "
            "(a constrained GRM writes the verdict alone)"
        )
    if sft.predictor and not (cfg.wia.enabled and sft.expert_tasks > 0):
        raise ConfigError(
            "sft.predictor needs wia.enabled (its prompt and horizon) and sft.expert_tasks > 0 (its data)"
        )
    if sft.analyst and not (cfg.aiw.enabled and cfg.aiw.analyst == "policy"):
        raise ConfigError(
            "sft.analyst needs aiw.enabled with aiw.analyst: policy (the policy is the analyst it trains)"
        )
    if sft.retriever and not (sft.analyst and cfg.aiw.retriever == "policy"):
        raise ConfigError(
            "sft.retriever needs sft.analyst (its failures) and aiw.retriever: policy (the policy is the retriever)"
        )
    if sft.judge and not cfg.agent_r.enabled:
        raise ConfigError("sft.judge needs agent_r.enabled (its tree search and judge settings)")
    if sft.judge and sft.judge_labels == "progress" and not _has_expert_distance(cfg.env.name):
        raise ConfigError(
            f"sft.judge_labels=progress needs an environment with expert_distance (e.g. textcraft); "
            f"{cfg.env.name} has none: use sft.judge_labels=tree"
        )
    if sft.judge and sft.judge_eval_goals == "sft" and sft.expert_tasks < sft.judge_tasks + sft.judge_eval_tasks:
        raise ConfigError(
            f"sft.judge_eval_goals=sft draws the judge's {sft.judge_tasks} training and {sft.judge_eval_tasks} "
            f"held-out goals from the {sft.expert_tasks} SFT goals (sft.expert_tasks): too few"
        )


def _has_expert_distance(env_name: str) -> bool:
    """Whether the environment's class counts the expert's remaining actions (overrides
    ``Environment.expert_distance``), checked before a run grows any tree."""
    from roleagent.envs.base import Environment, env_class, factory_of

    return env_class(factory_of(env_name)).expert_distance is not Environment.expert_distance
