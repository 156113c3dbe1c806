"""The OpenAI-compatible engine against a hostile server on 127.0.0.1: a reply trickled a
byte at a time, replies of the wrong shape, a redirect to another host holding out for the
API key, a reply too large or too long, and the stop-string scan on a long reply. Each
must end in :class:`EngineError` (or a correct generation), promptly."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from roleagent.engine import SamplingParams
from roleagent.engine.openai import STOP_WINDOW, EngineError, OpenAIEngine, ServerConfig, stop_index
from roleagent.engine.openai_http import reply_limit


class _Tok:
    """A character tokenizer (id = code point) that counts the ids it decodes."""

    eos_token_id = 0

    def __init__(self):
        self.decoded = 0

    def decode(self, ids, skip_special_tokens=True):
        self.decoded += len(ids)
        return "".join(chr(i) for i in ids if i)

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}


def _completion(text: str = "ab", **extra) -> dict:
    content = [{"id": ord(c), "logprob": -0.5} for c in text]
    return {"choices": [{"text": text, "finish_reason": "stop", "logprobs": {"content": content}, **extra}]}


class _Hostile(BaseHTTPRequestHandler):
    """Answers GET /v1/models normally; everything else with ``act(handler)``."""

    act = None
    seen: list = []

    def do_GET(self):  # noqa: N802
        type(self).seen.append(("GET", self.path, dict(self.headers)))
        if self.path.endswith("/models") and type(self).act_models is None:
            return self.send_json({"data": [{"id": "m"}]})
        (type(self).act_models or type(self).act)(self)

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).seen.append(("POST", self.path, dict(self.headers)))
        type(self).act(self)

    def send_json(self, reply, code=200):
        self.send_raw(json.dumps(reply).encode(), code)

    def send_raw(self, data: bytes, code=200, length=True):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        if length:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        """A client that hangs up mid-reply (the engine refusing a reply too large) is what
        these tests provoke: not worth a traceback on the test log; anything else is."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@pytest.fixture
def hostile():
    servers = []

    def start(act, act_models=None):
        handler = type("H", (_Hostile,), {"act": staticmethod(act), "act_models": act_models, "seen": []})
        server = _Server(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return handler, f"http://127.0.0.1:{server.server_address[1]}/v1"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _engine(url, mode="tokens", **server):
    cfg = ServerConfig(base_url=url, mode=mode, **{"retries": 0, "timeout_s": 5.0, **server})
    return OpenAIEngine(SimpleNamespace(tokenizer=_Tok()), settings=cfg, max_prompt_tokens=512)


def _trickle(head: bool):
    """A valid reply, written one byte per 50 ms (about 7 s in all): only its head, or all."""

    def act(self):
        body = json.dumps(_completion("ok")).encode()
        head_bytes = f"HTTP/1.0 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        data = head_bytes + body
        try:
            if not head:
                self.wfile.write(head_bytes)
                data = body
            for i in range(len(data)):
                self.wfile.write(data[i : i + 1])
                self.wfile.flush()
                time.sleep(0.05)
        except OSError:  # the client gave up: the point of the test
            pass

    return act


@pytest.mark.parametrize("head", [False, True], ids=["body", "status line"])
def test_a_trickled_reply_is_cut_at_the_timeout(hostile, head):
    _, url = hostile(_trickle(head))
    engine = _engine(url, timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(EngineError, match=r"no reply within 1 s"):
        engine.generate([[1, 2]], SamplingParams(max_new_tokens=4))
    assert time.monotonic() - started < 4.0  # 1 s, with room for a loaded machine


WRONG_SHAPES = {
    "not utf-8": b'{"choices": [{"text": "\xff\xfe"}]}',
    "a json list": b"[1, 2]",
    "content a string": json.dumps({"choices": [{"text": "a", "logprobs": {"content": "abc"}}]}).encode(),
    "logprobs a list": json.dumps({"choices": [{"text": "a", "logprobs": [1]}]}).encode(),
    "token id 10**12": json.dumps(
        {"choices": [{"text": "a", "logprobs": {"content": [{"id": 10**12, "logprob": -1.0}]}}]}
    ).encode(),
    "ids true false": json.dumps(
        {"choices": [{"text": "ab", "token_ids": [True, False], "logprobs": {"token_logprobs": [-1.0, -1.0]}}]}
    ).encode(),
    "nan log-prob": json.dumps(_completion("a")).replace("-0.5", "NaN").encode(),
    "inf log-prob": json.dumps(_completion("a")).replace("-0.5", "-Infinity").encode(),
    "positive log-prob": json.dumps(_completion("a")).replace("-0.5", "3.5").encode(),
    "token_id:abc": json.dumps(
        {"choices": [{"text": "a", "logprobs": {"tokens": ["token_id:abc"], "token_logprobs": [-1.0]}}]}
    ).encode(),
    "a 5000-digit id": b'{"choices": [{"text": "a", "token_ids": [' + b"9" * 5000 + b'], "logprobs": {}}]}',
    "choices a dict": b'{"choices": {"0": {}}}',
}


@pytest.mark.parametrize("body", WRONG_SHAPES.values(), ids=WRONG_SHAPES.keys())
def test_a_reply_of_the_wrong_shape_is_an_engine_error(hostile, body):
    _, url = hostile(lambda self: self.send_raw(body))
    with pytest.raises(EngineError):
        _engine(url).generate([[1, 2]], SamplingParams(max_new_tokens=4))


CHAT_SHAPES = {
    "message a string": {"choices": [{"message": "hi"}]},
    "content a list": {"choices": [{"message": {"content": [{"type": "text", "text": "hi"}]}}]},
    "content a number": {"choices": [{"message": {"content": 7}}]},
}


@pytest.mark.parametrize("reply", CHAT_SHAPES.values(), ids=CHAT_SHAPES.keys())
def test_a_chat_reply_of_the_wrong_shape_is_an_engine_error(hostile, reply):
    _, url = hostile(lambda self: self.send_json(reply))
    engine = _engine(url, mode="text")
    engine._remember([1, 2], [{"role": "user", "content": "q"}], "")
    with pytest.raises(EngineError):
        engine.generate([[1, 2]], SamplingParams(max_new_tokens=4))


@pytest.mark.parametrize(
    "models",
    [b"[1]", b'{"data": ["idx"]}', b'{"data": "m"}', b"\xff"],
    ids=["list", "id string", "data string", "bytes"],
)
def test_a_bad_model_list_is_an_engine_error(hostile, models):
    _, url = hostile(lambda self: None, act_models=lambda self: self.send_raw(models))
    with pytest.raises(EngineError):
        _engine(url)


@pytest.mark.parametrize("elsewhere", [True, False], ids=["another host", "same host"])
def test_a_redirect_is_refused_and_the_key_stays_home(hostile, monkeypatch, elsewhere):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    thief, thief_url = hostile(lambda self: self.send_json(_completion("ok")))

    def redirect(self):
        self.send_response(302)
        self.send_header("Location", (thief_url if elsewhere else "") + "/v1/other")
        self.send_header("Content-Length", "0")
        self.end_headers()

    handler, url = hostile(redirect)
    engine = _engine(url)
    assert handler.seen[0][2].get("Authorization") == "Bearer sk-secret"  # the key goes to base_url only
    with pytest.raises(EngineError, match=r"HTTP 302 redirects to .*not followed"):
        engine.generate([[1, 2]], SamplingParams(max_new_tokens=4))
    assert thief.seen == [] and [m for m, *_ in handler.seen] == ["GET", "POST"]


@pytest.mark.parametrize("length", [True, False], ids=["content-length", "until close"])
def test_a_reply_too_large_is_refused(hostile, length):
    reply = _completion("a")
    reply["choices"][0]["padding"] = "x" * reply_limit(4)
    body = json.dumps(reply).encode()
    _, url = hostile(lambda self: self.send_raw(body, length=length))
    with pytest.raises(EngineError, match=r"more than|bytes \(at most"):
        _engine(url).generate([[1, 2]], SamplingParams(max_new_tokens=4))


def test_more_tokens_than_max_tokens_are_refused(hostile):
    _, url = hostile(lambda self: self.send_json(_completion("ab" * 10_000)))
    started = time.monotonic()
    with pytest.raises(EngineError, match="20000 tokens for max_tokens=6"):
        _engine(url).generate([[1, 2]], SamplingParams(max_new_tokens=6, stop=("\n",)))
    assert time.monotonic() - started < 10
    _, url = hostile(lambda self: self.send_json(_completion("abcdef")))
    [g] = _engine(url).generate([[1, 2]], SamplingParams(max_new_tokens=6))
    assert g.text == "abcdef" and g.logprobs == [-0.5] * 6  # exactly max_tokens is fine


def test_a_text_reply_far_longer_than_asked_is_refused(hostile):
    _, url = hostile(lambda self: self.send_json({"choices": [{"message": {"content": "word " * 100_000}}]}))
    engine = _engine(url, mode="text")
    engine._remember([1, 2], [{"role": "user", "content": "q"}], "")
    with pytest.raises(EngineError, match="characters for max_tokens=6"):
        engine.generate([[1, 2]], SamplingParams(max_new_tokens=6))


def test_the_stop_scan_is_linear_and_matches_the_hf_engine():
    from roleagent.engine.hf import HFEngine

    tok = _Tok()
    ids = [ord("a")] * 4000 + [ord("\n")]
    assert stop_index(tok, ids, ("\n",)) == len(ids)
    assert tok.decoded <= STOP_WINDOW * len(ids)  # a prefix decode per token would be ~8 million
    hf = SimpleNamespace(tokenizer=tok)
    for text in ["\n\ngo\nx", "  go</a> b", "x" * 30 + "</a>", "\n" * 30 + "go", "abc"]:
        ids = [ord(c) for c in text]
        want = next((n for n in range(1, len(ids) + 1) if HFEngine._hit_stop(hf, ids[:n], ("\n", "</a>"))), None)
        assert stop_index(tok, ids, ("\n", "</a>")) == want, text


def test_a_proxy_from_the_environment_is_used(hostile, monkeypatch):
    proxy, proxy_url = hostile(lambda self: self.send_json(_completion("ok")))
    for name in ("no_proxy", "NO_PROXY", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", proxy_url.rsplit("/v1", 1)[0])
    engine = _engine("http://model-server.invalid:8000/v1")
    [g] = engine.generate([[1, 2]], SamplingParams(max_new_tokens=4))
    assert g.text == "ok" and [p for _, p, _ in proxy.seen] == [
        "http://model-server.invalid:8000/v1/models",
        "http://model-server.invalid:8000/v1/completions",
    ]
