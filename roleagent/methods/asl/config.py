"""Config section ``asl`` of Agentic Self-Learning (Sun et al., 2025, arXiv 2510.14253).
Per-field ranges: :data:`RULES` (registered in ``roleagent.config_rules``); cross-field
checks: :meth:`ASLMethod.check_config`."""

from __future__ import annotations

from dataclasses import dataclass

from roleagent.fields import at_least, one_of, setting, within

#: Fifty broad topics for the iteration-0 meta prompt ("Please generate a question about {topic}").
TOPICS = [
    "history", "geography", "physics", "chemistry", "biology", "medicine", "astronomy", "mathematics",
    "computer science", "literature", "poetry", "music", "film", "television", "painting", "architecture",
    "sculpture", "philosophy", "religion", "mythology", "economics", "politics", "law", "military history",
    "sports", "football", "olympic games", "chess", "food", "cooking", "languages", "linguistics",
    "inventions", "engineering", "aviation", "space exploration", "oceans", "rivers", "mountains", "islands",
    "cities", "countries", "animals", "plants", "dinosaurs", "video games", "fashion", "companies",
    "awards", "universities",
]  # fmt: skip


@dataclass
class ASLConfig:
    enabled: bool = setting(
        False,
        "ASL: one backbone plays prompt generator, generative reward model (GRM) and policy, trained "
        "in the cycle PG -> GRM -> PM; generated questions become the policy's tasks and the GRM's "
        "verdict replaces the environment reward",
    )
    checks: int = setting(5, "K: GRM checks of each generated (question, answer) pair (authors' code: 5)")
    accept: float = setting(0.8, "C: a pair is kept when the mean of its K verdicts is >= C (authors' code: 0.8)")
    attempts: int = setting(
        10,
        "M: policy rollouts at each kept question (authors' code: 10); the PG's reward is the entropy "
        "of their verdicts, and the GRM's training data is balanced within these M per question",
    )
    reject_reward: float = setting(
        0.0, "the prompt generator's reward for a pair the K/C filter rejects or cannot parse"
    )
    followup_threshold: float = setting(
        0.5, "a question the policy solves more than this share of the time asks for HARDER"
    )
    train_grm: bool = setting(True, "run the GRM phase; false freezes the GRM (the paper's reward-hacking ablation)")
    pg_target_questions: int = setting(
        64, "the prompt-generator phase ends when this round has kept this many questions (paper: a threshold)"
    )
    phase_min_iterations: int = setting(2, "iterations every phase runs at least")
    phase_max_iterations: int = setting(20, "iterations a phase runs at most (also bounds the PG phase)")
    plateau_window: int = setting(3, "the GRM and policy phases end when the mean reward of the last W iterations ...")
    plateau_tolerance: float = setting(0.02, "... improves on the W before by at most this")
    topics: list = setting(TOPICS, "topics of the iteration-0 meta prompt")
    grm_max_examples: int = setting(
        256, "GRM training examples kept per round after balancing per question (the newest questions first)"
    )
    late_injection_round: int = setting(
        0,
        "from this round on (>= 1), the GRM phase also trains on real verification data built from "
        "the environment's training split (gold answer: correct; another question's gold: wrong); 0 = off, "
        "as in the paper's headline runs (its Figure 6b injects in the third round: 2, recipe "
        "asl_search_injection)",
    )
    injection_examples: int = setting(32, "real verification examples injected per round (half correct, half wrong)")
    grm_eval_questions: int = setting(
        32,
        "GRM accuracy per round on held-out questions with gold answers (eval split, evenly spaced over "
        "it): each gives one correct and one wrong pair; 0 = off",
    )
    pg_max_new_tokens: int = setting(256, "token limit of one generated question-answer turn")
    grm_max_new_tokens: int = setting(256, "token limit of one GRM judgement")
    grm_verdicts: str = setting(
        "free",
        "how the GRM writes a verdict: free (its own text, read by the verdict parser) or constrained "
        "(decoded among the two replies the parser reads, '<answer> conclusion: correct </answer>' and "
        "'... wrong ...', so the GRM is a distribution over the two verdicts, as constrained actions make "
        "the policy one over commands; for a model that does not write the format, e.g. the 135M "
        "backbone untrained). Applies to the K checks, the verdicts on the policy, the GRM phase and "
        "the per-round measurement",
    )
    grm_retrieval: bool = setting(
        False,
        "show the GRM the environment's search results for the question (its top-k passages, as the "
        "policy's search returns them) before it judges: the paper's GRM searches the knowledge base "
        "with the policy's tool (Figure 7); here the framework makes that first search for it. Needs an "
        "environment with a knowledge base (search). Off: the GRM judges from memory",
    )
    pg_retrieval: bool = setting(
        False,
        "open each prompt-generator meta prompt with the environment's results for a search the framework "
        "makes (a round-0 topic: the title of a passage drawn from the top asl.pg_retrieval_pool passages "
        "for the topic, or for its asl.pg_topic_queries entry; a follow-up: the question and its answer), so its answer can be copied from a passage "
        "(the paper's PG searches with the policy's tool, Figure 9). Needs an environment with a knowledge "
        "base (search). Off: the PG writes from memory",
    )
    pg_retrieval_pool: int = setting(
        64, "passages ranked for a round-0 topic that asl.pg_retrieval draws one from (1 to 100)"
    )
    pg_topic_queries: dict = setting(
        {},
        "the search that ranks a round-0 topic's pool for asl.pg_retrieval, per topic (a topic not named "
        "searches itself), e.g. {chemistry: chemical element}: BM25 ranks only 17 passages of the shipped "
        "corpus for 'chemistry', mostly WordNet entries",
    )
    judge_temperature: float = setting(1.0, "sampling temperature of the GRM's K checks and verdicts on the policy")
    system_prompts: bool = setting(
        True,
        "give the PG and GRM the paper's system prompts (Figures 7-8) without the tool: these roles write "
        "one turn and do not search here",
    )


#: Range rules of the ``asl`` fields (merged into ``roleagent.config_rules.FIELD_RULES``).
RULES = {
    "asl.checks": at_least(1),
    "asl.accept": within(0, 1),
    "asl.attempts": at_least(2),
    "asl.reject_reward": at_least(0),
    "asl.followup_threshold": within(0, 1),
    "asl.pg_target_questions": at_least(1),
    "asl.phase_min_iterations": at_least(1),
    "asl.phase_max_iterations": at_least(1),
    "asl.plateau_window": at_least(1),
    "asl.plateau_tolerance": at_least(0),
    "asl.topics": (
        (lambda v: bool(v) and all(isinstance(t, str) and t.strip() for t in v)),
        "a non-empty list of topics",
    ),
    "asl.grm_max_examples": at_least(2),
    "asl.late_injection_round": at_least(0),
    "asl.injection_examples": at_least(2),
    "asl.grm_eval_questions": at_least(0),
    "asl.pg_max_new_tokens": at_least(8),
    "asl.grm_max_new_tokens": at_least(8),
    "asl.grm_verdicts": one_of("free", "constrained"),
    "asl.pg_topic_queries": (
        (lambda v: all(isinstance(k, str) and isinstance(q, str) and q.strip() for k, q in v.items())),
        "a mapping of topics to non-empty search queries",
    ),
    "asl.pg_retrieval_pool": within(1, 100),  # a retrieval returns at most 100 passages (search's MAX_TOPK)
    "asl.judge_temperature": at_least(0),
}
