"""Config section ``agent_r`` of Agent-R (Yuan et al., 2025, arXiv 2501.11425). Ranges:
``roleagent.config_rules``; cross-field checks: :meth:`AgentRMethod.check_config`."""

from __future__ import annotations

from dataclasses import dataclass

from roleagent.fields import setting


@dataclass
class AgentRConfig:
    enabled: bool = setting(
        False,
        "Agent-R: each iteration builds one MCTS tree per task with the current policy, turns good and "
        "revision trajectories into chat examples and fine-tunes on them (iterative SFT instead of RL)",
    )
    mcts_iterations: int = setting(
        8,
        "MCTS descents from the root per tree (the authors' ITERA, default 4 in their mcts_raw.py; "
        "the paper gives no number)",
    )
    max_depth: int = setting(8, "tree depth limit: a node at this depth is terminal (the paper uses 20)")
    candidates: int = setting(4, "candidate actions sampled per expansion, deduplicated (paper: 4)")
    c_uct: float = setting(0.25, "UCT exploration constant c (paper Eq. 5: 0.25)")
    temperature: float = setting(1.0, "sampling temperature of expansions (paper: 1)")
    beta: float = setting(0.2, "a (good, bad) leaf pair needs value(good) - value(bad) > beta (paper: 0.2)")
    alpha_schedule: list = setting(
        [0.5, 0.7, 1.0],
        "per iteration, the least value a good path needs (value >= alpha); later iterations keep the last",
    )
    max_pairs_per_tree: int = setting(4, "revision trajectories per tree at most (best good path first, worst bad)")
    max_good_per_tree: int = setting(
        2,
        "good trajectories per tree at most (highest value first); the authors keep every leaf path "
        "above alpha (docs/agent_r.md): a value no tree's leaf count reaches, e.g. 10000, follows them",
    )
    judge: bool = setting(
        True,
        "model-guided transition point: the actor judges each bad step (paper Table 4) and the first "
        "Bad one is t'; false = direct revision at the bad path's last step",
    )
    judge_max_new_tokens: int = setting(
        256,
        "token limit of one judgement (reasons, then 'Judgment: ...'): the paper's nine judge answers "
        "(Table 8) are 19-91 tokens with the embedded model's tokenizer, so 256 leaves 2.8x the longest; "
        "answers cut at the limit are counted (agent_r/judge_truncated)",
    )
    judge_history: int = setting(8, "earlier (action, observation) turns shown to the judge at most")
    epochs_first: int = setting(3, "SFT epochs of the first iteration (paper: 3)")
    epochs_later: int = setting(1, "SFT epochs of later iterations (paper: 1)")
    lr: float = setting(1e-4, "AdamW learning rate of the SFT (the paper's 2e-5 is for full fine-tuning of 8B)")
    batch_examples: int = setting(8, "examples per optimizer step (token-mean loss)")
    micro_batch_tokens: int = setting(4096, "padded tokens per forward/backward")
    general_data: str = setting(
        "",
        "general chat examples mixed in at eta, in any form sft.data takes (roleagent.sft.sources); '' = agent data only "
        "(the paper mixes ShareGPT, which is not shipped)",
    )
    eta: float = setting(
        0.2,
        "share of agent examples in the mixture with general_data (paper Eq. 6, AgentTuning's eta = 0.2): "
        "each iteration draws round(n_agent * (1 - eta) / eta) general examples",
    )
