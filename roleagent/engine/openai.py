"""Generation through any server that speaks the OpenAI API (vLLM, SGLang, llama.cpp, a
hosted API), behind :class:`roleagent.engine.base.Engine`.

Two modes (``model.server.mode``):

- ``tokens``: ``POST /v1/completions`` with the token-id prompt (``prompt: [ids]``) and
  ``logprobs: 1``. ``Generation.ids`` / ``logprobs`` are what the server returned: the
  ids from ``choices[0].token_ids`` (vLLM ``return_token_ids``), or
  ``logprobs.content[i].id`` (llama.cpp), or ``logprobs.tokens`` written
  ``token_id:N`` (vLLM ``return_tokens_as_token_ids``; the two vLLM fields are sent
  until a server refuses them, then left out); the log-probs from
  ``logprobs.token_logprobs`` or ``logprobs.content[i].logprob``. They are the
  server's log-probs: llama.cpp and vLLM (by default) report the model's raw
  distribution, i.e. at temperature 1, whatever the sampling temperature.
- ``text``: ``POST /v1/chat/completions`` with the chat messages the prompt was encoded
  from (every server, hosted APIs included). Only the text comes back: ``ids`` are the
  tokenizer's encoding of it and every log-prob is NaN, so nothing can train on them
  (the config refuses training through this engine altogether: a remote server's
  weights cannot follow the optimizer). The assistant turn cannot be pre-filled, so a
  ``response_prefix`` the model repeats at the start of its reply is removed.
- ``auto``: ``tokens``, switching to ``text`` for good if the server refuses token-id
  prompts (HTTP 400/404/422) or returns no token ids or log-probs.

Stop strings are applied here, not by the server (servers differ in whether a stop
string stays in the text and its tokens in the ids): a row stops after the first token
whose decoded text (after leading whitespace) contains one, exactly as
:class:`roleagent.engine.hf.HFEngine` does, and later tokens are dropped.

Constrained decoding (``allowed=``) is not supported: it raises :class:`EngineError`
(``rollout.constrain_actions`` with this engine is a config error). Requests run
concurrently (``server.concurrency``); each has a timeout and a bounded number of
retries on connection errors, timeouts and HTTP 5xx/429; then :class:`EngineError` says
which server could not be reached and how to start one.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from roleagent.engine.base import Allowed, Generation, SamplingParams
from roleagent.engine.chat import encode_chat
from roleagent.fields import _f

MODES = ("auto", "tokens", "text")


class EngineError(RuntimeError):
    """The server cannot be used: unreachable, too slow, or an unusable reply."""


@dataclass
class ServerConfig:
    base_url: str = _f("http://127.0.0.1:8000/v1", "model.engine=openai: the server's OpenAI API root (ends in /v1)")
    model: str = _f("", "served model name sent with each request; '' = the first of GET /v1/models")
    api_key_env: str = _f("OPENAI_API_KEY", "environment variable holding the API key (sent when set)")
    mode: str = _f(
        "auto",
        "tokens (/v1/completions on token-id prompts: ids and log-probs from the server) | text "
        "(/v1/chat/completions: text only, evaluation only) | auto (tokens, else text)",
    )
    timeout_s: float = _f(120.0, "seconds one request may take before it is retried")
    retries: int = _f(2, "retries of a request after a connection error, timeout or HTTP 5xx/429")
    concurrency: int = _f(8, "requests in flight at once")


class OpenAIEngine:
    """An :class:`~roleagent.engine.base.Engine` whose generations come from an
    OpenAI-compatible server; prompts are encoded locally with the policy's tokenizer."""

    def __init__(self, policy: Any, *, max_batch: int = 32, max_prompt_tokens: int = 1024, server=None, **_: Any):
        server = server if server is not None else getattr(policy, "server", None) or ServerConfig()
        if server.mode not in MODES:
            raise EngineError(f"model.server.mode={server.mode!r}: choose one of {', '.join(MODES)}")
        self.server = server
        self.tokenizer = policy.tokenizer
        self.max_batch = max_batch
        self.max_prompt_tokens = max_prompt_tokens
        self.generated_tokens = 0
        self.prompt_tokens = 0
        self.mode = server.mode
        # vLLM returns token ids only when asked; a server that refuses the fields is asked without
        self._token_fields = {"return_token_ids": True, "return_tokens_as_token_ids": True}
        self._seed, self._calls = 0, 0
        self._chats: OrderedDict[tuple[int, ...], tuple[list[dict], str]] = OrderedDict()
        key = os.environ.get(server.api_key_env, "") if server.api_key_env else ""
        self._headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
        self.model = server.model or self._first_model()

    @property
    def text_only(self) -> bool:
        return self.mode == "text"

    # ------------------------------------------------------------------ HTTP ---------

    def _request(self, path: str, body: dict | None = None) -> dict:
        """JSON reply of GET (``body`` None) or POST ``path``; retried on transient errors."""
        url = self.server.base_url.rstrip("/") + path
        data = None if body is None else json.dumps(body).encode()
        error: str = ""
        for attempt in range(self.server.retries + 1):
            if attempt:
                time.sleep(min(0.5 * 2 ** (attempt - 1), 4.0))
            request = urllib.request.Request(
                url, data=data, headers=self._headers, method="GET" if data is None else "POST"
            )
            try:
                with urllib.request.urlopen(request, timeout=self.server.timeout_s) as reply:
                    return json.loads(reply.read().decode())
            except urllib.error.HTTPError as http:
                detail = http.read().decode(errors="replace")[:300]
                if http.code not in (429, 500, 502, 503, 504):
                    raise ServerRefused(http.code, f"{url}: HTTP {http.code}: {detail}") from None
                error = f"HTTP {http.code}: {detail}"
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as failure:
                reason = getattr(failure, "reason", failure)
                error = (
                    f"no reply within {self.server.timeout_s:g} s" if isinstance(reason, TimeoutError) else str(reason)
                )
            except json.JSONDecodeError:
                raise EngineError(
                    f"{url}: the reply is not JSON: is model.server.base_url an OpenAI API root?"
                ) from None
        raise EngineError(
            f"cannot use the OpenAI-compatible server at {self.server.base_url} ({self.server.retries + 1} tries): "
            f"{error}. Start one (e.g. `vllm serve MODEL --port 8000`, `llama-server -m MODEL.gguf --port 8000`) "
            f"or set model.server.base_url"
        )

    def _first_model(self) -> str:
        models = self._request("/models").get("data") or []
        if not models or "id" not in models[0]:
            raise EngineError(f"{self.server.base_url}/models lists no model: set model.server.model")
        return str(models[0]["id"])

    # --------------------------------------------------------------- prompts ---------

    def encode_chat(self, messages: list[dict[str, str]], *, response_prefix: str = "") -> list[int]:
        """As :meth:`roleagent.engine.hf.HFEngine.encode_chat`; the messages are kept (by
        the prompt's ids) for text mode's chat requests."""
        ids = encode_chat(self.tokenizer, messages, response_prefix=response_prefix)[-self.max_prompt_tokens :]
        self._remember(ids, [dict(m) for m in messages], response_prefix)
        return ids

    def extend_chat(self, prompt_ids, generated_ids, messages, *, response_prefix: str = ""):
        """As :meth:`roleagent.engine.hf.HFEngine.extend_chat` (same ids)."""
        from roleagent.engine.hf import HFEngine

        ids = HFEngine.extend_chat(self, prompt_ids, generated_ids, messages, response_prefix=response_prefix)
        earlier = self._chats.get(tuple(prompt_ids))
        if ids is not None and earlier is not None:
            reply = earlier[1] + self.tokenizer.decode(generated_ids, skip_special_tokens=True)
            chat = earlier[0] + [{"role": "assistant", "content": reply}] + [dict(m) for m in messages]
            self._remember(ids, chat, response_prefix)
        return ids

    def _remember(self, ids: list[int], messages: list[dict], response_prefix: str) -> None:
        self._chats[tuple(ids)] = (messages, response_prefix)
        self._chats.move_to_end(tuple(ids))
        while len(self._chats) > 4096:
            self._chats.popitem(last=False)

    # ------------------------------------------------------------- generation --------

    def generate(self, prompts: list[list[int]], params: SamplingParams, allowed: Allowed = None) -> list[Generation]:
        if allowed is not None and any(a is not None for a in allowed):
            raise EngineError("model.engine=openai cannot constrain decoding (allowed=): the server samples freely")
        self._calls += 1
        seeds = [random.Random(f"{self._seed}/{self._calls}/{i}").randrange(2**31) for i in range(len(prompts))]
        if self.mode == "auto":
            self.mode = self._probe(prompts[0], params, seeds[0])
        work = self._by_tokens if self.mode == "tokens" else self._by_text
        with ThreadPoolExecutor(max_workers=max(1, min(self.server.concurrency, len(prompts)))) as pool:
            out = list(pool.map(lambda job: work(*job, params), zip(prompts, seeds)))
        self.prompt_tokens += sum(len(p) for p in prompts)
        self.generated_tokens += sum(len(g.ids) for g in out)
        return out

    def _probe(self, prompt: list[int], params: SamplingParams, seed: int) -> str:
        """``tokens`` when the server answers a token-id prompt with ids and log-probs."""
        try:
            self._by_tokens(prompt, seed, params)
            return "tokens"
        except ServerRefused as refused:
            why = str(refused)
        except MissingTokens as missing:
            why = str(missing)
        print(f"model.server.mode=auto: text only (evaluation only): {why}", file=sys.stderr)
        return "text"

    def _sampling(self, params: SamplingParams, seed: int) -> dict:
        return {
            "max_tokens": params.max_new_tokens,
            "temperature": max(params.temperature, 0.0),
            "top_p": params.top_p,
            "seed": seed,
        }

    def _by_tokens(self, prompt: list[int], seed: int, params: SamplingParams) -> Generation:
        body = {"model": self.model, "prompt": list(prompt), "logprobs": 1, **self._sampling(params, seed)}
        try:
            reply = self._request("/completions", {**body, **self._token_fields})
        except ServerRefused:
            if not self._token_fields:
                raise
            self._token_fields = {}  # a strict server refuses vLLM's fields: ask without them
            reply = self._request("/completions", body)
        choice = self._choice(reply)
        ids, logprobs = reply_tokens(choice)
        keep = stop_index(self.tokenizer, ids, params.stop)
        cut = keep is not None
        ids, logprobs = (ids[:keep], logprobs[:keep]) if cut else (ids, logprobs)
        truncated = not cut and choice.get("finish_reason") == "length"
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Generation(prompt_ids=list(prompt), ids=ids, logprobs=logprobs, text=text, truncated=truncated)

    def _by_text(self, prompt: list[int], seed: int, params: SamplingParams) -> Generation:
        known = self._chats.get(tuple(prompt))
        if known is None:
            raise EngineError("text mode needs prompts built by this engine's encode_chat/extend_chat")
        messages, prefix = known
        body = {"model": self.model, "messages": messages, **self._sampling(params, seed)}
        choice = self._choice(self._request("/chat/completions", body))
        text = ((choice.get("message") or {}).get("content") or "").lstrip()
        text = text[len(prefix) :] if prefix and text.startswith(prefix) else text
        cut = stop_text(text, params.stop)
        text = text if cut is None else text[:cut]
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        truncated = cut is None and choice.get("finish_reason") == "length"
        return Generation(
            prompt_ids=list(prompt), ids=ids, logprobs=[math.nan] * len(ids), text=text, truncated=truncated
        )

    def _choice(self, reply: dict) -> dict:
        choices = reply.get("choices") or []
        if not choices or not isinstance(choices[0], dict):
            raise EngineError(f"{self.server.base_url}: a reply without choices: {str(reply)[:200]}")
        return choices[0]

    # -------------------------------------------------------------- the rest ---------

    def weights_changed(self) -> None:
        raise EngineError(
            "model.engine=openai generates with the server's own weights, which cannot follow a local "
            "optimizer step or checkpoint: serve the saved model instead and evaluate it without --run"
        )

    def seed(self, seed: int) -> None:
        self._seed, self._calls = seed, 0

    def get_rng_state(self) -> tuple[int, int]:
        return (self._seed, self._calls)

    def set_rng_state(self, state: tuple[int, int]) -> None:
        self._seed, self._calls = int(state[0]), int(state[1])


class ServerRefused(EngineError):
    """The server answered a request with an HTTP 4xx (not retried)."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class MissingTokens(EngineError):
    """A completion reply without token ids or log-probs (a text-only server)."""


def reply_tokens(choice: dict) -> tuple[list[int], list[float]]:
    """Generated ids and log-probs of one ``/v1/completions`` choice (module docstring).

    >>> reply_tokens({"logprobs": {"content": [{"id": 7, "logprob": -0.5}, {"id": 2, "logprob": -1.0}]}})
    ([7, 2], [-0.5, -1.0])
    >>> reply_tokens({"token_ids": [7, 2], "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-0.5, -1.0]}})
    ([7, 2], [-0.5, -1.0])
    >>> reply_tokens({"logprobs": {"tokens": ["token_id:7", "token_id:2"], "token_logprobs": [-0.5, -1.0]}})
    ([7, 2], [-0.5, -1.0])
    """
    logprobs = choice.get("logprobs") or {}
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if content:  # llama.cpp
        ids = [e.get("id") for e in content]
        values = [e.get("logprob") for e in content]
    else:
        values = list(logprobs.get("token_logprobs") or []) if isinstance(logprobs, dict) else []
        ids = choice.get("token_ids")
        if ids is None:
            tokens = logprobs.get("tokens") or [] if isinstance(logprobs, dict) else []
            ids = [int(t[9:]) if isinstance(t, str) and t.startswith("token_id:") else None for t in tokens]
    text = str(choice.get("text", ""))
    if (not ids and text) or any(not isinstance(i, int) for i in ids) or len(values) != len(ids):
        raise MissingTokens("the server's completion reply has no token ids with log-probs")
    if any(not isinstance(v, (int, float)) for v in values):
        raise MissingTokens("the server's completion reply has tokens without log-probs")
    return list(ids), [float(v) for v in values]


def stop_index(tokenizer, ids: list[int], stop: tuple[str, ...]) -> int | None:
    """Tokens to keep: up to and including the first whose text completes a stop string
    (leading whitespace ignored, as the HF engine's ``_hit_stop``); None if none does."""
    if not stop:
        return None
    for n in range(1, len(ids) + 1):
        if stop_text(tokenizer.decode(ids[:n], skip_special_tokens=True), stop) is not None:
            return n
    return None


def stop_text(text: str, stop: tuple[str, ...]) -> int | None:
    """Characters to keep: through the end of the earliest stop string found after the
    text's leading whitespace; None if there is none.

    >>> stop_text("\\ngo north\\nlook", ("\\n",))
    10
    >>> stop_text("<action>a</action> more", ("</action>",))
    18
    """
    start = len(text) - len(text.lstrip())
    found = [text.find(s, start) for s in stop if s]
    ends = [i + len(s) for i, s in zip(found, [s for s in stop if s]) if i >= 0]
    return min(ends) if ends else None


def check_server_config(cfg) -> None:
    """Config checks of ``model.engine=openai`` (``roleagent.config.validate``): the
    server's weights cannot follow training, so training (``iterations > 0``), a
    ``model.init_from`` the server does not serve, and constrained decoding are refused;
    text mode is named as the reason where it applies."""
    from roleagent.fields import ConfigError

    if cfg.model.engine != "openai":
        return
    if cfg.iterations > 0:
        reason = (
            "text mode returns no token ids or log-probs to train on"
            if cfg.model.server.mode == "text"
            else "the server's weights cannot follow the optimizer"
        )
        raise ConfigError(
            f"model.engine=openai cannot train (iterations={cfg.iterations}): {reason}; "
            "use it for evaluation (roleagent eval, iterations=0) or train with model.engine=hf"
        )
    if cfg.model.init_from:
        raise ConfigError(
            "model.engine=openai serves its own weights: serve model.init_from's model and drop init_from"
        )
    if cfg.rollout.constrain_actions:
        raise ConfigError("model.engine=openai cannot constrain decoding: set rollout.constrain_actions=false")
