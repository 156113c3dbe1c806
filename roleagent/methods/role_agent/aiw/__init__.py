"""Agent-In-World (Role-Agent: Wang et al., 2026, arXiv 2606.10917, §3.3): failure analysis → persistent failure memory →
retrieval of similar failures → training-task distribution.

The trainer uses :class:`AgentInWorld` through ``method.AgentInWorldMethod``; the parts are usable on their own:
``prompts`` (Figures 8 and 9), ``reflection`` (analyst role, parsing), ``memory``
(SQLite failure memory), ``retrieval`` (BM25/embedding pre-filter over tasks or failure modes,
LLM selection), ``bm25`` (the lexical index),
``sampler`` (task weights), ``analysis`` (Figure-4 plot, point-biserial correlation).
See ``docs/agent_in_world.md``.
"""

from roleagent.methods.role_agent.aiw.agent_in_world import AgentInWorld
from roleagent.methods.role_agent.aiw.bm25 import BM25Index
from roleagent.methods.role_agent.aiw.memory import FailureMemory, FailureMode, FailureRecord
from roleagent.methods.role_agent.aiw.reflection import Reflection, parse_reflection, rule_reflection
from roleagent.methods.role_agent.aiw.retrieval import Retriever, parse_selection
from roleagent.methods.role_agent.aiw.sampler import TaskSampler
from roleagent.methods.role_agent.config import AIWConfig

__all__ = [
    "AIWConfig",
    "AgentInWorld",
    "BM25Index",
    "FailureMemory",
    "FailureMode",
    "FailureRecord",
    "Reflection",
    "Retriever",
    "TaskSampler",
    "parse_reflection",
    "parse_selection",
    "rule_reflection",
]
