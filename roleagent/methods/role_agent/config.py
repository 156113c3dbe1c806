"""Config sections of Role-Agent (Wang et al., 2026, arXiv 2606.10917): ``wia``
(World-In-Agent, the prediction-modulated return) and ``aiw`` (Agent-In-World, the
failure-driven curriculum). Ranges and choices: ``roleagent.config_rules``."""

from __future__ import annotations

from dataclasses import dataclass

from roleagent.fields import setting


@dataclass
class WIAConfig:
    enabled: bool = setting(False, "World-In-Agent future-state prediction (needs algo.name=role_agent)")
    horizon: int = setting(0, "predicted states per action H; 0 means max(1, round(horizon_fraction * T_max))")
    horizon_fraction: float = setting(0.05, "H as a fraction of the episode step limit (paper: 5%)")
    max_new_tokens: int = setting(48, "token limit of one prediction")
    prompt: str = setting(
        "continuation",
        "continuation: the prediction request continues the actor's chat (its prompt, the sampled "
        "action, a user message asking for the next states), the same information as separate "
        "plus the actor's context, and its prefill is reused from the action pass | separate: "
        "a fresh prompt of instruction, observation and action (the paper's x_pre)",
    )
    train_predictions: bool = setting(
        False, "also train the prediction tokens with the step's advantage (paper eq. 9 trains actions only)"
    )


@dataclass
class AIWConfig:
    """Agent-In-World settings. Defaults are ours: the paper gives none for the sampler."""

    enabled: bool = setting(False, "Agent-In-World: failure analysis -> memory -> retrieval -> task distribution")
    analyst: str = setting(
        "policy",
        "who writes failure reflections: policy (the trained model, paper) | llm (another "
        "model behind the same generate protocol) | rule (the environment's diagnose)",
    )
    retriever: str = setting(
        "policy",
        "who picks tasks sharing a failure: policy | llm (paper Figure 9 over the candidate "
        "list) | bm25 (top-k of the pre-filter, no LLM) | embedding (MiniLM cosine top-k)",
    )
    candidates: int = setting(20, "bound on the candidate list shown to the retriever (one entry per task or mode)")
    candidate_entry: str = setting(
        "lesson",
        "what a candidate's REFLECTION shows after its failure type: lesson (its core lesson) | query (its "
        "retrieval query, which names the kind of task: '<type> in <task type> task: <goal>' from the analyst's "
        "warm start)",
    )
    prefilter: str = setting(
        "hybrid", "candidate pre-filter: hybrid (same failure type first, then any BM25 match) | bm25 | type"
    )
    top_k: int = setting(
        3,
        "at most this many tasks (modes, with retrieve_unit: modes) retrieved per failure (the paper's case "
        "studies show 3 tasks)",
    )
    retrieve_unit: str = setting(
        "tasks",
        "what the retriever is offered and picks: tasks (one entry per task) | modes (the paper's library of "
        "unique failure modes, §3.3: one entry per mode, and a picked mode retrieves every task filed under it)",
    )
    mode_tasks: int = setting(64, "retrieve_unit modes: at most this many tasks of a picked mode, best-matching first")
    boost: float = setting(
        1.0, "weight added to a retrieved task (uniform = 1: one more copy of it in the training set)"
    )
    self_boost: float = setting(
        0.0, "weight added to the failed task itself (0: only retrieved tasks, as in the paper)"
    )
    decay: float = setting(0.9, "per-iteration relaxation w <- 1 + (w - 1) * decay (half-life ~6.6 iterations)")
    floor: float = setting(0.2, "no task's probability below floor x uniform")
    cap: float = setting(5.0, "no task's probability above cap x uniform")
    replace: bool = setting(False, "sample tasks with replacement (false: distinct tasks per batch, Gumbel-top-k)")
    max_failures_per_iter: int = setting(32, "bound on analysed failures per iteration, taken round-robin over tasks")
    analysis_chars: int = setting(3000, "character budget of the trajectory text in the analysis prompt (Figure 8)")
    observation_chars: int = setting(400, "each observation in that text is clipped to this many characters")
    analyst_prompt: str = setting(
        "shared_first",
        "order of Figure 8's text: shared_first (instructions, categories and output format before "
        "the failure, so all prompts of an iteration share one prefix, prefilled once with "
        "rollout.prefix_cache_tokens > 0) | paper (the failure first, as in Figure 8)",
    )
    analysis_order: str = setting(
        "type_first",
        "order of the reflection's fields: type_first (Figure 8: DOMINANT_TYPE, DETAIL, CRITICAL_STEP, ...) | "
        "evidence_first (CRITICAL_STEP and DETAIL before DOMINANT_TYPE: the step is named before the type) | "
        "action_first (evidence_first with the critical step's action quoted before its number)",
    )
    answer_prefix: bool = setting(
        True,
        "the policy analyst's answer starts with '<reflection>' and its first field's key, the retriever's "
        "with '<selected_tasks>' and 'INDEX/TASK/REFLECTIONS:', written for them (prefilled; false: "
        "the model writes the whole answer, as in the paper)",
    )
    stop_at_close: bool = setting(
        True,
        "the policy analyst stops at </reflection> (with answer_prefix also at a new <reflection>, a markdown "
        "heading or a blank line) and the policy retriever at </selected_tasks> (likewise) "
        "(false: both write until EOS or their token limit)",
    )
    analysis_max_new_tokens: int = setting(
        224,
        "token limit of one reflection (the paper's two case-study reflections, Figures 10-11, are 186 "
        "and 217 tokens after the answer prefix with the embedded tokenizer)",
    )
    retrieval_max_new_tokens: int = setting(
        160,
        "token limit of one retrieval selection (in Figure 9's block format the paper's case studies "
        "name their third task by token 122-137)",
    )
    reflection_temperature: float = setting(0.5, "sampling temperature of the analyst (paper Table 5: 0.5)")
    bm25_k1: float = setting(1.5, "BM25 term-frequency saturation k1")
    bm25_b: float = setting(0.75, "BM25 length normalisation b")
    memory_file: str = setting("failure_memory.sqlite", "SQLite file of the failure memory, inside the run directory")

    def validate(self) -> None:
        """Raise :class:`~roleagent.fields.ConfigError` (a ``ValueError``) naming the
        first field outside its rule; never changes the config."""
        from roleagent.config_rules import check_fields

        check_fields(self, prefix="aiw.")
