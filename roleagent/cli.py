"""``roleagent`` command line: train, eval, view, envs.

roleagent train role_agent_textcraft --set iterations=3 --set optim.lr=1e-4
roleagent train --explain                     # every config key with its help
roleagent eval --run runs/role_agent_textcraft  # latest checkpoint on its panel
roleagent eval --env alfworld --policy expert --split valid_seen
roleagent view runs/role_agent_textcraft --failed
roleagent envs
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from roleagent.config import ConfigError, explain, load_config, validate


def _train(args: argparse.Namespace) -> int:
    if args.explain:
        print("\n".join(explain()))
        return 0
    cfg = load_config(args.config, args.set)
    from roleagent.trainer import Trainer

    trainer = Trainer(cfg, resume=not args.no_resume)
    try:
        trainer.run()
    finally:
        trainer.close()
    print(f"run directory: {cfg.run_dir}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    from roleagent.evaluation import format_table, panel, run_expert_episodes, success_by_type

    overrides = list(args.set)
    if args.run:
        config_path = Path(args.run) / "config.yaml"
        if not config_path.exists():
            raise ConfigError(f"{args.run} has no config.yaml: is it a run directory?")
        cfg = load_config(config_path, overrides)
    else:
        overrides = ([f"env.name={args.env}"] if args.env else []) + overrides
        cfg = load_config(args.config, overrides)
    if args.split:
        cfg.env.eval_split = args.split
    if args.max_tasks is not None:
        cfg.eval.max_tasks = args.max_tasks
    if args.workers < 1:
        raise ConfigError(f"--workers={args.workers}: must be >= 1")
    validate(cfg)  # --split and --max-tasks are config fields too

    if args.policy == "expert":
        from roleagent.envs.workers import EnvPool

        with EnvPool(
            cfg.env.name, cfg.env.kwargs, slots=args.workers, processes=cfg.env.processes, timeout=cfg.env.timeout
        ) as pool:
            splits = (
                [cfg.env.eval_split] if args.split or cfg.env.name != "alfworld" else ["valid_seen", "valid_unseen"]
            )
            rows = {}
            for split in splits:
                tasks = panel(pool.meta.tasks(split), cfg.eval.max_tasks)
                max_steps = cfg.rollout.max_steps or pool.meta.max_steps
                trajectories = run_expert_episodes(pool, [(t, cfg.eval.seed) for t in tasks], max_steps=max_steps)
                rows[f"expert {split}"] = success_by_type(trajectories, pool.meta.table_columns)
        print(format_table(rows, title=f"{cfg.env.name} success (%)"))
        return 0

    from roleagent.trainer import Trainer

    if not args.run:
        cfg.run_dir = args.out
    cfg.iterations = 0
    trainer = Trainer(cfg, resume=bool(args.run), quiet=False)
    try:
        result = trainer.evaluate(args.label)
    finally:
        trainer.close()
    print(format_table({f"{args.label} {cfg.env.eval_split}": result.table}, title=f"{cfg.env.name} success (%)"))
    return 0


def _view(args: argparse.Namespace) -> int:
    from roleagent.viewer import view_run

    return view_run(
        Path(args.run), file=args.file, task=args.task, index=args.index, failed=args.failed, memory=args.memory
    )


def _envs(args: argparse.Namespace) -> int:
    from roleagent.envs import env_specs, missing_requirements

    for name, spec in sorted(env_specs().items()):
        missing = missing_requirements(name)  # a plug-in (entry point) requires its own module
        status = (
            "ready"
            if not missing
            else f"needs pip install 'roleagent[{spec.extra}]'"
            if spec.extra
            else f"cannot import {', '.join(missing)}"
        )
        print(f"{name:10s} {status:40s} {spec.description}")
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
    train.set_defaults(func=_train)

    ev = sub.add_parser("eval", help="evaluate a policy on a fixed panel")
    ev.add_argument("config", nargs="?", help="recipe (for a base-model evaluation)")
    ev.add_argument("--run", help="run directory: evaluate its latest checkpoint")
    ev.add_argument("--policy", choices=["model", "expert"], default="model")
    ev.add_argument("--env", help="environment name (overrides the recipe's)")
    ev.add_argument("--split", help="evaluation split / panel")
    ev.add_argument("--max-tasks", type=int, help="first k tasks of the panel")
    ev.add_argument("--workers", type=int, default=4, help="environment processes (expert policy)")
    ev.add_argument("--label", default="eval", help="row label of the table")
    ev.add_argument("--out", default="runs/eval", help="output folder for a base-model evaluation")
    ev.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ev.set_defaults(func=_eval)

    view = sub.add_parser("view", help="browse a run's trajectories and failure memory")
    view.add_argument("run", help="run directory")
    view.add_argument("--file", help="rollout file stem, e.g. iter_000002 or eval_after (default: list files)")
    view.add_argument("--task", help="only trajectories of this task id")
    view.add_argument("--index", type=int, help="show trajectory number k in full")
    view.add_argument("--failed", action="store_true", help="only failed trajectories")
    view.add_argument("--memory", action="store_true", help="show the Agent-In-World failure memory")
    view.set_defaults(func=_view)

    envs = sub.add_parser("envs", help="list environments and whether they can run here")
    envs.set_defaults(func=_envs)
    return parser


def _run_dir_errors() -> tuple[type[Exception], ...]:
    """A run directory that cannot be used as it is: damaged, busy or tampered with."""
    from roleagent.methods.role_agent.aiw.memory import MemoryDamaged
    from roleagent.trainer.checkpoint import CheckpointError, RunDirBusy

    return CheckpointError, RunDirBusy, MemoryDamaged


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as error:
        print(f"config error: {' '.join(str(error).split())}", file=sys.stderr)  # one line
        return 2
    except Exception as error:
        if not isinstance(error, _run_dir_errors()):
            raise
        print(f"run directory error: {' '.join(str(error).split())}", file=sys.stderr)  # one line
        return 3
    except KeyboardInterrupt:
        print("interrupted: rerun the same command to resume from the last checkpoint", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into e.g. `head`, which closed early
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
