"""Agentic Self-Learning (Sun et al., 2025, "Towards Agentic Self-Learning LLMs in Search
Environment", arXiv 2510.14253) as a method plug-in. One backbone plays three roles; one
loop iteration trains the role of the current phase, and phases cycle PG → GRM → PM::

    PG   tasks  = meta prompts of D_PG (topics in round 0, then HARDER/EASIER follow-ups)
         trajs  = N generations per meta prompt, one turn each           (collector)
         reward = K GRM checks: kept iff mean ≥ C; kept → M policy episodes in the
                  environment, judged by the GRM: reward = entropy of the M verdicts
                  (rejected: asl.reject_reward); kept questions join D_PM, the M
                  (question, answer, verdict) triples join D_GRM          (scorer)
         ends when D_PM holds asl.pg_target_questions (or phase_max_iterations)
    GRM  tasks  = D_GRM balanced per question (+ real verification data from a late round on)
         reward = 1 when the verdict equals the label (RLVR)
    PM   tasks  = D_PM questions as environment tasks (the generated tasks flow through
                  this task source into the ordinary rollouts)
         reward = the GRM's verdict on the final answer (the environment's own reward is
                  kept in trajectory.extras["asl"] for measurement); each question's mean
                  verdict makes its follow-up (HARDER if > 0.5, else EASIER) for D_PG
    GRM and PM phases end on a reward plateau (asl.plateau_window / plateau_tolerance).

The advantage estimator and objective are the loop's (``algo.name``: GRPO by default; the
authors' released script trains every role with PPO and a critic, ``adv_estimator=gae``,
which the paper does not state). Files: ``roleagent.methods.asl.files``.
"""

from __future__ import annotations

import random
import time
from typing import Any

import numpy as np

from roleagent.algos import asl
from roleagent.fields import ConfigError
from roleagent.methods.asl.config import ASLConfig
from roleagent.methods.asl.files import RoundFiles
from roleagent.methods.asl.prompts import final_answer, parse_pair
from roleagent.methods.asl.roles import (
    generate_turns,
    grm_chats,
    grm_evidence,
    judge,
    pg_chats,
    pg_evidence,
    question_task,
    role_task,
    verdict_replies,
    verification_pairs,
)
from roleagent.rollout import RolloutStats, run_episodes
from roleagent.trainer.methods import Method
from roleagent.trainer.stages import RolloutCollector
from roleagent.types import Task, Trajectory

PHASES = ("pg", "grm", "pm")


class ASLMethod(Method):
    name = "asl"
    config_class = ASLConfig
    plays_jobs = True  # one trajectory per job, in order: dynamic sampling may add rounds (GRM's dead groups)

    def __init__(self, context, config: ASLConfig):
        super().__init__(context, config)
        self.files = RoundFiles(context.run_dir)
        self.round, self.phase, self.phase_iterations = 0, "pg", 0
        self.phase_rewards: list[float] = []
        self.pg_pool: list[dict] = self._topics()  # D_PG^(t-1): meta-prompt items
        self.pm_pool: list[dict] = []  # D_PM^(t): kept questions
        self.grm_pool: list[dict] = []  # D_GRM^(t): self-generated (question, response, label)
        self.grm_train: list[dict] = []  # the GRM phase's examples
        self.followups: dict[str, dict] = {}  # D_PG^(t), by question id
        self.questions_made = 0  # question ids are unique over the run
        self.scored: list[tuple[dict[str, float], int]] = []  # this iteration's rounds: (metrics, trajectories)
        self._grm_eval: list[dict] | None = None
        # the search results the GRM and the PG are shown (asl.grm_retrieval, asl.pg_retrieval;
        # an environment without a knowledge base is refused here, before any training)
        self._search = grm_evidence(context.pool.meta) if config.grm_retrieval else None
        self._pg_search = pg_evidence(context.pool.meta, config, context.cfg.seed) if config.pg_retrieval else None

    @classmethod
    def check_config(cls, cfg) -> None:
        for name in ("wia", "aiw", "seal", "agent_r"):
            if getattr(cfg, name).enabled:
                raise ConfigError(
                    f"asl replaces the task source, collector and scorer: it cannot run with {name}.enabled"
                )
        a = cfg.asl
        if a.phase_min_iterations > a.phase_max_iterations:
            raise ConfigError(
                f"asl.phase_min_iterations={a.phase_min_iterations} > asl.phase_max_iterations={a.phase_max_iterations}"
            )

    # -- stages: this object is the task source, the collector and the scorer ------------
    def task_source(self):
        return self

    def collector(self):
        return self

    def scorer(self):
        return self

    def sample(self, n: int, rng: np.random.Generator) -> list[Task]:
        """``n`` tasks of the current phase's pool (distinct while the pool has n)."""
        pool = self.phase_tasks()
        picks = rng.choice(len(pool), size=n, replace=len(pool) < n)
        return [pool[i] for i in picks]

    def phase_tasks(self) -> list[Task]:
        env, r = self.context.cfg.env.name, self.round
        if self.phase == "pm":
            return [question_task(record, env) for record in self.pm_pool]
        if self.phase == "pg":
            return [role_task(f"asl/pg/{r}/{i}", env, "pg", item) for i, item in enumerate(self.pg_pool)]
        return [role_task(f"asl/grm/{r}/{i}", env, "grm", record) for i, record in enumerate(self.grm_train)]

    def collect(self, iteration, progress=None) -> tuple[list[Trajectory], RolloutStats]:
        ctx, cfg, jobs = self.context, self.config, iteration.jobs
        if self.phase == "pm":
            return RolloutCollector(ctx.engine, ctx.pool, ctx.settings).collect(iteration, progress)
        started = time.perf_counter()
        if self.phase == "pg":
            chats = pg_chats(jobs, self.round, cfg.system_prompts, self._pg_search)
            limit = cfg.pg_max_new_tokens
        else:
            records = [t.metadata["asl"] for t, _ in jobs]
            chats = grm_chats([(r["question"], r["response"]) for r in records], cfg.system_prompts, self._search)
            limit = cfg.grm_max_new_tokens
        replies = (
            verdict_replies(ctx.engine.tokenizer) if self.phase == "grm" and cfg.grm_verdicts == "constrained" else None
        )
        trajectories = generate_turns(
            ctx.engine, jobs, chats, max_new_tokens=limit, settings=ctx.settings, replies=replies
        )
        stats = RolloutStats(
            generate_s=time.perf_counter() - started,
            turns=len(trajectories),
            generated_tokens=sum(len(t.steps[0].action_ids) for t in trajectories),
            prompt_tokens=sum(len(t.steps[0].prompt_ids) for t in trajectories),
        )
        return trajectories, stats

    def score(self, trajectories: list[Trajectory]) -> dict[str, float]:
        """Scores one collection round (``dynamic_sampling`` plays several: their metrics pool)."""
        scored = {"pg": self._score_generator, "grm": self._score_grm, "pm": self._score_policy}[self.phase]
        played = [t for t in trajectories if not t.crashed and t.steps]
        self.scored.append((scored(played), len(played)))
        return {}

    # -- the three rewards -----------------------------------------------------------------
    def _judge_attempts(self, trajectories: list[Trajectory]) -> list[dict]:
        """The GRM's verdict on each policy episode's final answer (no answer: 0, no query)."""
        answers = [final_answer(t.steps[-1].action_text) if t.steps else None for t in trajectories]
        asked = [i for i, a in enumerate(answers) if a is not None]
        pairs = [(trajectories[i].task.metadata["question"], answers[i]) for i in asked]
        judged = dict(zip(asked, self._judge(pairs)))
        out = []
        for i, answer in enumerate(answers):
            text, verdict = judged.get(i, ("", None))
            score = 1 if verdict == 1 else 0
            out.append({"answer": answer, "grm_text": text, "verdict": verdict, "score": score})
        return out

    def _judge(self, pairs, temperature: float | None = None):
        """The GRM's (text, verdict) per pair, at ``asl.judge_temperature`` unless told."""
        cfg = self.config
        return judge(
            self.context.engine,
            pairs,
            with_system=cfg.system_prompts,
            max_new_tokens=cfg.grm_max_new_tokens,
            temperature=cfg.judge_temperature if temperature is None else temperature,
            constrained=cfg.grm_verdicts == "constrained",
            evidence=self._search,
        )

    def _score_policy(self, trajectories: list[Trajectory]) -> dict[str, float]:
        """PM phase: reward = GRM verdict on the last step; the follow-ups of D_PG."""
        judged = self._judge_attempts(trajectories)
        by_question: dict[str, list[int]] = {}
        agree = []
        for trajectory, record in zip(trajectories, judged):
            env_success, env_return = bool(trajectory.success), trajectory.episode_return
            for step in trajectory.steps:
                step.reward = -step.penalty
            trajectory.steps[-1].reward = record["score"] - trajectory.steps[-1].penalty
            trajectory.success = bool(record["score"])
            trajectory.extras["asl"] = {"role": "pm", **record, "env_success": env_success, "env_return": env_return}
            by_question.setdefault(trajectory.task.id, []).append(record["score"])
            agree.append(record["score"] == int(env_success))
        questions = {r["id"]: r for r in self.pm_pool}
        for qid, scores in by_question.items():
            parent = questions[qid]
            flag = asl.follow_up(scores, self.config.followup_threshold)
            pair = {k: parent[k] for k in ("question", "answer", "hops")}
            self.followups[qid] = {**pair, "flag": flag, "parent": qid}
        scores = [r["score"] for r in judged]
        return {
            "reward": _mean(scores),
            "env_success": _mean([t.extras["asl"]["env_success"] for t in trajectories]),
            "grm_agrees_with_env": _mean(agree),
            "no_answer": _mean([r["answer"] is None for r in judged]),
        }

    def _score_generator(self, trajectories: list[Trajectory]) -> dict[str, float]:
        """PG phase: K/C filter, M policy attempts at kept questions, entropy reward."""
        cfg, ctx = self.config, self.context
        pairs = [parse_pair(t.steps[0].action_text) for t in trajectories]
        parsed = [i for i, p in enumerate(pairs) if p is not None]
        checks = self._judge([pairs[i] for i in parsed for _ in range(cfg.checks)])
        rows = [
            {"task": t.task.id, "meta": t.task.metadata["asl"], "text": t.steps[0].action_text} for t in trajectories
        ]
        kept: list[int] = []
        for j, i in enumerate(parsed):
            verdicts = [v for _, v in checks[j * cfg.checks : (j + 1) * cfg.checks]]
            mean, accepted = asl.acceptance(verdicts, cfg.accept)
            rows[i].update(question=pairs[i][0], answer=pairs[i][1], checks=verdicts, check_mean=mean, kept=accepted)
            if accepted:
                kept.append(i)
        records = [self._new_question(pairs[i], trajectories[i].task.metadata["asl"]) for i in kept]
        jobs = [(question_task(r, ctx.cfg.env.name), r["number"]) for r in records for _ in range(cfg.attempts)]
        attempts = run_episodes(engine=ctx.engine, pool=ctx.pool, jobs=jobs, settings=ctx.settings)[0] if jobs else []
        judged = self._judge_attempts(attempts)
        triples = []
        for k, (i, record) in enumerate(zip(kept, records)):
            block = judged[k * cfg.attempts : (k + 1) * cfg.attempts]
            entropy = asl.verdict_entropy([r["score"] for r in block])
            rows[i].update(id=record["id"], verdicts=[r["verdict"] for r in block], reward=entropy)
            triples += [
                {"question": record["question"], "response": r["answer"], "label": r["verdict"], "source": record["id"]}
                for r in block
                if r["verdict"] is not None
            ]
        for trajectory, row in zip(trajectories, rows):
            reward = row.get("reward", cfg.reject_reward)
            row["reward"] = reward
            trajectory.steps[0].reward = float(reward)
            trajectory.success = bool(row.get("kept", False))
            trajectory.extras["asl"] = {"role": "pg", **{k: v for k, v in row.items() if k != "text"}}
        self.pm_pool += records
        self.grm_pool += triples
        self.files.append(self.round, "questions.jsonl", rows)
        self.files.append(self.round, "grm_data.jsonl", triples)
        return {
            "reward": _mean([r["reward"] for r in rows]),
            "parsed": len(parsed) / max(len(rows), 1),
            "kept": len(kept) / max(len(rows), 1),
        }

    def _score_grm(self, trajectories: list[Trajectory]) -> dict[str, float]:
        """GRM phase: reward 1 when the verdict equals the example's label (RLVR)."""
        rewards, unparsed = [], []
        for trajectory in trajectories:
            label = trajectory.task.metadata["asl"]["label"]
            verdict = asl.parse_verdict(trajectory.steps[0].action_text)
            reward = 1.0 if verdict == label else 0.0
            trajectory.steps[0].reward = reward
            trajectory.success = bool(reward)
            trajectory.extras["asl"] = {"role": "grm", "label": label, "verdict": verdict}
            rewards.append(reward)
            unparsed.append(verdict is None)
        return {"reward": _mean(rewards), "unparsed": _mean(unparsed)}

    def _new_question(self, pair: tuple[str, str], item: dict) -> dict:
        number = self.questions_made
        self.questions_made += 1
        hops = asl.follow_up_hops(item["hops"], item["flag"]) if "flag" in item else 1
        return {
            "id": f"asl/q{number:06d}",
            "number": number,
            "question": pair[0],
            "answer": pair[1],
            "hops": hops,
            "round": self.round,
            "parent": item.get("parent"),
        }

    # -- phases and rounds -------------------------------------------------------------------
    def after_iteration(self, trajectories, iteration: int) -> dict[str, float]:
        scores, self.scored = asl.pooled_means(self.scored), []
        if self.phase == "pg":
            scores.update(questions=float(len(self.pm_pool)), grm_data=float(len(self.grm_pool)))
        metrics = {f"{self.phase}_{k}": v for k, v in scores.items()}
        metrics.update(round=float(self.round), phase=float(PHASES.index(self.phase)))
        self.phase_rewards.append(scores.get("reward", 0.0))
        self.phase_iterations += 1
        if self._phase_done():
            metrics.update(self._advance())
        return metrics

    def _phase_done(self) -> bool:
        cfg = self.config
        if self.phase_iterations < cfg.phase_min_iterations:
            return False
        if self.phase_iterations >= cfg.phase_max_iterations:
            return True
        if self.phase == "pg":
            return len(self.pm_pool) >= cfg.pg_target_questions
        return asl.plateaued(self.phase_rewards, cfg.plateau_window, cfg.plateau_tolerance)

    def _advance(self) -> dict[str, float]:
        """Enter the next phase with data (an empty GRM or PM phase is skipped)."""
        out: dict[str, float] = {}
        following = {"pg": "grm" if self.config.train_grm else "pm", "grm": "pm", "pm": "end"}[self.phase]
        if following == "grm":
            self.grm_train = self._grm_examples()
            following = "grm" if self.grm_train else "pm"
        if following == "pm" and not self.pm_pool:
            following = "end"
        if following == "end":
            out = self._end_round()
            following = "pg"
        self.phase, self.phase_iterations, self.phase_rewards = following, 0, []
        return out

    def _grm_examples(self) -> list[dict]:
        """D_GRM balanced per question (:func:`roleagent.algos.asl.balance_per_question`:
        each question's minority verdicts plus as many of its majority, the newest
        questions first up to grm_max_examples), plus real verification data from
        asl.late_injection_round on."""
        cfg, ctx = self.config, self.context
        rng = random.Random(f"{ctx.cfg.seed}/asl/{self.round}")
        pool = self.grm_pool
        kept = asl.balance_per_question(
            [r["source"] for r in pool], [r["label"] for r in pool], rng, cfg.grm_max_examples
        )
        examples = [pool[i] for i in kept]
        if cfg.late_injection_round and self.round >= cfg.late_injection_round:
            env = ctx.pool.meta
            real = verification_pairs(env.tasks(ctx.cfg.env.train_split), env, cfg.injection_examples // 2)
            examples += [{**r, "source": f"real:{r['source']}"} for r in real]
        self.files.append(self.round, "grm_train.jsonl", examples)
        return examples

    def _end_round(self) -> dict[str, float]:
        """Write D_PG^(t), measure the GRM on held-out gold answers, start round t+1."""
        out = {"rounds_done": float(self.round + 1)}
        followups = list(self.followups.values())
        self.files.append(self.round, "followups.jsonl", followups)
        if self.config.grm_eval_questions and (accuracy := self._evaluate_grm()) is not None:
            out["grm_eval_accuracy"] = accuracy
        self.round += 1
        self.pg_pool = followups or self._topics()
        self.pm_pool, self.grm_pool, self.grm_train, self.followups = [], [], [], {}
        return out

    def _evaluate_grm(self) -> float | None:
        """GRM accuracy on the eval split's questions: gold answer → correct, another
        question's gold answer → wrong (one greedy verdict each)."""
        ctx, cfg = self.context, self.config
        if self._grm_eval is None:
            env = ctx.pool.meta
            self._grm_eval = verification_pairs(
                env.tasks(ctx.cfg.env.eval_split), env, cfg.grm_eval_questions, spread=True
            )
        records = self._grm_eval
        judged = self._judge([(r["question"], r["response"]) for r in records], temperature=0.0)
        rows = [{**r, "verdict": v, "text": text} for r, (text, v) in zip(records, judged)]
        self.files.append(self.round, "grm_eval.jsonl", rows)
        return _mean([r["verdict"] == r["label"] for r in rows]) if rows else None

    def _topics(self) -> list[dict]:
        return [{"topic": topic} for topic in self.config.topics]

    # -- run directory and checkpoints ---------------------------------------------------------
    def start_fresh(self) -> None:
        self.files.start_fresh()

    def state_dict(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "phase": self.phase,
            "phase_iterations": self.phase_iterations,
            "phase_rewards": list(self.phase_rewards),
            "pg_pool": self.pg_pool,
            "pm_pool": self.pm_pool,
            "grm_pool": self.grm_pool,
            "grm_train": self.grm_train,
            "followups": self.followups,
            "questions_made": self.questions_made,
            "rows": dict(self.files.rows),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.round, self.phase = int(state["round"]), str(state["phase"])
        self.phase_iterations, self.phase_rewards = int(state["phase_iterations"]), list(state["phase_rewards"])
        self.pg_pool, self.pm_pool = list(state["pg_pool"]), list(state["pm_pool"])
        self.grm_pool, self.grm_train = list(state["grm_pool"]), list(state["grm_train"])
        self.followups, self.questions_made = dict(state["followups"]), int(state["questions_made"])
        self.files.restore(state["rows"])


def _mean(values) -> float:
    """The mean, 0.0 for none (metrics stay finite)."""
    values = [float(v) for v in values]
    return float(np.mean(values)) if values else 0.0
