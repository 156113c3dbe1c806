"""Agent-In-World as a training method (section ``aiw``; Role-Agent: Wang et al., 2026,
arXiv 2606.10917, §3.3, Algorithm 1 lines 3, 5, 19–24).

Plug-in points: the task source is the failure-weighted sampler; after each iteration's
update the failures are analysed, filed in the failure memory and turned into task
weights (:meth:`AgentInWorld.process_failures`); the checkpoint state carries the sampler
and the memory's record, checked (and the memory cut back) on resume; the run's summary
gets the failure-mode plot (Role-Agent Figure 4).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from roleagent.engine.base import SamplingParams
from roleagent.engine.chat import prompt_fits
from roleagent.methods.role_agent.aiw.agent_in_world import AgentInWorld
from roleagent.methods.role_agent.aiw.roles import analyst_prefix, analyst_stop, retriever_prefix, retriever_stop
from roleagent.trainer.methods import Method
from roleagent.types import Task

#: A shared prefix shorter than this is not worth a separate prefill call.
MIN_SHARED_PREFIX_TOKENS = 64


def shared_prefix_length(prompts: list[list[int]]) -> int:
    """Length of the longest token prefix common to all ``prompts``; e.g. ``[[1, 2, 3],
    [1, 2, 4], [1, 5]]`` share 1 token."""
    if not prompts:
        return 0
    first, n = prompts[0], min(len(p) for p in prompts)
    for p in prompts[1:]:
        n = next((i for i in range(n) if p[i] != first[i]), n)
    return n


def prime_shared_prefix(engine, conversations, response_prefix: str = "") -> int:
    """Prefill the prompts' common prefix once, so the batch reuses its KV.

    An engine with prefix reuse (``rollout.prefix_cache_tokens > 0``) reuses KV across calls
    only, not between the rows of one call (:mod:`roleagent.engine.prefix_cache`), so
    without this every analyst prompt prefills the system message and Figure 8's
    instructions again. One greedy token (greedy draws no random numbers, so the batch's
    samples do not change) after the shared prefix stores its KV. Returns the prefix length
    prefilled, 0 when nothing was done (no prefix store, fewer than two prompts, or a
    prefix under :data:`MIN_SHARED_PREFIX_TOKENS`)."""
    if engine is None or getattr(engine, "prefix_cache", None) is None or len(conversations) < 2:
        return 0
    prompts = [engine.encode_chat(c, response_prefix=response_prefix) for c in conversations]
    n = shared_prefix_length(prompts)
    if n < MIN_SHARED_PREFIX_TOKENS:
        return 0
    engine.generate([prompts[0][:n]], SamplingParams(max_new_tokens=1, temperature=0.0))
    return n


class WeightedTaskSource:
    """Training tasks drawn from Agent-In-World's sampler weights."""

    def __init__(self, aiw: AgentInWorld, tasks: list[Task]):
        self.aiw = aiw
        self.by_id = {t.id: t for t in tasks}

    def sample(self, n: int, rng: np.random.Generator) -> list[Task]:
        return [self.by_id[i] for i in self.aiw.sample_tasks(n, rng)]


class AgentInWorldMethod(Method):
    name = "aiw"

    def __init__(self, context, config):
        super().__init__(context, config)
        self.aiw = AgentInWorld(
            config, [t.id for t in context.train_tasks], context.run_dir, context.pool.meta.failure_taxonomy
        )

    def task_source(self) -> WeightedTaskSource:
        return WeightedTaskSource(self.aiw, self.context.train_tasks)

    def after_iteration(self, trajectories, iteration: int) -> dict[str, float]:
        cfg, engine = self.config, getattr(self.context, "engine", None)
        reused_before = getattr(engine, "reused_prompt_tokens", 0)
        metrics = self.aiw.process_failures(
            trajectories,
            iteration=iteration,
            diagnose=self.context.pool.diagnose,
            fits=prompt_fits(engine),
            generate=self._role(
                cfg.analysis_max_new_tokens,
                cfg.reflection_temperature,
                analyst_stop(cfg),
                response_prefix=analyst_prefix(cfg),
            ),
            retrieval_generate=self._role(
                cfg.retrieval_max_new_tokens,
                0.0,
                retriever_stop(cfg),
                response_prefix=retriever_prefix(cfg),
            ),
        )
        metrics["prefix_reused_tokens"] = float(getattr(engine, "reused_prompt_tokens", 0) - reused_before)
        return metrics

    def _role(self, max_new_tokens: int, temperature: float, stop: tuple[str, ...], response_prefix: str = ""):
        """One role's batched ``generate`` through the trainer's chat: bounded by
        ``max_new_tokens`` and (``aiw.stop_at_close``) the role's closing tag; the answer is
        returned with its ``response_prefix``, as if the model had written it; the prompts'
        shared prefix is prefilled once first (:func:`prime_shared_prefix`)."""
        chat, engine = self.context.chat, getattr(self.context, "engine", None)

        def generate(conversations):
            prime_shared_prefix(engine, conversations, response_prefix)
            answers = chat(
                conversations,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                stop=stop,
                response_prefix=response_prefix,
            )
            return [response_prefix + a for a in answers]

        return generate

    def start_fresh(self) -> None:
        self.aiw.reset()

    def state_dict(self) -> dict:
        return self.aiw.state_dict()

    def load_state_dict(self, state: dict) -> None:
        if state:
            self.aiw.load_state_dict(state)

    def write_summary(self, run_dir: Path) -> None:
        from roleagent.methods.role_agent.aiw.analysis import plot_failure_modes

        plot_failure_modes(self.aiw.memory, run_dir / "failure_modes.png")

    def close(self) -> None:
        self.aiw.close()
