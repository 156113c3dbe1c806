"""Agent-In-World orchestrator (Role-Agent: Wang et al., 2026, arXiv 2606.10917, §3.3, Alg. 1 lines 3, 5, 19–24).

One training iteration, as the trainer drives it::

    aiw = AgentInWorld(AIWConfig(enabled=True), train_ids, run_dir, env.failure_taxonomy)
    ids = aiw.sample_tasks(batch_size, rng)                # Alg. 1 line 5, every iteration
    ... roll out tasks by id, update the policy ...
    metrics = aiw.process_failures(trajectories, iteration=it,
                                   generate=chat_fn, diagnose=env.diagnose)  # lines 19–24
    ckpt["aiw"] = aiw.state_dict()

:meth:`AgentInWorld.process_failures`:

1. keeps the *failed training* trajectories (``task.split == "train"``, ids the sampler
   knows, not crashed); validation/eval trajectories are rejected and counted, so they
   never reach the memory, the retriever or the weights;
2. the analyst role writes one reflection per failed trajectory (Figure 8): ``"policy"``
   / ``"llm"`` through the batched ``generate`` callable, ``"rule"`` through the
   environment's ``diagnose``; an unusable answer falls back to the rule diagnosis when
   there is one, else to a heuristic (:func:`~roleagent.methods.role_agent.aiw.reflection.fallback_reflection`);
3. all reflections are filed in the SQLite failure memory (by task id, never by batch
   position) — Alg. 1 stores every failure before retrieving (line 21 before line 23), so
   a failure can retrieve another task that failed this iteration;
4. for each new failure the retriever role picks similar historical tasks (Figure 9, or
   BM25/embedding top-k) among at most ``candidates`` other tasks; the picks are recorded
   and the iteration's rows are committed in one transaction (an exception anywhere, e.g.
   in ``generate``, rolls it back and leaves the sampler untouched: the call can be
   retried);
5. after the commit, the sampler decays once (ageing earlier boosts), then boosts every
   retrieved task by ``boost``; the failed task itself gets ``self_boost`` (0 by default:
   the paper reweights the *retrieved* tasks and contrasts AIW with "random failed-task
   replay"); metrics are returned.

Call it exactly once per training iteration, with increasing ``iteration`` (also when
nothing failed: that is when the decay happens). The memory is committed every call; the
sampler state goes into the trainer's checkpoint via :meth:`state_dict`. On resume,
:meth:`load_state_dict` also deletes memory rows from iterations after the checkpoint, so
the memory matches the restored weights exactly.

Departures from the authors' public code (we follow the paper; docs/design.md, "Decisions"): that code
matched failures by a string prefix of the prompt, recorded batch positions instead of
task ids, could not make the environment play the chosen task, drew its sampler once per
epoch, fed validation failures into the curriculum and never saved it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from roleagent.methods.role_agent.aiw.memory import FailureMemory
from roleagent.methods.role_agent.aiw.prompts import task_instruction
from roleagent.methods.role_agent.aiw.reflection import Reflection, trajectory_summary
from roleagent.methods.role_agent.aiw.retrieval import Retriever
from roleagent.methods.role_agent.aiw.roles import (
    Diagnose,
    Fits,
    Generate,
    NewFailure,
    analyse,
    retrieve,
    round_robin,
)
from roleagent.methods.role_agent.aiw.sampler import TaskSampler
from roleagent.methods.role_agent.config import AIWConfig
from roleagent.types import Trajectory

log = logging.getLogger(__name__)

#: Keys of the metrics dict that :meth:`AgentInWorld.process_failures` returns.
_METRICS = (
    "n_trajectories", "n_failed_train", "n_failures", "n_rejected_non_train", "n_unknown_task",
    "n_crashed", "n_over_cap", "n_parse_fallback", "n_partial", "n_type_mapped", "n_type_other",
    "n_rule", "n_heuristic", "n_retrieval_queries", "n_retrieval_fallback", "n_candidates_mean",
    "n_retrieved", "n_boosts", "time_analysis_s", "time_retrieval_s",
)  # fmt: skip


class AgentInWorld:
    """Failure analysis → failure memory → retrieval → task distribution."""

    def __init__(
        self,
        config: AIWConfig,
        train_task_ids: Sequence[str],
        run_dir: str | Path,
        taxonomy: Sequence[str] = (),
        *,
        embedder: Callable[[Sequence[str]], np.ndarray] | None = None,
    ):
        config.validate()
        self.config = config
        self.taxonomy = tuple(taxonomy)
        self.run_dir = Path(run_dir)
        self.sampler = TaskSampler(
            train_task_ids, decay=config.decay, floor=config.floor, cap=config.cap, replace=config.replace
        )
        self.memory = FailureMemory(self.run_dir / config.memory_file, self.taxonomy)
        self._embedder = embedder
        self._retriever: Retriever | None = None  # built (reading the memory) on first use
        self.last_iteration: int | None = None
        self.counters: dict[str, int] = {
            "failures": 0,
            "rejected_non_train": 0,
            "parse_fallback": 0,
            "type_mapped": 0,
            "type_other": 0,
            "retrieval_fallback": 0,
            "retrieved": 0,
        }

    @property
    def retriever(self) -> Retriever:
        """The retriever over the memory, built on first use: building it reads the
        memory, which a trainer that may still refuse to resume must not open."""
        if self._retriever is None:
            cfg = self.config
            self._retriever = Retriever(
                self.memory,
                cfg.retriever,
                max_candidates=cfg.candidates,
                top_k=cfg.top_k,
                prefilter=cfg.prefilter,
                unit=cfg.retrieve_unit,
                mode_tasks=cfg.mode_tasks,
                k1=cfg.bm25_k1,
                b=cfg.bm25_b,
                embedder=self._embedder,
                entry=cfg.candidate_entry,
            )
        return self._retriever

    # ------------------------------------------------------------- sampling ----------

    def sample_tasks(self, n: int, rng: np.random.Generator) -> list[str]:
        """This iteration's training task ids (redrawn every iteration)."""
        return self.sampler.sample(n, rng)

    # ------------------------------------------------------------- failures ----------

    def process_failures(
        self,
        trajectories: Sequence[Trajectory],
        *,
        iteration: int,
        generate: Generate | None = None,
        diagnose: Diagnose | None = None,
        retrieval_generate: Generate | None = None,
        fits: Fits | None = None,
    ) -> dict[str, float]:
        """Analyse this iteration's failed training trajectories and reshape p_𝒟.

        ``generate``: batched chat completion (list of message lists → list of strings),
        used by the analyst ("policy"/"llm") and, unless ``retrieval_generate`` is given,
        by the retriever ("policy"/"llm"). ``diagnose``: the environment's rule-based
        diagnosis (analyst "rule", and the fallback of an unusable LLM answer). ``fits``:
        whether a role's prompt is within ``generate``'s prompt limit
        (:func:`roleagent.engine.chat.prompt_fits`): the analyst's trajectory text and the
        retriever's candidate list shrink until it is.
        """
        t_start = time.perf_counter()
        cfg = self.config
        if self.last_iteration is not None and iteration <= self.last_iteration:
            raise ValueError(
                f"process_failures(iteration={iteration}) after iteration "
                f"{self.last_iteration}: call it once per iteration, increasing"
            )
        m = dict.fromkeys(_METRICS, 0.0)
        m["n_trajectories"] = float(len(trajectories))

        failed = self._failed_training(trajectories, m)
        if m["n_rejected_non_train"]:
            self.counters["rejected_non_train"] += int(m["n_rejected_non_train"])
            log.warning(
                "AIW: %d non-training trajectories passed to process_failures were ignored",
                int(m["n_rejected_non_train"]),
            )

        chosen = round_robin(failed, cfg.max_failures_per_iter) if cfg.enabled else []
        m["n_over_cap"] = float(len(failed) - len(chosen)) if cfg.enabled else 0.0

        # 1. analyst ------------------------------------------------------------
        t0 = time.perf_counter()
        reflections, raws = analyse(chosen, cfg, self.taxonomy, generate, diagnose, m, fits)
        m["time_analysis_s"] = time.perf_counter() - t0

        new, selections = self._file_and_retrieve(
            chosen, reflections, raws, iteration, retrieval_generate or generate, m, fits
        )
        self._reweight(new, selections, m)
        self.last_iteration = int(iteration)
        m["time_s"] = time.perf_counter() - t_start
        return m

    def _file_and_retrieve(
        self,
        chosen: list[Trajectory],
        reflections: list[Reflection],
        raws: list[str | None],
        iteration: int,
        generate: Generate | None,
        m: dict[str, float],
        fits: Fits | None = None,
    ) -> tuple[list[NewFailure], list[list[Any]]]:
        """Steps 2–4 as one transaction: file the reflections, retrieve similar tasks, record
        the picks. An exception (e.g. from ``generate``) rolls the memory back and leaves the
        sampler untouched, so the iteration can be retried."""
        try:
            new: list[NewFailure] = []
            for traj, ref, raw in zip(chosen, reflections, raws):
                fid = self.memory.add_failure(
                    traj.task.id,
                    iteration,
                    ref,
                    trajectory_summary=trajectory_summary(traj),
                    task_text=task_instruction(traj, 300),
                    raw_output=raw,
                )
                new.append((fid, traj, ref))
            self.retriever.sync()  # same connection: sees the uncommitted rows
            m["n_failures"] = float(len(new))

            t0 = time.perf_counter()
            selections = retrieve(self.retriever, new, generate, self.config, m, fits)
            m["time_retrieval_s"] = time.perf_counter() - t0

            method = "llm" if self.retriever.uses_llm else self.retriever.mode
            for (fid, _traj, _ref), chosen_cands in zip(new, selections):
                self.memory.add_retrievals(fid, iteration, [(c.task_id, c.failure_id) for c in chosen_cands], method)
            self.memory.commit()
        except BaseException:
            self.memory.rollback()
            self.retriever.reset()
            raise
        return new, selections

    def _failed_training(self, trajectories: Sequence[Trajectory], m: dict[str, float]) -> list[Trajectory]:
        """The failed, finished training trajectories of tasks the sampler knows; the rest
        is counted in ``m``."""
        failed: list[Trajectory] = []
        for traj in trajectories:
            if traj.task.split != "train":
                m["n_rejected_non_train"] += 1  # validation never touches the curriculum
                continue
            if traj.success:
                continue
            if traj.crashed:
                m["n_crashed"] += 1  # an environment crash is not the agent's failure
                continue
            if traj.task.id not in self.sampler:
                m["n_unknown_task"] += 1
                continue
            failed.append(traj)
        m["n_failed_train"] = float(len(failed))
        return failed

    def _reweight(self, new: list[NewFailure], selections: list[list[Any]], m: dict[str, float]) -> None:
        """After the commit: decay old boosts, boost this iteration's retrievals, count."""
        cfg = self.config
        self.sampler.decay()
        boosted: list[str] = []
        for (_fid, traj, _ref), chosen_cands in zip(new, selections):
            ids = [c.task_id for c in chosen_cands]
            boosted.extend(ids)
            if cfg.boost > 0:
                m["n_boosts"] += self.sampler.boost(ids, cfg.boost)
            if cfg.self_boost > 0:
                m["n_boosts"] += self.sampler.boost([traj.task.id], cfg.self_boost)
        m["n_retrieved"] = float(len(set(boosted)))

        for key, mk in (
            ("failures", "n_failures"),
            ("parse_fallback", "n_parse_fallback"),
            ("type_mapped", "n_type_mapped"),
            ("type_other", "n_type_other"),
            ("retrieval_fallback", "n_retrieval_fallback"),
            ("retrieved", "n_retrieved"),
        ):
            self.counters[key] += int(m[mk])
        m["sampler_entropy"] = self.sampler.entropy()
        m["sampler_max_ratio"] = float(self.sampler.probabilities().max() * len(self.sampler))
        m["retrieved_share"] = self.sampler.last_batch_share
        m["boosted_fraction"] = self.sampler.last_batch_boosted
        m["memory_failures"] = float(len(self.retriever))
        m["memory_modes"] = float(len(self.memory.modes()))

    # ---------------------------------------------------------------- state ----------

    def state_dict(self) -> dict[str, Any]:
        """Sampler weights, counters and the last processed iteration (JSON-able). The
        memory itself lives in SQLite, committed every iteration; the state keeps its row
        counts and digest (:meth:`FailureMemory.record`) to check it against on resume."""
        return {
            "version": 1,
            "sampler": self.sampler.state_dict(),
            "counters": dict(self.counters),
            "last_iteration": self.last_iteration,
            "config": asdict(self.config),
            "memory": self.memory.record(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a checkpoint. Memory rows written after the checkpoint's iteration
        (the run went on and died before the next checkpoint) are deleted so the memory,
        the retriever index and the weights agree."""
        self.sampler.load_state_dict(state["sampler"])
        # The running config is authoritative for the schedule; the weights come from
        # the checkpoint.
        cfg = self.config
        if (self.sampler.decay_rate, self.sampler.floor, self.sampler.cap, self.sampler.replace) != (
            cfg.decay,
            cfg.floor,
            cfg.cap,
            cfg.replace,
        ):
            log.warning(
                "AIW: sampler settings differ from the checkpoint's; using the "
                "current config (decay=%s floor=%s cap=%s replace=%s)",
                cfg.decay,
                cfg.floor,
                cfg.cap,
                cfg.replace,
            )
        self.sampler.decay_rate, self.sampler.floor = cfg.decay, cfg.floor
        self.sampler.cap, self.sampler.replace = cfg.cap, cfg.replace
        self.counters.update({k: int(v) for k, v in state.get("counters", {}).items()})
        last = state.get("last_iteration")
        self.last_iteration = None if last is None else int(last)
        # Checked on a copy, cut back when next used: a memory that is not the recorded one
        # (a lost or garbled file or -wal) is an error, and the refusal changes no file.
        removed = self.memory.restore(-1 if last is None else int(last), state.get("memory"))
        if removed:
            log.info("AIW: dropping %d failure records newer than the checkpoint", removed)
        self._retriever = None  # re-read from the cut-back memory

    def reset(self) -> None:
        """Forget everything (a run restarting at iteration 0 before its first checkpoint):
        empty memory, uniform sampler, zero counters."""
        self.memory.truncate_after(-1)
        self.sampler = TaskSampler(
            self.sampler.task_ids,
            decay=self.config.decay,
            floor=self.config.floor,
            cap=self.config.cap,
            replace=self.config.replace,
        )
        self.counters = dict.fromkeys(self.counters, 0)
        self.last_iteration = None
        self._retriever = None

    def close(self) -> None:
        self.memory.close()

    def __enter__(self) -> AgentInWorld:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
