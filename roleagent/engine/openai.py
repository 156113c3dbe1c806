"""Generation through any server that speaks the OpenAI API (vLLM, SGLang, llama.cpp, a
hosted API), behind :class:`roleagent.engine.base.Engine`.

Two modes (``server.mode``):

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

A server's own sampling options travel in every generation request from
``server.extra_body`` (:func:`~roleagent.engine.openai_http.checked_extra_body`).

Stop strings are applied here, not by the server (servers differ in whether a stop
string stays in the text and its tokens in the ids): a row stops after the first token
whose decoded text (the last 24 tokens', after leading whitespace) contains one, exactly
as :class:`roleagent.engine.hf.HFEngine` does, and later tokens are dropped.

Constrained decoding (``allowed=``) is not supported: it raises :class:`EngineError`
(``rollout.constrain_actions`` with this engine is a config error). Requests run
concurrently (``server.concurrency``); each has a timeout and a bounded number of
retries on connection errors, timeouts and HTTP 5xx/429; then :class:`EngineError` says
which server could not be reached and how to start one.

A misbehaving server (:mod:`roleagent.engine.openai_http`): ``timeout_s`` bounds a whole
request, not each read; a redirect is refused, never followed (the API key would go with
it); a reply is capped in bytes and in tokens (no more than ``max_tokens``); a reply of
another shape (not UTF-8, not a JSON object, ids that are not the tokenizer's, log-probs
that are not finite and <= 0) raises :class:`EngineError`.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import random
import sys
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from roleagent.engine.base import Allowed, Generation, SamplingParams
from roleagent.engine.chat import encode_chat
from roleagent.engine.openai_http import (
    MAX_TOKEN_ID,
    EngineError,
    MissingTokens,
    TooSlow,
    chat_text,
    checked_extra_body,
    error_detail,
    exchange,
    first_choice,
    json_reply,
    reply_limit,
    reply_tokens,
)
from roleagent.fields import setting

MODES = ("auto", "tokens", "text")
__all__ = ["EngineError", "MissingTokens", "OpenAIEngine", "ServerConfig", "reply_tokens", "stop_index", "stop_text"]
#: tokens of the reply text the stop strings are looked for in (HFEngine._hit_stop's window)
STOP_WINDOW = 24
#: characters a text-mode reply may have per requested token (no token is that long)
MAX_CHARS_PER_TOKEN = 64


@dataclass
class ServerConfig:
    base_url: str = setting(
        "http://127.0.0.1:8000/v1", "model.engine=openai: the server's OpenAI API root (ends in /v1)"
    )
    model: str = setting("", "served model name sent with each request; '' = the first of GET /v1/models")
    api_key_env: str = setting("OPENAI_API_KEY", "environment variable holding the API key (sent when set)")
    mode: str = setting(
        "auto",
        "tokens (/v1/completions on token-id prompts: ids and log-probs from the server) | text "
        "(/v1/chat/completions: text only, evaluation only) | auto (tokens, else text)",
    )
    timeout_s: float = setting(
        120.0, "seconds one request may take in all (connecting to the last byte) before a retry"
    )
    retries: int = setting(2, "retries of a request after a connection error, timeout or HTTP 5xx/429")
    concurrency: int = setting(8, "requests in flight at once")
    extra_body: dict = setting(
        {},
        "fields added to every generation request, e.g. {ignore_eos: true} (llama-server) or {top_k: 20} "
        "(vLLM); the engine's own fields cannot be set here",
    )


class OpenAIEngine:
    """An :class:`~roleagent.engine.base.Engine` whose generations come from an
    OpenAI-compatible server; prompts are encoded locally with the policy's tokenizer,
    the only part of the policy it uses (no weights are loaded for it: ``loads_weights``)."""

    loads_weights = False
    config_class = ServerConfig
    config_section = "server"  # the config's typed section holding these settings

    def __init__(
        self,
        policy: Any,
        *,
        settings: ServerConfig | None = None,
        max_batch: int = 32,
        max_prompt_tokens: int = 1024,
        prefix_cache_tokens: int = 0,  # (the server keeps its own prefix cache)
    ):
        server = settings if settings is not None else ServerConfig()
        if server.mode not in MODES:
            raise EngineError(f"server.mode={server.mode!r}: choose one of {', '.join(MODES)}")
        self.server = server
        self._extra = checked_extra_body(server.extra_body)
        self.tokenizer = policy.tokenizer
        self._vocab = _vocab_size(policy.tokenizer)  # a token id at or past it is not this model's
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

    def _request(self, path: str, body: dict | None = None, max_tokens: int = 0) -> dict:
        """JSON reply of GET (``body`` None) or POST ``path``; retried on transient errors.
        The whole request is bounded by ``timeout_s``, its reply by :func:`reply_limit`;
        a redirect is refused (the API key would follow it)."""
        url = self.server.base_url.rstrip("/") + path
        data = None if body is None else json.dumps(body).encode()
        error: str = ""
        for attempt in range(self.server.retries + 1):
            if attempt:
                time.sleep(min(0.5 * 2 ** (attempt - 1), 4.0))
            try:
                code, headers, reply = exchange(
                    url, data, self._headers, self.server.timeout_s, reply_limit(max_tokens)
                )
            except TooSlow:
                error = f"no reply within {self.server.timeout_s:g} s"
                continue
            except (OSError, http.client.HTTPException) as failure:
                error = str(failure) or type(failure).__name__
                continue
            if 300 <= code < 400:
                where = error_detail((headers.get("Location") or headers.get("location") or "?").encode())
                raise EngineError(
                    f"{url}: HTTP {code} redirects to {where}; redirects are not followed (the API key would go "
                    "along): set server.base_url to the address that answers"
                )
            if code in (429, 500, 502, 503, 504):
                error = f"HTTP {code}: {error_detail(reply)}"
                continue
            if code >= 400 or code < 200:
                raise ServerRefused(code, f"{url}: HTTP {code}: {error_detail(reply)}")
            return json_reply(reply, url)
        raise EngineError(
            f"cannot use the OpenAI-compatible server at {self.server.base_url} ({self.server.retries + 1} tries): "
            f"{error}. Start one (e.g. `vllm serve MODEL --port 8000`, `llama-server -m MODEL.gguf --port 8000`) "
            f"or set server.base_url"
        )

    def _first_model(self) -> str:
        models = self._request("/models").get("data") or []
        if not isinstance(models, list) or not models or not isinstance(models[0], dict) or "id" not in models[0]:
            raise EngineError(f"{self.server.base_url}/models lists no model: set server.model")
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
        print(f"server.mode=auto: text only (evaluation only): {why}", file=sys.stderr)
        return "text"

    def _sampling(self, params: SamplingParams, seed: int) -> dict:
        return {
            **self._extra,
            "max_tokens": params.max_new_tokens,
            "temperature": max(params.temperature, 0.0),
            "top_p": params.top_p,
            "seed": seed,
        }

    def _by_tokens(self, prompt: list[int], seed: int, params: SamplingParams) -> Generation:
        body = {"model": self.model, "prompt": list(prompt), "logprobs": 1, **self._sampling(params, seed)}
        try:
            reply = self._request("/completions", {**body, **self._token_fields}, params.max_new_tokens)
        except ServerRefused:
            if not self._token_fields:
                raise
            self._token_fields = {}  # a strict server refuses vLLM's fields: ask without them
            reply = self._request("/completions", body, params.max_new_tokens)
        choice = first_choice(reply, self.server.base_url)
        ids, logprobs = reply_tokens(choice, self._vocab)
        if len(ids) > params.max_new_tokens:
            raise EngineError(
                f"{self.server.base_url}: {len(ids)} tokens for max_tokens={params.max_new_tokens}: a reply longer than asked"
            )
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
        tools = next((m["tools"] for m in messages if m.get("tools")), None)  # encode_chat's convention
        messages = [{k: v for k, v in m.items() if k != "tools"} for m in messages]
        body = {"model": self.model, "messages": messages, **self._sampling(params, seed)}
        if tools:
            body["tools"] = tools  # the server renders them with its template
        choice = first_choice(self._request("/chat/completions", body, params.max_new_tokens), self.server.base_url)
        text = chat_text(choice).lstrip()
        if len(text) > MAX_CHARS_PER_TOKEN * params.max_new_tokens + 1024:
            raise EngineError(
                f"{self.server.base_url}: {len(text)} characters for max_tokens={params.max_new_tokens}: "
                "a reply longer than asked"
            )
        text = text[len(prefix) :] if prefix and text.startswith(prefix) else text
        cut = stop_text(text, params.stop)
        text = text if cut is None else text[:cut]
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        truncated = cut is None and choice.get("finish_reason") == "length"
        return Generation(
            prompt_ids=list(prompt), ids=ids, logprobs=[math.nan] * len(ids), text=text, truncated=truncated
        )

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


def _vocab_size(tokenizer) -> int:
    """Ids the tokenizer knows (added tokens included); a tokenizer that does not say: any int32."""
    try:
        return max(int(len(tokenizer)), int(getattr(tokenizer, "vocab_size", 0) or 0))
    except TypeError:
        return MAX_TOKEN_ID + 1


def stop_index(tokenizer, ids: list[int], stop: tuple[str, ...]) -> int | None:
    """Tokens to keep: up to and including the first whose text completes a stop string,
    None if none does. As the HF engine's ``_hit_stop``: the text of the last
    :data:`STOP_WINDOW` tokens, leading whitespace ignored while the row is shorter; each
    token decodes at most that many, so the scan is linear in the reply's length."""
    if not stop:
        return None
    for n in range(1, len(ids) + 1):
        text = tokenizer.decode(ids[max(0, n - STOP_WINDOW) : n], skip_special_tokens=True)
        if any(s in (text.lstrip() if n <= STOP_WINDOW else text) for s in stop):
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
            if cfg.server.mode == "text"
            else "the server's weights cannot follow the optimizer"
        )
        raise ConfigError(
            f"model.engine=openai cannot train (iterations={cfg.iterations}): {reason}; "
            "use it for evaluation (roleagent eval, iterations=0) or train with model.engine=hf"
        )
    if cfg.sft.enabled:
        raise ConfigError("model.engine=openai cannot fine-tune (sft.enabled): the server serves its own weights")
    if cfg.model.init_from:
        raise ConfigError(
            "model.engine=openai serves its own weights: serve model.init_from's model and drop init_from"
        )
    if cfg.rollout.constrain_actions:
        raise ConfigError("model.engine=openai cannot constrain decoding: set rollout.constrain_actions=false")
