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

from roleagent.methods.base import Method
from roleagent.methods.role_agent.aiw.agent_in_world import AgentInWorld
from roleagent.types import Task


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
        cfg, chat = self.config, self.context.chat
        return self.aiw.process_failures(
            trajectories,
            iteration=iteration,
            diagnose=self.context.pool.diagnose,
            generate=lambda c: chat(
                c, max_new_tokens=cfg.analysis_max_new_tokens, temperature=cfg.reflection_temperature
            ),
            retrieval_generate=lambda c: chat(c, max_new_tokens=cfg.retrieval_max_new_tokens),
        )

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
