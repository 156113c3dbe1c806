"""Config section ``seal`` of SEAL (Hu et al., 2026). Ranges: ``roleagent.config_rules``;
cross-field checks: :func:`validate_seal`."""

from __future__ import annotations

from dataclasses import dataclass

from roleagent.fields import ConfigError, setting


@dataclass
class SEALConfig:
    enabled: bool = setting(
        False, "SEAL: diagnose every training rollout (env.diagnose turn labels) and use the diagnoses below"
    )
    reweight: bool = setting(
        True, "multiply each trajectory's group-normalised advantage by w = clip(mean rho(turn labels), w_min, w_max)"
    )
    utility_ema: bool = setting(
        True,
        "the authors' code's closed loop (apatch.dynamic): move the utilities rho toward the failure profile after each iteration (EMA; pass stays fixed; needs reweight). The paper's text keeps rho fixed",
    )
    interface_evolution: bool = setting(
        True,
        "train on the evolved interface (env.kwargs.interface=evolved, train split only: schema cues, affordance cues, recovery hints, profile guidelines, activated by the failure profile unless env.kwargs.activation=static); evaluation stays plain",
    )
    interface_updates: bool = setting(
        True,
        "the paper's closed loop: after each iteration update the failure profile from the diagnoses and push it to the env workers, so the interface's cues and guidelines follow the policy's failures; false freezes the profile empty (no guidelines; needs env.kwargs.activation=static). Needs interface_evolution",
    )
    utilities: dict = setting(
        {}, "overrides of the static utilities rho per turn label (roleagent.algos.seal.STATIC_UTILITIES)"
    )
    w_min: float = setting(0.5, "lower clip of the trajectory weight")
    w_max: float = setting(2.0, "upper clip of the trajectory weight")
    beta: float = setting(0.25, "utility EMA: EMA step toward the target utility")
    alpha: float = setting(1.0, "utility EMA: prevalence coefficient of the target")
    confidence_samples: int = setting(32, "utility EMA: trajectories carrying a tag before its target moves fully")
    window: int = setting(512, "utility EMA: trajectories in the sliding statistics window")
    profile_window: int = setting(512, "interface evolution: trajectories in the failure profile's window")
    diagnose_unfinished: bool = setting(
        True,
        "replay trajectories cut before the env finished them (rollout.max_steps) to diagnose them, on the env workers under env.timeout; false, or a replay that fails, gives them weight 1",
    )


def validate_seal(cfg) -> None:
    """SEAL needs turn-level diagnosis labels; interface evolution is train-only.

    With ``seal.interface_evolution`` the environment is built with
    ``interface=evolved``, otherwise ``plain`` (filled in by :func:`resolve` when the
    recipe leaves it out); the env applies it to ``train``-split tasks only, so evaluation on
    ``env.eval_split`` sees the plain benchmark interface. ``env.kwargs.activation``
    (``profile``, the env's default, or ``static``) says whether the failure profile
    activates the interface's components (Hu et al., 2026, §3.3); with ``profile`` the
    profile must be updated (``seal.interface_updates``), or no cue would ever show.
    """
    s, kwargs = cfg.seal, cfg.env.kwargs
    from roleagent.envs.base import env_class, factory_of

    try:
        labelled = bool(getattr(env_class(factory_of(cfg.env.name)), "diagnosis_turn_labels", False))
    except LookupError as error:  # plugins.PluginError: no such environment, or not importable
        raise ConfigError(f"env.name: {error}") from error
    if not labelled:
        raise ConfigError(
            f"seal.enabled needs an environment whose diagnose() returns turn labels "
            f"(env.name=bfcl), got env.name={cfg.env.name!r}"
        )
    if s.utility_ema and not s.reweight:
        raise ConfigError(
            "seal.utility_ema adapts the reweighting utilities: it needs seal.reweight=true "
            "(set seal.utility_ema=false for the w/o-reweighting ablation)"
        )
    if s.interface_updates and not s.interface_evolution:
        raise ConfigError(
            "seal.interface_updates updates the evolved interface: it needs "
            "seal.interface_evolution=true (set seal.interface_updates=false for the plain interface)"
        )
    if any(not isinstance(v, (int, float)) or v <= 0 for v in s.utilities.values()):
        raise ConfigError("seal.utilities values must be positive numbers")
    interface = kwargs.get("interface")
    if s.interface_evolution:
        if interface not in (None, "evolved"):
            raise ConfigError(
                f"seal.interface_evolution=true trains on env.kwargs.interface=evolved, got "
                f"{interface!r} (drop it, or set seal.interface_evolution=false)"
            )
        activation = kwargs.get("activation", "profile")
        if activation not in ("profile", "static"):
            raise ConfigError(f"env.kwargs.activation={activation!r}: expected profile or static")
        if activation == "profile" and not s.interface_updates:
            raise ConfigError(
                "seal.interface_updates=false never fills the failure profile, so "
                "env.kwargs.activation=profile would never activate a cue (training would be "
                "plain): set env.kwargs.activation=static for a frozen interface, or "
                "seal.interface_evolution=false"
            )
        if cfg.env.eval_split == cfg.env.train_split:
            raise ConfigError(
                "seal.interface_evolution changes train-split prompts: env.eval_split must differ "
                "from env.train_split so evaluation sees the plain interface"
            )
    elif interface == "evolved":
        raise ConfigError(
            "env.kwargs.interface=evolved without seal.interface_evolution would freeze the "
            "failure profile (no guidelines ever): set seal.interface_evolution=true or interface=plain"
        )
    elif interface not in (None, "plain"):
        raise ConfigError(f"env.kwargs.interface={interface!r}: expected plain or evolved")
