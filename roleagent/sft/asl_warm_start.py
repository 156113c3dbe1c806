"""The ASL roles' part of the warm start (``sft.asl_roles``; ``roleagent.sft.warm_start``
calls it): the examples of ``roleagent.sft.asl_roles`` written once into ``run_dir/sft``,
added to the SFT data, and the roles' held-out competence measured before ("base") and
after SFT ("sft"; ``roleagent.sft.asl_competence``).

Questions: ``sft.asl_questions`` + ``sft.asl_eval_questions`` distinct questions of the
environment's training split (``env.train_split``; never a task of an evaluation panel) in
a seeded random order (``roleagent.sft.expert.expert_tasks``); the first
``sft.asl_questions`` give the SFT examples, the rest the held-out ones. Every training
question with gold answers is the pool of follow-up parents and verifier distractors.

Files in ``run_dir/sft``::

    asl_generator.jsonl, asl_verifier.jsonl               SFT examples (trained)
    asl_generator_valid.jsonl, asl_verifier_valid.jsonl   held-out examples (measured)
    asl_counts.json                                       {"asl_generator_examples": ..., ...}
    asl_roles_evals.json                                  {label: {"metrics", "line"}}
    asl_roles_<label>.jsonl                               every held-out reply, parsed and scored

Each measurement is one ``{"asl_roles": label, "asl_generator/...": ..., "asl_verifier/...":
...}`` record in the run's ``metrics.jsonl`` and one log line (``docs/metrics.md``).

Command line (the same data and measurement outside a run; train with ``roleagent sft``)::

    python -m roleagent.sft.asl_warm_start data asl_search_warm --out DIR
    roleagent sft --data DIR/asl_train.jsonl --config asl_search_warm --out DIR/sft
    python -m roleagent.sft.asl_warm_start eval asl_search_warm --data DIR \\
        --set model.init_from=DIR/sft/final
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from roleagent.envs.search.retriever import load_corpus
from roleagent.evaluation import panel_ids
from roleagent.methods.asl.prompts import PG_SYSTEM, meta_prompt, role_chat
from roleagent.methods.asl.roles import PGEvidence, grm_evidence, pg_evidence, title_of, verdict_replies
from roleagent.sft.asl_competence import generate, generator_competence, gold_answers, summary, verifier_competence
from roleagent.sft.asl_roles import generator_examples, verifier_examples
from roleagent.sft.data import ChatExample, write_examples
from roleagent.sft.expert import expert_tasks
from roleagent.sft.sources import read_examples
from roleagent.types import Task

ROLES = ("generator", "verifier")
COUNTS, EVALS = "asl_counts.json", "asl_roles_evals.json"


def train_file(role: str) -> str:
    return f"asl_{role}.jsonl"


def valid_file(role: str) -> str:
    return f"asl_{role}_valid.jsonl"


def split_questions(train_tasks: Sequence[Task], n: int, k: int, *, seed: int, exclude=frozenset()):
    """(SFT questions, held-out questions, pool): ``n`` + ``k`` distinct training questions
    with gold answers outside ``exclude``, seeded; ``k`` shrinks (with a warning) to what
    is left after the ``n``."""
    pool = [t for t in train_tasks if t.id not in exclude and (t.metadata or {}).get("answers")]
    if n > len(pool):
        raise ValueError(f"sft.asl_questions={n}: only {len(pool)} training questions with gold answers")
    if len(pool) - n < k:
        _warn(f"sft.asl_eval_questions={k}: only {len(pool) - n} training questions left after the SFT ones")
        k = len(pool) - n
    picked = expert_tasks(pool, n + k, seed=seed)
    return picked[:n], picked[n:], pool


def write_role_data(cfg, train_tasks: Sequence[Task], out: Path, *, env, exclude=frozenset()) -> dict[str, int]:
    """Write the four example files and ``asl_counts.json`` (module docstring); returns the
    counts. ``env`` is searched for the GRM's evidence with ``asl.grm_retrieval`` and for
    the generator's with ``asl.pg_retrieval`` (titles from its retriever's passages, else the
    shipped corpus)."""
    s = cfg.sft
    evidence = grm_evidence(env) if cfg.asl.grm_retrieval else None
    pg, titles = pg_evidence(env, cfg.asl, cfg.seed), None
    if pg is not None:
        titles = {d["id"]: title_of(d) for d in getattr(pg.retriever, "docs", None) or load_corpus()}
    sft, held_out, pool = split_questions(train_tasks, s.asl_questions, s.asl_eval_questions, seed=cfg.seed,
                                          exclude=exclude)  # fmt: skip
    system = cfg.asl.system_prompts
    counts = {}
    for name, tasks in ((train_file, sft), (valid_file, held_out)):
        made = {
            "generator": generator_examples(tasks, pool, with_system=system, evidence=pg, titles=titles),
            "verifier": verifier_examples(
                tasks, pool, with_system=system, seed=cfg.seed, evidence=evidence, check=s.asl_verifier_check
            ),
        }
        for role in ROLES:
            if made[role]:
                counts[name(role).removesuffix(".jsonl") + "_examples"] = write_examples(out / name(role), made[role])
            else:
                (out / name(role)).write_text("")
    if not any(counts.get(f"asl_{role}_examples") for role in ROLES):
        raise RuntimeError("sft.asl_roles: the training questions gave no generator or verifier example")
    (out / COUNTS).write_text(json.dumps(counts))
    return counts


def _examples(path: Path) -> list[ChatExample]:
    return read_examples(path) if path.exists() and path.read_text().strip() else []


def prepare(trainer, out: Path) -> None:
    """Write the role data once (its files exist: nothing to do)."""
    if (out / COUNTS).exists():
        return
    exclude = panel_ids(trainer.cfg, trainer.pool.meta)
    write_role_data(trainer.cfg, trainer.train_tasks, out, env=trainer.pool.meta, exclude=exclude)


def train_examples(trainer, out: Path) -> list[ChatExample]:
    """The generator's and the verifier's SFT examples (written first if needed)."""
    prepare(trainer, out)
    return [e for role in ROLES for e in _examples(out / train_file(role))]


def drawn_examples(examples: Sequence[ChatExample], evidence: PGEvidence, with_system: bool) -> list[ChatExample]:
    """``examples`` (held-out generator examples) with each round-0 prompt opened by the
    results the method would show, for a passage :class:`PGEvidence` draws from the topic's
    pool (keyed by the question), instead of the question's own passage; follow-ups
    already search as the method does and are kept. The targets are unchanged (competence
    does not read them)."""
    out = []
    for example in examples:
        if example.meta["prompt"] != "topic":
            out.append(example)
            continue
        item = {"topic": example.meta["topic"]}
        shown = evidence([item], [example.meta["task"]])[0]
        chat = role_chat(PG_SYSTEM, meta_prompt(item, 0, shown), with_system)
        meta = {**example.meta, "pg_evidence": shown}
        out.append(ChatExample(chat + example.messages[-1:], example.response_prefix, meta, example.eos))
    return out


def competence(engine, cfg, env, data: Path, limit: int = 0, drawn: bool = False):
    """(generator, verifier) competence of ``engine`` on ``data``'s held-out examples
    (the first ``limit`` of each role, 0: all; None for a role without any): the
    generator samples as the PG phase does
    (``rollout.temperature``, ``rollout.top_p``, ``asl.pg_max_new_tokens``), the verifier
    is greedy (``asl.grm_max_new_tokens``) and, with ``asl.grm_verdicts: constrained``,
    chooses between the two verdict replies as the method's GRM does; ``env``'s retriever
    checks the answers. ``drawn``: round-0 prompts show a drawn passage (:func:`drawn_examples`)."""
    generator = verifier = None
    if held := _examples(data / valid_file("generator"))[: limit or None]:
        if drawn:
            if (evidence := pg_evidence(env, cfg.asl, cfg.seed)) is None:
                raise ValueError("drawn generator prompts need asl.pg_retrieval")
            held = drawn_examples(held, evidence, cfg.asl.system_prompts)
        texts, cut = generate(engine, held, max_new_tokens=cfg.asl.pg_max_new_tokens,
                              temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p)  # fmt: skip
        retriever = getattr(env, "retriever", None)
        seen = [e.meta["question"] for e in _examples(data / train_file("generator"))]
        gold = gold_answers(env) if env is not None else None
        shown = [e.meta.get("pg_evidence", "") for e in held] if "pg_evidence" in held[0].meta else None
        generator = generator_competence(texts, cut, retriever.retrieve if retriever is not None else None,
                                         topk=getattr(env, "topk", 3), seen_questions=seen, gold=gold,
                                         shown=shown)  # fmt: skip
        for row, example in zip(generator.rows, held):
            row.update(role="generator", task=example.meta["task"], prompt=example.meta["prompt"])
    if held := _examples(data / valid_file("verifier"))[: limit or None]:
        replies = verdict_replies(engine.tokenizer) if cfg.asl.grm_verdicts == "constrained" else None
        texts, cut = generate(engine, held, max_new_tokens=cfg.asl.grm_max_new_tokens, temperature=0.0, replies=replies)
        verifier = verifier_competence(texts, [e.meta["label"] for e in held], cut)
        for row, example in zip(verifier.rows, held):
            row.update(role="verifier", task=example.meta["task"], attempt=example.meta["attempt"])
    return generator, verifier


def measure_asl_roles(trainer, label: str, out: Path) -> None:
    """The roles' held-out competence as policy ``label`` ("base", "sft"), measured once:
    a record in ``metrics.jsonl`` and a log line (module docstring)."""
    cfg = trainer.cfg
    if not (cfg.sft.asl_roles and cfg.sft.asl_eval_questions > 0):
        return
    path = out / EVALS
    saved = json.loads(path.read_text()) if path.exists() else {}
    if label not in saved:
        prepare(trainer, out)
        generator, verifier = competence(trainer.engine, cfg, trainer.pool.meta, out)
        if generator is None and verifier is None:
            _warn("sft.asl_roles: no held-out example: no measurement")
            return
        metrics = {k: v for part in (generator, verifier) if part is not None for k, v in part.metrics.items()}
        saved[label] = {"metrics": metrics, "line": summary(label, generator, verifier)}
        rows = [r for part in (generator, verifier) if part is not None for r in part.rows]
        (out / f"asl_roles_{label}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        path.write_text(json.dumps(saved))
    trainer.metrics.write({"asl_roles": label, **saved[label]["metrics"]})
    if not trainer.quiet:
        _warn(saved[label]["line"])


def _warn(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ command line -----

USAGE = """python -m roleagent.sft.asl_warm_start data RECIPE --out DIR [--set KEY=VALUE]
python -m roleagent.sft.asl_warm_start eval RECIPE --data DIR [--label L] [--limit N] [--drawn]
    [--set KEY=VALUE]

data: writes the role files of the module docstring into DIR (sft.asl_questions,
sft.asl_eval_questions of the recipe; never a panel question) and DIR/asl_train.jsonl (both
roles' SFT examples, for `roleagent sft --data`).
eval: the recipe's policy (--set model.init_from=SFT/final for a checkpoint) on DIR's
held-out examples (the first N of each role with --limit); prints the summary line and
the metrics as JSON, writes DIR/asl_roles_<label>.jsonl. --drawn (with asl.pg_retrieval):
each round-0 generator prompt shows a passage drawn from its topic's pool, as the method
draws one, instead of the held-out question's own passage."""


def main(argv: Sequence[str] | None = None) -> int:
    from roleagent.config import load_config
    from roleagent.envs import make_env
    from roleagent.sft.role_cli import load_engine, role_parser
    from roleagent.trainer.checks import prepare

    parser = role_parser("python -m roleagent.sft.asl_warm_start", USAGE)
    parser.add_argument("--data", default="")
    parser.add_argument("--label", default="")
    parser.add_argument("--drawn", action="store_true")
    args = parser.parse_args(argv)
    cfg = prepare(load_config(args.recipe, args.set))
    env = make_env(cfg.env.name, **cfg.env.kwargs)
    if args.command == "data":
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        exclude = panel_ids(cfg, env)
        counts = write_role_data(cfg, env.tasks(cfg.env.train_split), out, env=env, exclude=exclude)
        both = [e for role in ROLES for e in _examples(out / train_file(role))]
        counts["asl_train_examples"] = write_examples(out / "asl_train.jsonl", both)
        print(json.dumps(counts))
        return 0
    data = Path(args.data)
    label = args.label or (cfg.model.init_from or cfg.model.name)
    if args.drawn and not cfg.asl.pg_retrieval:
        parser.error("--drawn shows the generator search results: it needs --set asl.pg_retrieval=true")
    generator, verifier = competence(load_engine(cfg)[1], cfg, env, data, args.limit, args.drawn)
    rows = [r for part in (generator, verifier) if part is not None for r in part.rows]
    safe = "".join(c if c.isalnum() else "_" for c in label)
    (data / f"asl_roles_{safe}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(summary(label, generator, verifier))
    print(json.dumps({k: v for part in (generator, verifier) if part for k, v in part.metrics.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
