"""A run folder that works from any directory: the paths it stores, and its config read back.

What a run records about paths, in ``config.yaml`` and in each checkpoint's ``init_from``:

- a path inside the run folder is stored relative to it (``sft/final``);
- any other path is stored absolute (resolved against the directory training ran in);
- ``config.yaml``'s ``run_dir`` is the run folder's absolute path when it was written: a
  record only. Whoever reads a run (``roleagent eval --run DIR``, ``roleagent export DIR``)
  takes the folder it was given as the run folder (:func:`load_run_config`).

Runs written before this rule stored paths relative to the directory training ran in
(``runs/x/sft/final``); :func:`resolve_recorded` still finds those inside the folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from roleagent.config import TrainConfig, apply_overrides, from_dict, read_recipe, to_dict, upgrade_legacy
from roleagent.fields import ConfigError

#: Config keys holding file or folder paths (``model.name`` too, when it is a local folder).
PATH_KEYS = ("model.init_from", "sft.data", "agent_r.general_data", "model.name")
_NOT_PATHS = {"", "tiny", "embedded"}


def portable(path: str | Path, run_dir: str | Path) -> str:
    """``path`` as a run stores it: ``''`` stays ``''``, a path inside ``run_dir`` becomes
    relative to it, any other path absolute.

    >>> portable("/runs/a/sft/final", "/runs/a"), portable("/models/m", "/runs/a")
    ('sft/final', '/models/m')
    """
    if str(path) == "":
        return ""
    full, root = Path(path).expanduser().resolve(), Path(run_dir).resolve()
    return full.relative_to(root).as_posix() if full.is_relative_to(root) else str(full)


def resolve_recorded(path: str, run_dir: str | Path) -> str:
    """A path a run stored, usable from the current directory: ``''`` and absolute paths as
    they are; a relative one against ``run_dir``. An older run's path, relative to where it
    was trained, is taken as it is if it exists from here, else as the path inside
    ``run_dir`` that ends like it (``runs/x/sft/final`` → ``DIR/sft/final``)."""
    if path == "" or Path(path).expanduser().is_absolute():
        return path
    run_dir = Path(run_dir)
    if (run_dir / path).exists():
        return str(run_dir / path)
    if Path(path).exists():
        return path
    parts = Path(path).parts
    for start in range(1, len(parts)):
        if (candidate := run_dir.joinpath(*parts[start:])).exists():
            return str(candidate)
    return str(run_dir / path)


def same_init(stored: str, current: str, run_dir: str | Path) -> bool:
    """Whether a checkpoint's stored ``init_from`` names the weights ``current`` names."""
    if stored == current:
        return True
    if not stored or not current:
        return False
    return (Path(run_dir) / stored).resolve() == Path(current).expanduser().resolve()


def recorded_config(cfg: TrainConfig) -> dict[str, Any]:
    """``cfg`` as ``config.yaml`` keeps it (module docstring)."""
    data = to_dict(cfg)
    data["run_dir"] = str(Path(cfg.run_dir).resolve())
    for key in PATH_KEYS:
        section, name = key.split(".")
        value = data[section][name]
        if value not in _NOT_PATHS and (key != "model.name" or Path(value).expanduser().exists()):
            data[section][name] = portable(value, cfg.run_dir)
    return data


def load_run_config(run_dir: str | Path, overrides: list[str] = (), *, check: bool = True) -> TrainConfig:
    """The config ``run_dir`` recorded, with ``run_dir`` as its run folder, its stored paths
    resolved (:func:`resolve_recorded`) and ``overrides`` applied; validated unless
    ``check`` is false (an export needs no environment)."""
    path = Path(run_dir) / "config.yaml"
    if Path(run_dir).exists() and not Path(run_dir).is_dir():
        raise ConfigError(f"{run_dir} is a file, not a run directory")
    if not path.is_file():
        raise ConfigError(f"{run_dir} has no config.yaml: is it a run directory?")
    data = read_recipe(path)
    data["run_dir"] = str(run_dir)
    for key in PATH_KEYS:
        section, name = key.split(".")
        value = data.get(section, {}).get(name) if isinstance(data.get(section), dict) else None
        if not isinstance(value, str) or value in _NOT_PATHS:
            continue
        if key != "model.name":
            data[section][name] = resolve_recorded(value, run_dir)
        elif not Path(value).is_absolute() and (Path(run_dir) / value).exists():  # else an HF id
            data[section][name] = str(Path(run_dir) / value)
    from roleagent.trainer.checks import prepare, resolve_methods

    cfg = from_dict(TrainConfig, upgrade_legacy(apply_overrides(data, list(overrides))))
    return prepare(cfg) if check else resolve_methods(cfg)
