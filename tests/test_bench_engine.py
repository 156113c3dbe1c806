"""The engine benchmark's decoders (benchmarks/bench_engine.py) on the tiny model: each makes
exactly B × N tokens with the end-of-turn token banned, and the constrained call stays
within each row's admissible commands."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_engine  # noqa: E402

from roleagent.engine import create_engine  # noqa: E402
from roleagent.engine.openai import ServerConfig  # noqa: E402
from roleagent.engine.static_decode import HFEngineConfig  # noqa: E402
from roleagent.models.loading import Policy, load_tokenizer, tiny_model  # noqa: E402


def test_every_decoder_makes_b_times_n_tokens_and_constrained_rows_take_commands():
    tokenizer = load_tokenizer("tiny")
    model = tiny_model(tokenizer).eval().requires_grad_(False)
    hook = bench_engine.ban_token(model, tokenizer.eos_token_id)
    engine = create_engine("hf", Policy(model=model, tokenizer=tokenizer, name="tiny"), max_batch=3)
    states = [bench_engine.alfworld_prompt(i) for i in range(3)]
    args = SimpleNamespace(repeats=1, constrained=True)
    policy = Policy(model=model, tokenizer=tokenizer, name="tiny")
    static = {"static": create_engine("hf", policy, settings=HFEngineConfig(decode="static"), max_batch=3)}
    result = bench_engine.measure_batch(engine, model, states, 5, torch.Generator().manual_seed(0), args, static)
    assert {name: made for name, (_, made) in result.items() if "HFEngine " not in name} == {
        "plain loop": 15,
        "HFEngine": 15,
        "transformers generate": 15,
    }  # measure_batch also asserts it
    assert result["HFEngine static"][1] == 15
    assert result["HFEngine prefill (1 token)"][1] == 3
    allowed = [[tokenizer.encode(a + "</action>", add_special_tokens=False) for a in adm] for _, adm in states]
    free = bench_engine.SamplingParams(max_new_tokens=20, temperature=bench_engine.TEMPERATURE)
    prompts = [engine.encode_chat(m) for m, _ in states]
    for generation, commands in zip(engine.generate(prompts, free, allowed), allowed):
        assert generation.ids in commands  # a whole admissible command, nothing else
    hook.remove()
    assert model.get_output_embeddings()._forward_hooks == {}


@pytest.mark.slow
def test_llama_server_column_makes_b_times_n_tokens():
    """The llama-server decoder (the embedded GGUF through the OpenAI engine) ignores the
    end-of-turn token too: a greeting the model answers in 10 tokens still gets N per row."""
    exe = shutil.which("llama-server") or shutil.which("llama-server", path=str(Path.home() / ".local/bin"))
    if exe is None:
        pytest.skip("no llama-server on PATH (scripts/setup.sh --all builds it)")
    tokenizer = load_tokenizer("embedded")
    policy = Policy(model=None, tokenizer=tokenizer, name="embedded")
    with bench_engine.llama_server(exe, policy, threads=1, slots=2) as server:
        prompt = server.encode_chat([{"role": "user", "content": "Hi!"}])
        greedy = bench_engine.SamplingParams(max_new_tokens=24, temperature=0.0)
        plain = create_engine("openai", policy, settings=ServerConfig(base_url=server.server.base_url, mode="tokens"))
        [short] = plain.generate([prompt], greedy)
        assert len(short.ids) < 24  # without ignore_eos the model ends its turn
        assert [len(g.ids) for g in server.generate([prompt, prompt], greedy)] == [24, 24]
