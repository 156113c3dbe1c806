"""``roleagent`` command line: train, export, eval, sft, expert-data, view, report, retriever, envs.

roleagent train role_agent_textcraft --set iterations=3 --set optim.lr=1e-4
roleagent train grpo_alfworld --nproc 2          # data parallel (torchrun; gloo on CPU, NCCL on GPUs)
roleagent export runs/grpo_alfworld --merge-lora --dtype bf16 --out exported   # loads with from_pretrained
roleagent train --explain                     # every config key with its help
roleagent eval --run runs/role_agent_textcraft  # latest checkpoint on its panel
roleagent eval --env alfworld --policy expert --split valid_seen
roleagent eval --env alfworld --policy react --max-tasks 6 --set threads=1   # also: reflexion --trials 3
roleagent sft --expert alfworld --tasks 50 --out runs/sft   # then --set model.init_from=runs/sft/final
roleagent expert-data grpo_alfworld --out expert.jsonl --tasks 50
roleagent view runs/role_agent_textcraft --failed
roleagent view TREES_DIR                      # Agent-R search trees (tree JSON files)
roleagent view runs/role_agent_textcraft --group TASK_ID   # a task's G rollouts side by side
roleagent report runs/a runs/b --out report.html  # HTML report, runs overlaid
roleagent envs
roleagent retriever --port 8000              # Search-R1's POST /retrieve over the search corpus
"""

from __future__ import annotations

import argparse
import errno
import sys
from pathlib import Path

from roleagent.config import ConfigError, TrainConfig, load_config
from roleagent.config_rules import explain
from roleagent.fields import MAX_EPISODES
from roleagent.sft.role_cli import load_engine
from roleagent.terminal import one_line


def _train(args: argparse.Namespace) -> int:
    if args.explain:
        print("\n".join(explain(TrainConfig)))
        return 0
    from roleagent.trainer import Trainer
    from roleagent.trainer.checks import prepare
    from roleagent.trainer.distributed import DistributedTrainer, launched, torchrun

    cfg = prepare(load_config(args.config, args.set))  # a config error before torchrun or a run folder
    if args.nproc > 1:  # re-run this command under torchrun, one process per rank
        return torchrun(
            args.nproc,
            [*([args.config] if args.config else []), *(f"--set={s}" for s in args.set)]
            + (["--no-resume"] if args.no_resume else []),
        )
    trainer = (DistributedTrainer if launched() else Trainer)(cfg, resume=not args.no_resume)
    try:
        trainer.run()
    finally:
        trainer.close()
    if not launched() or trainer.dp.is_main:
        print(f"run directory: {cfg.run_dir}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from roleagent.export import export_run

    try:
        out = export_run(
            args.run, args.out, checkpoint=args.checkpoint, merge_lora=args.merge_lora, dtype=args.dtype, quiet=False
        )
    except FileExistsError as error:  # --out is taken: bad input, one line
        raise ConfigError(str(error)) from None
    print(f"exported: {out}")
    return 0


def _eval_config(args: argparse.Namespace):
    """The config ``eval`` plays: the run's (``--run``: its folder is the run folder) or the
    recipe's, with ``--split`` (the only panel, whatever ``eval.splits`` says),
    ``--max-tasks`` and ``--out`` (the evaluation's own folder) applied and checked."""
    overrides = ["iterations=0", *args.set]  # evaluation never trains (model.engine=openai cannot)
    if args.run:
        from roleagent.run_config import load_run_config

        cfg = load_run_config(Path(args.run), overrides, check=False)
    else:
        overrides = ([f"env.name={args.env}"] if args.env else []) + overrides
        cfg = load_config(args.config, overrides)
    if args.split:
        cfg.env.eval_split, cfg.eval.splits = args.split, []
    if args.max_tasks is not None:
        cfg.eval.max_tasks = args.max_tasks
    if args.skip_tasks is not None:
        cfg.eval.skip_tasks = args.skip_tasks
    if not 1 <= args.workers <= MAX_EPISODES or args.trials < 1:
        raise ConfigError(f"--workers={args.workers}, --trials={args.trials}: must be in [1, {MAX_EPISODES}], >= 1")
    cfg.run_dir = args.out or str(Path(args.run) / "eval" if args.run else "runs/eval")
    from roleagent.trainer.checks import prepare

    prepare(cfg)  # --split, --max-tasks and --out are config fields too
    return cfg


def _eval(args: argparse.Namespace) -> int:
    from roleagent.evaluation import (
        check_measured,
        eval_panel,
        format_table,
        run_expert_episodes,
        success_by_type,
    )

    cfg = _eval_config(args)
    if args.policy in ("react", "reflexion"):
        from roleagent.baselines import evaluate_baseline

        memory = args.memory or str(Path(cfg.run_dir) / "reflexion.sqlite")
        splits = [cfg.env.eval_split] if args.split else None
        rows = evaluate_baseline(
            cfg, args.policy, splits=splits, workers=args.workers, trials=args.trials, memory=memory
        )
        print(format_table(rows, title=f"{cfg.env.name} success (%)"))
        return 0
    if args.policy == "expert":
        from roleagent.envs.workers import make_pool

        with make_pool(cfg.env, slots=args.workers) as pool:
            splits = (
                [cfg.env.eval_split] if args.split or cfg.env.name != "alfworld" else ["valid_seen", "valid_unseen"]
            )
            rows = {}
            for split in splits:
                tasks = eval_panel(pool.meta, cfg, split)
                max_steps = cfg.rollout.max_steps or pool.meta.max_steps
                jobs = [(t, cfg.eval.seed) for t in tasks]
                trajectories = run_expert_episodes(pool, jobs, max_steps=max_steps, quiet=False, desc=split)
                rows[f"expert {split}"] = success_by_type(trajectories, pool.meta.table_columns)
                check_measured({f"the expert's {split} panel": trajectories})
        print(format_table(rows, title=f"{cfg.env.name} success (%)"))
        return 0

    if args.run:  # the run's checkpoint, evaluated into the evaluation's own folder
        from roleagent.trainer.evaluate import evaluate_checkpoint

        evals = evaluate_checkpoint(cfg, Path(args.run), args.label)
    else:
        from roleagent.trainer import Trainer

        trainer = Trainer(cfg, resume=False, quiet=False)
        try:
            trainer.evaluate(args.label)
        finally:
            trainer.close()
        evals = trainer.evals
    from roleagent.trainer.run_files import panel_statistics, statistics_lines

    rows = {f"{e.label} {e.split}": e for e in evals if e.label == args.label}
    check_measured({f"panel {e.split or cfg.env.eval_split}": e.trajectories for e in rows.values()})
    print(format_table({row: e.table for row, e in rows.items()}, title=f"{cfg.env.name} success (%)"))
    for row, e in rows.items():  # count and 95% interval (one row per panel: nothing to pair)
        print("\n".join(statistics_lines(panel_statistics({row: e}))))
    return 0


def _sft_config(args: argparse.Namespace):
    """The config of ``sft`` / ``expert-data``: a recipe, or an environment name with defaults."""
    from roleagent.envs import env_specs

    source = getattr(args, "expert", None) or getattr(args, "recipe", None) or args.config
    from roleagent.trainer.checks import prepare

    if source in env_specs():
        return prepare(load_config(args.config, [f"env.name={source}", *args.set]))
    return prepare(load_config(source, args.set))


def _expert_data(args: argparse.Namespace) -> int:
    from roleagent.sft.data import write_examples
    from roleagent.sft.expert import play_expert

    if args.tasks < 1 or not 1 <= args.workers <= MAX_EPISODES:
        raise ConfigError(f"--tasks must be >= 1 and --workers in [1, {MAX_EPISODES}]")
    cfg = _sft_config(args)
    _, engine = load_engine(cfg, lora=False)
    examples, counts = play_expert(cfg, engine, args.tasks, workers=args.workers, quiet=False)
    write_examples(args.out, examples)
    print(f"{args.out}: {counts['examples']} examples from {counts['successes']}/{counts['episodes']} expert episodes")
    return 0


def _sft(args: argparse.Namespace) -> int:
    from roleagent.sft.sources import format_eos, read_examples
    from roleagent.trainer.run_lock import RunDirLock

    if not args.data and not args.expert:
        raise ConfigError("give --data FILE_OR_DATASET and/or --expert RECIPE_OR_ENV")
    if args.tasks < 1:
        raise ConfigError(f"--tasks={args.tasks}: must be >= 1")
    cfg = _sft_config(args)
    out = Path(args.out)
    examples = read_examples(args.data, eos=format_eos(cfg)) if args.data else []
    out.mkdir(parents=True, exist_ok=True)
    with RunDirLock(out):  # one `roleagent sft --out DIR` at a time, as one trainer per run_dir
        return _sft_locked(args, cfg, out, examples)


def _sft_locked(args: argparse.Namespace, cfg, out: Path, examples: list) -> int:
    from roleagent.models.loading import sft_info
    from roleagent.sft.data import encode_example, role_flags, write_examples
    from roleagent.sft.expert import play_expert
    from roleagent.sft.sources import read_examples
    from roleagent.sft.train import train_sft

    policy, engine = load_engine(cfg, lora=True)
    if args.expert:
        expert_file = out / "expert.jsonl"
        if not expert_file.exists():
            expert, counts = play_expert(cfg, engine, args.tasks, quiet=False)
            print(f"expert: {counts['examples']} examples from {counts['successes']}/{counts['episodes']} episodes")
            write_examples(expert_file, expert)
        examples += read_examples(expert_file)
    encoded = [encode_example(engine, e) for e in examples]
    base = sft_info(cfg.model.name, cfg.model.init_from, cfg.seed)
    roles = role_flags(examples)
    final = train_sft(policy, encoded, out, cfg=cfg.sft, seed=cfg.seed, base=base, log=print, quiet=False, roles=roles)
    print(f"SFT checkpoint: {final} (use it with --set model.init_from={final})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="roleagent", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train a policy from a recipe")
    train.add_argument("config", nargs="?", help="recipe YAML path or shipped recipe name (default: all defaults)")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    train.add_argument("--no-resume", action="store_true", help="ignore checkpoints in the run directory")
    train.add_argument("--explain", action="store_true", help="list every config key with its help")
    train.add_argument("--nproc", type=int, default=1, help="data-parallel processes on this machine (runs torchrun)")
    train.set_defaults(func=_train)
    export = sub.add_parser("export", help="write a run's checkpoint as a folder transformers/vLLM load")
    export.add_argument("run", help="run directory")
    export.add_argument("--out", required=True, help="output folder")
    export.add_argument(
        "--checkpoint", default="latest", help="'latest' (the newest valid, as resume) or a folder name (iter_000003)"
    )
    export.add_argument("--merge-lora", action="store_true", help="merge LoRA adapters into the base weights")
    export.add_argument(
        "--dtype", choices=["fp32", "bf16", "fp16"], default="fp32", help="precision of the weights written"
    )
    export.set_defaults(func=_export)

    ev = sub.add_parser("eval", help="evaluate a policy on a fixed panel")
    ev.add_argument("config", nargs="?", help="recipe (for a base-model evaluation)")
    ev.add_argument("--run", help="run directory: evaluate its latest checkpoint")
    ev.add_argument("--policy", choices=["model", "expert", "react", "reflexion"], default="model")
    ev.add_argument("--trials", type=int, default=3, help="reflexion: attempts per task")
    ev.add_argument("--memory", help="reflexion: SQLite file of reflections (default: OUT/reflexion.sqlite)")
    ev.add_argument("--env", help="environment name (overrides the recipe's)")
    ev.add_argument("--split", help="evaluation split / panel")
    ev.add_argument("--max-tasks", type=int, help="first k tasks of the panel")
    ev.add_argument("--skip-tasks", type=int, help="leave out the split's first k tasks before --max-tasks")
    ev.add_argument("--workers", type=int, default=4, help="environment processes (expert policy)")
    ev.add_argument("--label", default="eval", help="row label of the table")
    ev.add_argument("--out", help="output folder (default: RUN/eval with --run, else runs/eval); never the run's files")
    ev.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ev.set_defaults(func=_eval)
    _add_data_parsers(sub)
    from roleagent.cli_inspect import add_inspection_parsers

    add_inspection_parsers(sub)
    return parser


def _add_data_parsers(sub) -> None:
    """Subcommands that make SFT data and checkpoints: sft, expert-data."""
    sft = sub.add_parser("sft", help="supervised fine-tuning on chat examples (a checkpoint for model.init_from)")
    sft.add_argument(
        "--data",
        help="chat examples: JSONL/JSON, roleagent's or AgentTraj's, or a datasets dataset (roleagent.sft.sources)",
    )
    sft.add_argument("--expert", metavar="RECIPE_OR_ENV", help="also train on the expert's episodes of this recipe/env")
    sft.add_argument("--tasks", type=int, default=100, help="training tasks the expert plays (with --expert)")
    sft.add_argument("--config", help="recipe for the model and sft.* settings (default: --expert's, else defaults)")
    sft.add_argument("--out", required=True, help="output folder (resumes if it holds checkpoints)")
    sft.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    sft.set_defaults(func=_sft)

    data = sub.add_parser("expert-data", help="write the expert's training-task episodes as SFT chat examples")
    data.add_argument("recipe", metavar="RECIPE_OR_ENV", help="recipe (prompt format, env) or environment name")
    data.add_argument("--out", required=True, help="JSONL file to write")
    data.add_argument("--tasks", type=int, default=100, help="training tasks the expert plays")
    data.add_argument("--workers", type=int, default=4, help="environment processes")
    data.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    data.set_defaults(func=_expert_data, config=None)


def _known_error(error: Exception) -> tuple[str, int] | None:
    """The one-line prefix and exit code of an error the user can act on: bad SFT data (2),
    a run directory damaged, busy or tampered with (3), an OpenAI-compatible server that
    cannot be used or a panel whose every episode crashed (4); None for anything else (a bug: its traceback is shown)."""
    from roleagent.engine.openai_http import EngineError
    from roleagent.evaluation import EvaluationError
    from roleagent.methods.role_agent.aiw.memory import MemoryDamaged
    from roleagent.sft.data import SFTDataError
    from roleagent.trainer.checkpoint import CheckpointError, RunDirBusy

    kinds = {
        SFTDataError: ("data error", 2),
        EngineError: ("engine error", 4),
        EvaluationError: ("evaluation error", 4),
    }
    kinds.update(dict.fromkeys((CheckpointError, RunDirBusy, MemoryDamaged), ("run directory error", 3)))
    return next((known for kind, known in kinds.items() if isinstance(error, kind)), None)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as error:
        print(f"config error: {one_line(error)}", file=sys.stderr)  # one line
        return 2
    except Exception as error:
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):  # outside a checkpoint
            print(f"disk full: {one_line(error)}; free space and rerun the same command", file=sys.stderr)
            return 3
        known = _known_error(error)
        if known is None:
            raise
        prefix, code = known
        print(f"{prefix}: {one_line(error)}", file=sys.stderr)  # one line
        return code
    except KeyboardInterrupt:
        print("interrupted: rerun the same command to resume from the last checkpoint", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into e.g. `head`, which closed early
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
