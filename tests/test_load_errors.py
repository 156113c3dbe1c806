"""Before a model loads (issue 27, items 5 and 27): ``model.device=cuda`` without CUDA, an HF
id while the Hub cannot be reached, and an OpenAI-compatible server that cannot be used are
one line from the CLI (no traceback, no run folder made, no minute of retries); the
OpenAI-compatible engine loads the tokenizer alone, never the model's weights."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from roleagent import cli
from roleagent.config import load_config
from tests.run_helpers import TINY
from tests.test_openai_engine import scripted  # noqa: F401 - the scripted server fixture

ROOT = Path(__file__).resolve().parents[1]
SCRIPTED = ["model.name=tiny", "model.device=cpu", "env.name=scripted", "env.processes=false", "threads=1"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_line(err: str, prefix: str) -> None:
    assert err.startswith(prefix) and err.count("\n") == 1 and "Traceback" not in err, err


def _sets(items: list[str]) -> list[str]:
    return [a for item in items for a in ("--set", item)]


def test_cuda_without_cuda_is_one_line_before_anything_loads(tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    run_dir = tmp_path / "run"
    code = cli.main(["train", *_sets([*TINY, "model.device=cuda", f"run_dir={run_dir}", "iterations=1"])])
    assert code == 2
    err = capsys.readouterr().err
    _one_line(err, "config error: model.device=cuda: CUDA is not available here")
    assert "model.device=auto or cpu" in err
    assert not run_dir.exists()  # refused before the run folder was made


def _cli(args: list[str], tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    """``roleagent ARGS`` in a child (huggingface_hub reads its endpoint and cache at import)
    whose Hub endpoint refuses connections at once, with an empty Hugging Face cache."""
    full = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    full.update(
        PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path]),
        HF_ENDPOINT=f"http://127.0.0.1:{_free_port()}",
        HF_HUB_CACHE=str(tmp_path / "hub"),
        **env,
    )
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "roleagent.cli", *args], env=full, capture_output=True, text=True, timeout=600
    )
    return result, time.perf_counter() - started


def test_uncached_hub_id_while_offline_is_one_line_at_once(tmp_path):
    run_dir = tmp_path / "run"
    args = ["train", *_sets([*SCRIPTED, "model.name=nobody/no-such-model", f"run_dir={run_dir}", "iterations=0"])]
    result, seconds = _cli(args, tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    _one_line(result.stderr, "config error: model.name='nobody/no-such-model' is not in the Hugging Face cache")
    assert "cannot be reached" in result.stderr and "HF_HUB_OFFLINE=1" in result.stderr
    assert str(tmp_path / "hub") in result.stderr  # the cache it looked in
    assert seconds < 30  # transformers alone retries for about a minute
    assert not run_dir.exists()


def test_cached_hub_id_loads_from_the_cache_while_offline(tmp_path):
    """An HF id in the cache is read from it without asking the unreachable Hub."""
    from roleagent.models.loading import load_tokenizer, tiny_model

    snapshot = tmp_path / "hub" / "models--someone--tiny-model" / "snapshots" / ("0" * 40)
    tokenizer = load_tokenizer("tiny")
    tiny_model(tokenizer).save_pretrained(snapshot)
    tokenizer.save_pretrained(snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    out = tmp_path / "eval"
    sets = [*SCRIPTED, "model.name=someone/tiny-model", "eval.max_tasks=1", "rollout.max_new_tokens=4"]
    result, seconds = _cli(["eval", "--out", str(out), *_sets(sets)], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "scripted success (%)" in result.stdout
    assert seconds < 45, seconds


def test_unusable_server_is_one_line(tmp_path, capsys):
    server = [
        "model.engine=openai",
        f"server.base_url=http://127.0.0.1:{_free_port()}/v1",
        "server.retries=0",
    ]
    code = cli.main(["eval", "--out", str(tmp_path / "eval"), *_sets([*SCRIPTED, *server])])
    assert code == 4
    _one_line(capsys.readouterr().err, "engine error: cannot use the OpenAI-compatible server at http://127.0.0.1:")


def test_openai_engine_loads_the_tokenizer_alone(tmp_path, monkeypatch, scripted):  # noqa: F811
    import transformers

    import roleagent.models.loading
    from roleagent.trainer import Trainer

    def no_weights(*args, **kwargs):
        raise AssertionError("model weights were loaded for an OpenAI-compatible engine")

    monkeypatch.setattr(roleagent.models.loading, "load_policy", no_weights)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_weights)
    handler, url = scripted
    handler.replies["/v1/chat/completions"] = (200, {"choices": [{"message": {"content": "look"}}]})
    sets = ["model.engine=openai", f"server.base_url={url}", "server.mode=text", "iterations=0"]
    cfg = load_config(None, [*SCRIPTED, *sets, "eval.max_tasks=2", f"run_dir={tmp_path / 'run'}"])
    trainer = Trainer(cfg, resume=True, quiet=True)
    try:
        assert trainer.policy.model is None and trainer.objective is None
        trainer.evaluate("served")
    finally:
        trainer.close()
    assert [e.label for e in trainer.evals] == ["served"] and len(trainer.evals[0].trajectories) == 2
    assert handler.seen and all(path == "/v1/chat/completions" for path, _ in handler.seen)


def test_eval_of_a_run_with_a_served_model_is_refused(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    cfg = load_config(None, [*SCRIPTED, f"run_dir={tmp_path / 'run'}"])
    import yaml

    from roleagent.run_config import recorded_config

    (tmp_path / "run" / "config.yaml").write_text(yaml.safe_dump(recorded_config(cfg)))
    server = ["model.engine=openai", "server.base_url=http://127.0.0.1:9/v1"]
    assert cli.main(["eval", "--run", str(tmp_path / "run"), *_sets(server)]) == 2
    _one_line(capsys.readouterr().err, "config error: model.engine=openai evaluates the server's own weights")


def test_recipe_name_typo_gets_did_you_mean(capsys):
    assert cli.main(["train", "role_agnt_alfworld"]) == 2
    _one_line(capsys.readouterr().err, "config error: no recipe 'role_agnt_alfworld'; did you mean role_agent_alfworld")
