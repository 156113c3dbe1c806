"""Agent-In-World (Role-Agent §3.3): failure analysis → persistent failure memory →
retrieval of similar failures → training-task distribution.

The trainer uses :class:`AgentInWorld`; the parts are usable on their own:
``prompts`` (Figures 8 and 9), ``reflection`` (analyst role, parsing), ``memory``
(SQLite failure memory), ``retrieval`` (BM25/embedding pre-filter, LLM selection),
``sampler`` (task weights), ``analysis`` (Figure-4 plot, point-biserial correlation).
See ``docs/agent_in_world.md``.
"""

from roleagent.aiw.agent_in_world import AgentInWorld, AIWConfig, config_from_dict
from roleagent.aiw.memory import FailureMemory, FailureMode, FailureRecord
from roleagent.aiw.reflection import Reflection, parse_reflection, rule_reflection
from roleagent.aiw.retrieval import BM25Index, Retriever, parse_selection
from roleagent.aiw.sampler import TaskSampler

__all__ = [
    "AIWConfig", "AgentInWorld", "BM25Index", "FailureMemory", "FailureMode",
    "FailureRecord", "Reflection", "Retriever", "TaskSampler",
    "config_from_dict", "parse_reflection", "parse_selection", "rule_reflection",
]
