"""Before a model is loaded: is the device there, and can an HF id be had without a wait?

- :func:`check_device`: ``model.device=cuda`` (or ``cuda:N``, ``mps``) on a machine or a
  torch build without it is a config error, raised by ``roleagent.config.validate``
  before any model is loaded or run folder made.
- :func:`check_hub_model`: an HF id (``org/name``) that is not in the local Hugging Face
  cache while the Hub cannot be reached is a config error at once, naming the cache and
  ``HF_HUB_OFFLINE=1``, instead of transformers' minute of retries and an ``OSError``.
  Whether the Hub can be reached is one TCP connection to ``HF_ENDPOINT``'s host
  (:data:`PROBE_TIMEOUT_S`), tried once per process and only for an uncached id or when
  the cache would otherwise be refreshed; when the Hub is out of reach,
  :func:`cache_alone_when_offline` puts huggingface_hub in offline mode, so a cached id
  loads at once.
"""

from __future__ import annotations

import functools
import os
import socket
from urllib.parse import urlsplit

from roleagent.fields import ConfigError

#: seconds the reachability probe waits for a TCP connection to the Hub
PROBE_TIMEOUT_S = 3.0
#: model specs that are not HF ids
LOCAL_SPECS = ("embedded", "tiny")


def check_device(device: str) -> None:
    """``device`` (``model.device``) exists here; ``auto`` and ``cpu`` always do."""
    if device in ("auto", "cpu"):
        return
    import torch

    if device == "mps":
        if not torch.backends.mps.is_available():
            raise ConfigError("model.device=mps: this machine or torch build has no MPS; use model.device=auto or cpu")
        return
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            build = f"torch {torch.__version__}" + ("" if torch.version.cuda else ", a build without CUDA")
            raise ConfigError(
                f"model.device={device}: CUDA is not available here ({build}); use model.device=auto or cpu, "
                "or install a CUDA build of torch first (README)"
            )
        index = int(device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise ConfigError(f"model.device={device}: only {torch.cuda.device_count()} CUDA device(s) visible")


def offline_flag() -> bool:
    """``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` is set to a true value."""
    return any(
        os.environ.get(k, "").lower() in ("1", "true", "yes", "on") for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


@functools.lru_cache(maxsize=1)
def hub_reachable() -> bool:
    """Whether a TCP connection to the Hub's host opens within :data:`PROBE_TIMEOUT_S`
    (assumed where a proxy is configured)."""
    from huggingface_hub import constants

    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True  # the Hub is reached through a proxy: a direct connection says nothing
    url = urlsplit(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=PROBE_TIMEOUT_S).close()
    except OSError:
        return False
    return True


def is_hub_id(spec: str) -> bool:
    """``spec`` names a model on the Hub (not ``embedded``/``tiny`` nor an existing folder)."""
    from pathlib import Path

    return spec not in LOCAL_SPECS and not Path(spec).expanduser().exists()


def cached(spec: str) -> bool:
    """The HF id ``spec`` has a ``config.json`` in the local Hugging Face cache."""
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(spec, "config.json"), str)


def check_hub_model(spec: str) -> None:
    """An HF id that is neither cached nor reachable is a one-line config error (module docstring)."""
    if not is_hub_id(spec) or cached(spec):
        return
    from huggingface_hub import constants

    where = f"the Hugging Face cache ({constants.HF_HUB_CACHE})"
    if offline_flag():
        raise ConfigError(f"model.name={spec!r} is not in {where} and HF_HUB_OFFLINE is set")
    if not hub_reachable():
        raise ConfigError(
            f"model.name={spec!r} is not in {where} and {constants.ENDPOINT} cannot be reached (offline?): "
            "download it where there is a network into that cache (or set HF_HOME / HF_HUB_CACHE to one), "
            "or give a local model folder; HF_HUB_OFFLINE=1 makes transformers use the cache alone"
        )


def cache_alone_when_offline(spec: str) -> None:
    """For an HF id while the Hub cannot be reached (and ``HF_HUB_OFFLINE`` is not set):
    switch huggingface_hub to offline mode for this process (and its children), so the
    cached files are read without a minute of retries on each (module docstring)."""
    if not is_hub_id(spec) or offline_flag() or hub_reachable():
        return
    import sys

    from huggingface_hub import constants

    print(f"the Hub cannot be reached: model.name={spec!r} is read from the cache (HF_HUB_OFFLINE=1)", file=sys.stderr)
    os.environ["HF_HUB_OFFLINE"] = "1"
    constants.HF_HUB_OFFLINE = True  # read on each request (huggingface_hub.constants.is_offline_mode)
