"""Decoding speed of ``HFEngine.generate`` against a plain PyTorch loop and ``transformers``'
``generate``, over the same model, prompts and sampling, side by side in one process.

The three decoders get the same left-padded prompts (ALFWorld-style actor prompts built with
``roleagent.rollout.actor.actor_messages``; their mean length is printed), the same temperature (0.9, top-p 1)
and the same number of new tokens N per row: a hook on the LM head bans the end-of-turn
token in all three, so no row stops early and every decoder generates exactly B × N tokens
(asserted). The model is the embedded SmolLM2-135M-Instruct (``--weights random``: its
architecture with random weights, the same arithmetic without the conversion; ``--model FOLDER``:
another model's folder, or with ``--weights random`` just its config.json and tokenizer, e.g. to
time the embedded architecture on a machine without the GGUF).

- **plain loop**: one prefill forward with a ``DynamicCache`` (the LM head on the last
  position, gathered by index as the engine does), then one forward per token,
  sampling on the device (softmax, ``torch.multinomial``), the attention mask grown by one
  column; no per-row host work. The reference an engine should match.
- **HFEngine**: ``roleagent.engine.hf.HFEngine.generate`` (prefix reuse off), free decoding;
  and ``--constrained``: each row restricted to its prompt's admissible commands (the
  engine's token trie), reported as cost per token against free decoding.
- **transformers generate**: ``model.generate(do_sample=True, min_new_tokens=N)``.
- ``--llama-server [EXE]``: llama.cpp's ``llama-server`` (``scripts/setup.sh --all`` builds
  it) serving the embedded GGUF on 127.0.0.1, reached through roleagent's OpenAI engine in
  tokens mode with one request per row in flight (``server.concurrency`` = B, the server's
  ``--parallel`` the largest batch), ``-t`` the torch threads; the same token-id prompts,
  temperature and N, the end-of-turn token ignored (``ignore_eos``) and llama.cpp's other
  samplers off (``top_k`` 0, ``min_p`` 0), so it too makes B × N tokens. The GGUF is Q4_1:
  the server computes on 4-bit weights, the torch decoders on their fp32 dequantisation,
  so this column is what a user gets from each route, not the same arithmetic.
- ``--decode static compiled``: HFEngine again with each of these ``hf_engine.decode`` paths
  (:mod:`roleagent.engine.static_decode`; the eager one is the ``HFEngine`` column), each
  timed after a warm-up call, which is where ``compiled`` compiles for the batch's shapes.

Prints tok/s per decoder and batch, then one line per batch ``HFEngine / plain loop at
batch B = R`` (the issue's goal: ≥ 0.9 at every batch, on CPU and GPU; with ``--decode``, one such
line per path and ``HFEngine D / eager at batch B = R``; with ``--llama-server``, ``HFEngine /
llama-server at batch B = R``, speed against speed) and, with
``--constrained``, ``constrained / free decode cost per token at batch B = R`` (goal ≤ 1.2;
the time beyond a one-token call, which is the prefill, per token beyond each row's first)
and ``command / token greedy time per call at batch B = R`` (``SamplingParams.greedy``:
whole-command greedy, :mod:`roleagent.engine.command_greedy`, against token greedy).

    python benchmarks/bench_engine.py [--batches 1 16 64] [--new-tokens 32] [--device cpu|cuda]
        [--dtype float32|bfloat16] [--threads N] [--repeats 2] [--constrained] [--weights embedded|random]
        [--model embedded|FOLDER] [--decode static compiled] [--llama-server [EXE]]
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install

from roleagent.engine import create_engine
from roleagent.engine.base import SamplingParams
from roleagent.engine.static_decode import DECODES, HFEngineConfig
from roleagent.models.loading import Policy, embedded_model_dir, kept_positions, load_tokenizer
from roleagent.rollout.actor import actor_messages

TEMPERATURE = 0.9
ROOMS = ["cabinet", "countertop", "drawer", "fridge", "shelf", "sinkbasin", "stoveburner", "microwave"]
OBJECTS = ["apple", "mug", "knife", "egg", "plate", "bowl", "spatula", "lettuce"]


def alfworld_prompt(i: int) -> tuple[list[dict[str, str]], list[str]]:
    """Actor messages and admissible commands of a made-up ALFWorld state (varies with i)."""
    places = [f"{ROOMS[(i + k) % len(ROOMS)]} {1 + (i + k) % 4}" for k in range(10)]
    thing = OBJECTS[i % len(OBJECTS)]
    instruction = (
        "You are in the middle of a room. Looking quickly around you, you see "
        + ", ".join(f"a {p}" for p in places)
        + f".\n\nYour task is to: put a clean {thing} in {places[i % 10]}."
    )
    observation = f"You arrive at {places[(i + 3) % 10]}. On the {places[(i + 3) % 10]}, you see a {thing} 1."
    admissible = [f"go to {p}" for p in places] + [f"take {thing} 1 from {places[(i + 3) % 10]}", "inventory", "look"]
    history = [
        (f"go to {places[(i + k) % 10]}", f"You arrive at {places[(i + k) % 10]}. Nothing happens.") for k in (1, 2)
    ]
    messages = actor_messages(
        instruction=instruction,
        observation=observation,
        history=history,
        admissible=admissible,
        action_format="action",
        max_history=2,
    )
    return messages, admissible


def load_model(weights: str, device: str, dtype: torch.dtype, path: str = "embedded") -> torch.nn.Module:
    """The model at ``path`` (``embedded``: the embedded model's converted folder); ``weights
    random``: its architecture with seeded random weights (the folder needs only config.json)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    path = embedded_model_dir() if path == "embedded" else path
    if weights == "random":
        with torch.random.fork_rng():
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
    else:
        model = AutoModelForCausalLM.from_pretrained(path)
    return model.to(device=device, dtype=dtype).eval().requires_grad_(False)


def ban_token(model: torch.nn.Module, token: int):
    """A hook on the LM head that makes ``token`` impossible (so no row ends early)."""

    def hook(_module, _inputs, logits):
        logits[..., token] = float("-inf")
        return logits

    return model.get_output_embeddings().register_forward_hook(hook)


def left_pad(prompts: list[list[int]], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, width - len(p) :] = torch.tensor(p)
        mask[row, width - len(p) :] = 1
    return ids.to(device), mask.to(device)


@torch.no_grad()
def plain_loop(model, prompts, pad: int, new_tokens: int, generator) -> int:
    """Prefill, then one forward per token with sampling on the device; returns tokens made."""
    from transformers import DynamicCache

    ids, mask = left_pad(prompts, pad, model.device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    last = kept_positions(ids.shape[1] - 1, ids.shape[1], ids.device)  # by index, as HFEngine._forward
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, logits_to_keep=last)
    position = positions[:, -1:]
    made = []
    for step in range(new_tokens):
        probs = torch.softmax(out.logits[:, -1, :].float() / TEMPERATURE, dim=-1)
        token = torch.multinomial(probs, 1, generator=generator)  # (B, 1), on the device
        made.append(token)
        if step == new_tokens - 1:
            break  # the last token needs no forward
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
        position = position + 1
        out = model(
            input_ids=token, attention_mask=mask, position_ids=position, past_key_values=cache, logits_to_keep=1
        )
    return int(torch.cat(made, dim=1).numel())  # one host transfer, at the end


@torch.no_grad()
def hf_generate(model, prompts, pad: int, new_tokens: int) -> int:
    ids, mask = left_pad(prompts, pad, model.device)
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=True,
        temperature=TEMPERATURE,
        top_p=1.0,
        top_k=0,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        pad_token_id=pad,
    )
    return int((out.shape[1] - ids.shape[1]) * ids.shape[0])


@contextlib.contextmanager
def llama_server(exe: str, policy: Policy, *, threads: int, slots: int, context_per_slot: int = 512):
    """llama-server on 127.0.0.1 serving the embedded GGUF, and an OpenAI engine (tokens
    mode) that sends each row as its own request, all rows at once; stopped on exit."""
    from roleagent.engine.openai import ServerConfig
    from roleagent.models.loading import embedded_gguf_path

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    threads = threads or torch.get_num_threads()
    command = [exe, "-m", str(embedded_gguf_path()), "--host", "127.0.0.1", "--port", str(port)]
    command += ["-t", str(threads), "-tb", str(threads), "--parallel", str(slots), "-c", str(slots * context_per_slot)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while True:
            if proc.poll() is not None or time.time() > deadline:
                raise SystemExit(f"llama-server did not start ({' '.join(command)})")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
                break
            except OSError:
                time.sleep(0.5)
        server = ServerConfig(
            base_url=f"http://127.0.0.1:{port}/v1",
            mode="tokens",
            concurrency=slots,
            timeout_s=1800.0,
            extra_body={"ignore_eos": True, "top_k": 0, "min_p": 0.0},
        )
        yield create_engine("openai", policy, settings=server, max_batch=slots, max_prompt_tokens=4096)
    finally:
        proc.kill()
        proc.wait()


def timed(fn, repeats: int) -> tuple[float, int]:
    """Best wall time of ``repeats`` calls (after one warm-up call) and what the last returned."""
    made = fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        made = fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best, made


def measure_batch(
    engine, model, states, n: int, generator, args, paths=None, server=None
) -> dict[str, tuple[float, int]]:
    """``{decoder: (best seconds, tokens made)}`` for one batch of ``states``; ``paths``:
    ``{decode: engine}``, more HFEngine decode paths (``HFEngine <decode>``); ``server``: the
    llama-server engine (``llama_server``)."""
    tokenizer = engine.tokenizer
    pad, batch = tokenizer.pad_token_id, len(states)
    prompts = [engine.encode_chat(messages) for messages, _ in states]
    params = SamplingParams(max_new_tokens=n, temperature=TEMPERATURE)
    result = {
        "plain loop": timed(lambda: plain_loop(model, prompts, pad, n, generator), args.repeats),
        "HFEngine": timed(lambda: sum(len(g.ids) for g in engine.generate(prompts, params)), args.repeats),
        "transformers generate": timed(lambda: hf_generate(model, prompts, pad, n), args.repeats),
    }
    for decode, other in (paths or {}).items():
        result[f"HFEngine {decode}"] = timed(
            lambda e=other: sum(len(g.ids) for g in e.generate(prompts, params)), args.repeats
        )
    if server is not None:
        result["llama-server"] = timed(lambda: sum(len(g.ids) for g in server.generate(prompts, params)), args.repeats)
    for name, (_, made) in result.items():
        assert made == batch * n, f"{name} made {made} tokens, expected {batch} x {n}"
    if args.constrained:  # decode cost: time beyond a one-token call (the prefill), per token beyond the first
        allowed = [[tokenizer.encode(a + "</action>", add_special_tokens=False) for a in adm] for _, adm in states]
        free = SamplingParams(max_new_tokens=max(len(seq) for row in allowed for seq in row), temperature=TEMPERATURE)
        one = SamplingParams(max_new_tokens=1, temperature=TEMPERATURE)
        result["HFEngine prefill (1 token)"] = timed(lambda: len(engine.generate(prompts, one)), args.repeats)
        result["HFEngine free, command length"] = timed(
            lambda: sum(len(g.ids) for g in engine.generate(prompts, free)), args.repeats
        )
        result["HFEngine constrained"] = timed(
            lambda: sum(len(g.ids) for g in engine.generate(prompts, free, allowed)), args.repeats
        )
        for greedy in ("token", "command"):  # whole-command greedy against token greedy, per call
            params = SamplingParams(max_new_tokens=free.max_new_tokens, temperature=0.0, greedy=greedy)
            result[f"HFEngine greedy ({greedy})"] = timed(
                lambda p=params: sum(len(g.ids) for g in engine.generate(prompts, p, allowed)), args.repeats
            )
    return result


def decode_cost(result: dict, name: str, rows: int) -> float:
    """Seconds per generated token beyond each row's first, after the one-token call's time."""
    seconds, made = result[name]
    return (seconds - result["HFEngine prefill (1 token)"][0]) / max(made - rows, 1)


def run(args) -> None:
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    tokenizer = load_tokenizer(args.model)
    model = load_model(args.weights, args.device, dtype, args.model)
    ban_token(model, tokenizer.eos_token_id)
    name = "smollm2-135m" if args.model == "embedded" else Path(args.model).name
    policy = Policy(model=model, tokenizer=tokenizer, name=f"{name} ({args.weights})")
    limits = {"max_batch": max(args.batches), "max_prompt_tokens": 4096}
    engine = create_engine("hf", policy, **limits)
    paths = {d: create_engine("hf", policy, settings=HFEngineConfig(decode=d), **limits) for d in args.decode}
    generator = torch.Generator(device=args.device).manual_seed(0)
    n = args.new_tokens
    states = [alfworld_prompt(i) for i in range(max(args.batches))]
    print(
        f"{policy.name} on {args.device} ({args.dtype}, {torch.get_num_threads()} threads), "
        f"{n} new tokens per row at T = {TEMPERATURE}, best of {args.repeats}"
    )
    rows = []
    with contextlib.ExitStack() as stack:
        server = None
        if args.llama_server:
            if args.weights != "embedded" or args.model != "embedded":
                raise SystemExit("--llama-server serves the embedded GGUF: use --weights embedded --model embedded")
            exe = shutil.which(args.llama_server) or shutil.which("llama-server", path=str(Path.home() / ".local/bin"))
            if exe is None:
                raise SystemExit(f"no {args.llama_server} on PATH (scripts/setup.sh --all builds llama-server)")
            server = stack.enter_context(llama_server(exe, policy, threads=args.threads, slots=max(args.batches)))
        for batch in args.batches:
            result = measure_batch(engine, model, states[:batch], n, generator, args, paths, server)
            mean_prompt = sum(len(engine.encode_chat(messages)) for messages, _ in states[:batch]) / batch
            line = ", ".join(f"{name} {made / seconds:,.0f} tok/s" for name, (seconds, made) in result.items())
            print(f"batch {batch:4d} (prompts {mean_prompt:.0f} tokens): {line}", flush=True)
            rows.append((batch, result))
    for batch, result in rows:
        ratio = result["plain loop"][0] / result["HFEngine"][0]
        print(f"HFEngine / plain loop at batch {batch} = {ratio:.2f}")
        if "llama-server" in result:
            print(f"HFEngine / llama-server at batch {batch} = {result['llama-server'][0] / result['HFEngine'][0]:.2f}")
        for decode in paths:
            seconds = result[f"HFEngine {decode}"][0]
            print(f"HFEngine {decode} / plain loop at batch {batch} = {result['plain loop'][0] / seconds:.2f}")
            print(f"HFEngine {decode} / eager at batch {batch} = {result['HFEngine'][0] / seconds:.2f}")
    for batch, result in rows:
        if args.constrained:
            ratio = decode_cost(result, "HFEngine constrained", batch) / decode_cost(
                result, "HFEngine free, command length", batch
            )
            print(f"constrained / free decode cost per token at batch {batch} = {ratio:.2f}")
            ratio = result["HFEngine greedy (command)"][0] / result["HFEngine greedy (token)"][0]
            print(f"command / token greedy time per call at batch {batch} = {ratio:.2f}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--constrained", action="store_true", help="also constrained vs free HFEngine decoding")
    parser.add_argument("--weights", default="embedded", choices=["embedded", "random"])
    parser.add_argument(
        "--decode", nargs="*", default=[], choices=[d for d in DECODES if d != "eager"], help="more HFEngine paths"
    )
    parser.add_argument(
        "--llama-server",
        nargs="?",
        const="llama-server",
        default="",
        help="also time llama-server (this executable) through the OpenAI engine",
    )
    parser.add_argument(
        "--model",
        default="embedded",
        help="embedded, or a local folder with config.json and the tokenizer (and the weights unless --weights random)",
    )
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
