"""The ``rollout:`` section of a recipe: how the training episodes are played
(``roleagent.rollout``: the batched loop, its prompts, context modes and constrained actions).
``RolloutSettings`` (``roleagent.rollout.episodes``) is the loop's own copy of the fields it
shares with this section, with the same defaults."""

from __future__ import annotations

from dataclasses import dataclass

from roleagent.fields import setting


@dataclass
class RolloutConfig:
    tasks_per_iter: int = setting(4, "tasks sampled per iteration (N)")
    group_size: int = setting(4, "rollouts per task with the same environment seed (G)")
    max_steps: int = setting(0, "episode step limit; 0 uses the environment's own (ALFWorld 50)")
    action_format: str = setting("think_action", "think_action | action | raw (see roleagent.rollout.actor)")
    history: int = setting(3, "previous (action, observation) pairs shown in each prompt")
    max_new_tokens: int = setting(64, "token limit of one actor turn")
    temperature: float = setting(1.0, "sampling temperature for training rollouts (Role-Agent Table 5: 0.9)")
    top_p: float = setting(1.0, "nucleus sampling threshold")
    invalid_penalty: float = setting(
        0.1, "penalty on a step whose output has no parsable action (placement: algo.penalty_placement)"
    )
    project_actions: bool = setting(
        False,
        "map a non-admissible action onto the most similar admissible command (small models); the "
        "free text is trained, not the executed command",
    )
    constrain_actions: bool = setting(
        False,
        "decode only admissible commands: where the environment lists them, each token is drawn among "
        "those continuing some command's completion (renormalised log-probs, kept for the trainer), so "
        "every step is valid and the trained tokens are the executed command (a policy over admissible "
        "actions, GLAM); action_format action, or think_action (then each turn is <action>c</action>, no "
        "thought); environments without lists decode freely",
    )
    overlap_env: str = setting(
        "auto",
        "always: send each turn's environment steps before the methods' extra generations (World-In-Agent's "
        "predictions), so worker processes step while the engine generates, with the same outputs | never: "
        "the steps wait for the generations (workers never share the cores with torch) | auto: always when "
        "the engine decodes on a GPU or a server, never on this machine's CPU",
    )
    max_prompt_tokens: int = setting(1024, "prompts longer than this keep their last tokens")
    max_batch: int = setting(32, "most sequences in one generation batch")
    context: str = setting(
        "window",
        "window: each step's prompt is rebuilt from the instruction, the last `history` steps and the "
        "current observation (paper parity) | full: the whole episode as one growing chat, each "
        "turn continuing the previous prompt and action token for token (its KV is reused with "
        "prefix_cache_tokens > 0); a chat that would exceed max_prompt_tokens restarts from the "
        "window prompt. Environments that report their chat messages (BFCL) keep their own path",
    )
    prefix_cache_tokens: int = setting(
        0,
        "engine prefix-KV cache: tokens of KV kept across generate calls (LRU), so prompts that "
        "extend earlier ones prefill only the new part; 0 = off. Same tokens, log-probs equal up "
        "to float rounding",
    )
