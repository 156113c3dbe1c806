"""The OpenAI-compatible engine: reply parsing, a server that is down or slow, a scripted
server's ids and log-probs, config refusals, and (slow) real servers serving the
embedded model: `transformers serve` (text only) and llama.cpp's llama-server."""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from run_helpers import checked_config

from roleagent.config import ConfigError, load_config, validate
from roleagent.engine import SamplingParams, create_engine
from roleagent.engine.openai import EngineError, OpenAIEngine, ServerConfig, reply_tokens, stop_text


class _Tok:
    """A character tokenizer: id = ord(c) (enough for decoding and stop strings)."""

    eos_token_id = 0

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids if i)

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Scripted(BaseHTTPRequestHandler):
    replies: dict = {}
    delay = 0.0
    seen: list = []

    def do_GET(self):
        self._send(200, {"data": [{"id": "scripted"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append((self.path, body))
        time.sleep(self.delay)
        code, reply = self.replies[self.path]
        self._send(code, reply)

    def _send(self, code, reply):
        data = json.dumps(reply).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def scripted():
    handler = type("H", (_Scripted,), {"replies": {}, "delay": 0.0, "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield handler, f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def _engine(url, tokenizer=None, **server):
    cfg = ServerConfig(base_url=url, **{"retries": 0, "timeout_s": 5.0, **server})
    return OpenAIEngine(SimpleNamespace(tokenizer=tokenizer or _Tok()), settings=cfg, max_prompt_tokens=512)


def test_reply_formats():
    llama = {"logprobs": {"content": [{"id": 104, "logprob": -0.25}, {"id": 105, "logprob": -2.0}]}, "text": "hi"}
    vllm = {"token_ids": [104, 105], "text": "hi", "logprobs": {"tokens": ["h", "i"], "token_logprobs": [-0.25, -2.0]}}
    assert reply_tokens(llama) == reply_tokens(vllm) == ([104, 105], [-0.25, -2.0])
    with pytest.raises(EngineError, match="no token ids"):
        reply_tokens({"text": "hi", "logprobs": None})
    assert stop_text("go</action> more", ("</action>", "\n")) == 11
    assert stop_text("no stop here", ("\n",)) is None


def test_server_down_is_a_clear_error_fast():
    started = time.perf_counter()
    with pytest.raises(
        EngineError, match=r"cannot use the OpenAI-compatible server at http://127\.0\.0\.1:\d+/v1 \(2 tries\)"
    ):
        _engine(f"http://127.0.0.1:{_free_port()}/v1", retries=1)
    assert time.perf_counter() - started < 5


def test_slow_server_times_out(scripted):
    handler, url = scripted
    handler.replies["/v1/completions"] = (200, {"choices": [{"text": "x"}]})
    engine = _engine(url, mode="tokens", timeout_s=0.3, retries=1)
    handler.delay = 2.0
    with pytest.raises(EngineError, match=r"no reply within 0\.3 s"):
        engine.generate([[1, 2]], SamplingParams(max_new_tokens=4))
    assert len(handler.seen) == 2  # the first try and one retry


def test_tokens_are_what_the_server_returned(scripted):
    handler, url = scripted
    content = [{"id": ord(c), "logprob": -0.1 * (k + 1)} for k, c in enumerate("go\nlook")]
    handler.replies["/v1/completions"] = (
        200,
        {"choices": [{"text": "go\nlook", "finish_reason": "length", "logprobs": {"content": content}}]},
    )
    engine = _engine(url, mode="tokens")
    [g] = engine.generate([[7, 8, 9]], SamplingParams(max_new_tokens=7, temperature=0.0, stop=("\n",)))
    assert handler.seen[0][1]["prompt"] == [7, 8, 9] and handler.seen[0][1]["model"] == "scripted"
    assert "stop" not in handler.seen[0][1]  # stop strings are applied here
    assert g.ids == [ord("g"), ord("o"), ord("\n")] and g.text == "go\n" and not g.truncated
    assert g.logprobs == pytest.approx([-0.1, -0.2, -0.3])
    assert engine.generated_tokens == 3 and engine.prompt_tokens == 3


def test_extra_body_fields_travel_with_every_generation_request(scripted):
    handler, url = scripted
    handler.replies["/v1/completions"] = (
        200,
        {"choices": [{"text": "a", "logprobs": {"content": [{"id": 97, "logprob": -1.5}]}}]},
    )
    engine = _engine(url, mode="tokens", extra_body={"ignore_eos": True, "top_k": 5})
    engine.generate([[1], [2]], SamplingParams(max_new_tokens=3, temperature=0.5))
    assert [(body["ignore_eos"], body["top_k"], body["max_tokens"]) for _, body in handler.seen] == [(True, 5, 3)] * 2
    with pytest.raises(EngineError, match="may not set prompt, seed"):
        _engine(url, extra_body={"seed": 1, "prompt": [3]})


def test_a_strict_server_is_asked_without_vllm_fields(scripted):
    handler, url = scripted
    engine = _engine(url, mode="tokens")
    handler.replies["/v1/completions"] = (422, {"detail": "Unexpected fields"})
    with pytest.raises(EngineError, match="HTTP 422"):
        engine.generate([[1]], SamplingParams(max_new_tokens=1))
    assert "return_token_ids" in handler.seen[0][1] and "return_token_ids" not in handler.seen[1][1]
    handler.replies["/v1/completions"] = (
        200,
        {"choices": [{"text": "a", "logprobs": {"content": [{"id": 97, "logprob": -1.5}]}}]},
    )
    [g] = engine.generate([[1]], SamplingParams(max_new_tokens=1))
    assert (g.ids, g.logprobs, g.text) == ([97], [-1.5], "a") and "return_token_ids" not in handler.seen[2][1]


def test_auto_falls_back_to_text_and_keeps_the_chat(scripted):
    handler, url = scripted
    handler.replies["/v1/completions"] = (400, {"detail": "prompt must be a string."})
    handler.replies["/v1/chat/completions"] = (
        200,
        {"choices": [{"message": {"content": "> go north\nmore"}, "finish_reason": "stop"}]},
    )
    from roleagent.models.loading import load_tokenizer

    engine = _engine(url, load_tokenizer("embedded"))
    messages = [{"role": "user", "content": "where?"}]
    prompt = engine.encode_chat(messages, response_prefix="> ")
    [g] = engine.generate([prompt], SamplingParams(max_new_tokens=8, stop=("\n",)))
    assert engine.text_only and g.text == "go north\n"
    assert handler.seen[-1][1]["messages"] == messages
    assert len(g.logprobs) == len(g.ids) and all(math.isnan(v) for v in g.logprobs)
    with pytest.raises(EngineError, match="cannot constrain"):
        engine.generate([prompt], SamplingParams(), allowed=[[[1, 2]]])
    with pytest.raises(EngineError, match="own weights"):
        engine.weights_changed()


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["server.mode=text", "iterations=1"], "text mode returns no token ids"),
        (["server.mode=tokens", "iterations=1"], "cannot follow the optimizer"),
        (["iterations=0", "rollout.constrain_actions=true", "rollout.action_format=action"], "constrain"),
        (["iterations=0", "server.mode=fast"], "server.mode"),
        (["iterations=0", "server.extra_body={max_tokens: 9, top_k: 2}"], "the engine does not set itself"),
        (["iterations=0", "server.extra_body=[ignore_eos]"], "server.extra_body: expected dict"),
    ],
)
def test_config_refuses_training_and_constraints(sets, message):
    with pytest.raises(ConfigError, match=message):
        checked_config(None, ["model.engine=openai", *sets])


def test_config_accepts_evaluation():
    validate(load_config(None, ["model.engine=openai", "iterations=0", "server.base_url=http://h:1/v1"]))


# ------------------------------------------------------------------ live servers ----


def _wait(url: str, proc: subprocess.Popen, seconds: float) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"{url} did not come up in {seconds} s")


@pytest.fixture(scope="module")
def policy():
    from roleagent.models.loading import load_policy

    return load_policy("embedded", device="cpu")


def _serve(command: list[str], health: str):
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    try:
        _wait(health, proc, 180)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


@pytest.mark.slow
def test_transformers_serve_text_mode_matches_hf_greedy(policy):
    """A real text-only server (`transformers serve`) over the embedded model: auto mode
    falls back to text, and greedy text equals the HF engine's on the same chat."""
    pytest.importorskip("fastapi", reason="pip install 'roleagent[dev]' (scripts/setup.sh --all)")
    from roleagent.models.loading import embedded_model_dir

    port = _free_port()
    exe = shutil.which("transformers")
    proc = _serve(
        [
            exe,
            "serve",
            str(embedded_model_dir()),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--device",
            "cpu",
            "--dtype",
            "float32",
        ],
        f"http://127.0.0.1:{port}/health",
    )
    try:
        server = ServerConfig(base_url=f"http://127.0.0.1:{port}/v1", timeout_s=120.0)
        engine = create_engine("openai", policy, settings=server)
        hf = create_engine("hf", policy)
        chat = [{"role": "user", "content": "Name one colour."}]
        params = SamplingParams(max_new_tokens=8, temperature=0.0)
        [served] = engine.generate([engine.encode_chat(chat)], params)
        [local] = hf.generate([hf.encode_chat(chat)], params)
        assert engine.text_only and served.text.strip() == local.text.strip() != ""
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_llama_server_tokens_mode(policy):
    """llama.cpp's llama-server over the embedded GGUF: token-id prompts, and the engine's
    ids and log-probs are the ones the server returns for the same request."""
    exe = shutil.which("llama-server") or shutil.which("llama-server", path=os.path.expanduser("~/.local/bin"))
    if exe is None:
        pytest.skip("no llama-server on PATH (scripts/setup.sh --all builds it)")
    from roleagent.models.loading import embedded_gguf_path

    port = _free_port()
    proc = _serve(
        [exe, "-m", str(embedded_gguf_path()), "--host", "127.0.0.1", "--port", str(port), "-t", "1", "-c", "2048"],
        f"http://127.0.0.1:{port}/health",
    )
    try:
        server = ServerConfig(base_url=f"http://127.0.0.1:{port}/v1", mode="tokens")
        engine = create_engine("openai", policy, settings=server)
        prompt = engine.encode_chat([{"role": "user", "content": "Name one colour."}])
        [g] = engine.generate([prompt], SamplingParams(max_new_tokens=6, temperature=0.0))
        body = {"model": engine.model, "prompt": prompt, "max_tokens": 6, "temperature": 0.0, "logprobs": 1}
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        raw = json.loads(urllib.request.urlopen(request, timeout=60).read())["choices"][0]["logprobs"]["content"]
        assert g.ids == [e["id"] for e in raw] and len(g.ids) > 0
        assert g.logprobs == pytest.approx([e["logprob"] for e in raw]) and all(v <= 0 for v in g.logprobs)
        assert g.text == policy.tokenizer.decode(g.ids, skip_special_tokens=True)
    finally:
        proc.kill()
        proc.wait()
