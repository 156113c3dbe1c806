"""The checks a run's components must pass before it starts, and the settings they imply.

A config is checked in two steps, so that :mod:`roleagent.config` stays a leaf that
imports no component:

1. :func:`roleagent.config.load_config` reads a recipe and checks its **fields**: every
   key's type, range and choices, and the cross-field rules that read the config alone
   (``roleagent.config.validate``). It needs nothing above the config.
2. :func:`prepare` checks the **components** the fields name and fills in what they
   imply. It runs when a run starts, before any model loads or run folder is made:
   :class:`~roleagent.trainer.Trainer` calls it first thing, and so do ``roleagent eval``,
   ``roleagent sft`` and the role warm starts. It is idempotent.

What :func:`prepare` checks, in order:

- the fields again (a config built or edited in code passes through the same rules);
- the metric sinks (``report_to``), the device, the engine and its settings (the
  ``server`` section, or ``engine_settings`` against a plug-in engine's ``config_class``),
  the advantage estimator (``algo_settings`` against a plug-in estimator's
  ``config_class``) and the critic it may need, FSDP;
- the enabled methods: names resolve and are unique, plug-in settings match their
  ``config_class``, each method's ``Method.check_config``;
- a group size of at least 2 when every method trains on advantages;

and then each enabled method's ``Method.resolve_config`` (e.g. SEAL's
``env.kwargs.interface`` follows ``seal.interface_evolution`` unless given).

>>> from roleagent.config import load_config
>>> cfg = prepare(load_config(None, ["env.name=scripted", "algo.name=gigpo"]))
>>> cfg.algo.name
'gigpo'
"""

from __future__ import annotations

from roleagent.config import TrainConfig, validate
from roleagent.config_rules import check_fsdp
from roleagent.critic_config import check_critic
from roleagent.engine import ENGINES, engine_settings
from roleagent.engine.openai import check_server_config
from roleagent.fields import ConfigError
from roleagent.models.hub import check_device
from roleagent.plugins import PluginError, resolve
from roleagent.trainer.advantages import check_estimator, estimator_settings
from roleagent.trainer.methods import check_methods, method_classes
from roleagent.trainer.metrics import check_report_to


def prepare(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` checked whole (fields, components, methods) and its implied settings filled in."""
    validate(cfg)
    check_components(cfg)
    check_methods(cfg)  # each enabled method's own cross-field checks (Method.check_config)
    r = cfg.rollout
    if r.group_size < 2 and all(cls.uses_advantages for cls in method_classes(cfg)):
        raise ConfigError(f"{cfg.algo.name} compares rollouts within a group: rollout.group_size must be >= 2")
    return resolve_methods(cfg)


def resolve_methods(cfg: TrainConfig) -> TrainConfig:
    """Each enabled method's ``Method.resolve_config``: what its settings imply elsewhere."""
    for cls in method_classes(cfg):
        cls.resolve_config(cfg)
    return cfg


def check_components(cfg: TrainConfig) -> None:
    """The named parts a run is built from resolve and fit together: the metric sinks
    (``report_to``), the engine (and an OpenAI-compatible engine's server settings), the
    advantage estimator and the critic it may need."""
    check_report_to(cfg.report_to)
    if cfg.model.engine != "openai":  # (which loads no weights here)
        check_device(cfg.model.device)  # before a model is loaded or a run folder made
    try:
        resolve("engines", cfg.model.engine, ENGINES)
    except PluginError as error:
        raise ConfigError(f"model.engine: {error}") from None
    engine_settings(cfg)  # a plug-in engine's settings against its config_class
    check_server_config(cfg)
    check_critic(cfg, estimator_uses_critic=check_estimator(cfg.algo.name))
    estimator_settings(cfg)  # a plug-in estimator's settings against its config_class
    check_fsdp(cfg)
