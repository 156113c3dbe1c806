"""Search-augmented QA: the environment (``env``), answer matching and action parsing
(``text``), retrievers (``retriever``), Search-R1's HTTP retrieval server (``server``),
the Figure 7 prompt (``prompt``) and the failure diagnosis (``diagnosis``).
``roleagent.envs.search:SearchEnv`` is the registry's path."""

from roleagent.envs.search.env import SearchEnv, task_answers, task_question

__all__ = ["SearchEnv", "task_answers", "task_question"]
