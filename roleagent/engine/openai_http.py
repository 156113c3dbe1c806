"""HTTP and reply checks of :mod:`roleagent.engine.openai`, written for a server that may
misbehave.

- :func:`exchange`: one request, bounded as a whole by its timeout (connecting, sending, the
  status line, headers and body together: a reply trickled a byte at a time is cut at the
  deadline, not after each slow read), its body capped in bytes, and never redirected: a
  3xx is returned to the caller, which refuses it (following one would send the API key
  to wherever it points). Proxies set in the environment are used as ``urllib`` would.
- :func:`json_reply`: the body as a JSON object (UTF-8, standard JSON: no ``NaN``).
- :func:`reply_tokens`, :func:`chat_text`: the generated ids, log-probs or text of one
  choice, checked for type and range; a reply of another shape raises :class:`EngineError`.
- :func:`checked_extra_body`: ``server.extra_body``, the server's own request fields (e.g.
  ``{ignore_eos: true}`` for llama-server, ``{top_k: 20}`` for vLLM), none of them one the
  engine sets itself (:data:`OWN_FIELDS`).
"""

from __future__ import annotations

import http.client
import json
import math
import re
import socket
import threading
import time
import urllib.parse
import urllib.request
from typing import Any

from roleagent.terminal import printable


class EngineError(RuntimeError):
    """The server cannot be used: unreachable, too slow, or an unusable reply."""


class MissingTokens(EngineError):
    """A completion reply without token ids or log-probs (a text-only server)."""


class TooSlow(OSError):
    """No complete reply within the request's timeout."""


#: largest reply body read: a floor for ``GET /models`` and small replies, plus a
#: generous allowance per requested token (llama.cpp's per-token log-prob records are
#: a few hundred bytes)
REPLY_FLOOR_BYTES = 8 << 20
REPLY_BYTES_PER_TOKEN = 8 << 10
#: largest token id accepted when the tokenizer does not say its size
MAX_TOKEN_ID = 2**31 - 1
_TOKEN_ID = re.compile(r"token_id:(\d{1,10})")


#: request fields the engine sets itself (``server.extra_body`` may not)
OWN_FIELDS = frozenset(
    ["model", "prompt", "messages", "tools", "max_tokens", "temperature", "top_p", "seed", "logprobs", "stream", "n"]
    + ["return_token_ids", "return_tokens_as_token_ids"]
)


def own_fields_in(extra: dict) -> list[str]:
    """The keys of ``extra`` that name a field of :data:`OWN_FIELDS`, sorted."""
    return sorted(OWN_FIELDS.intersection(map(str, extra)))


def checked_extra_body(extra: Any) -> dict:
    """``server.extra_body`` when it is a mapping that sets none of :data:`OWN_FIELDS`."""
    if not isinstance(extra, dict):
        raise EngineError(f"server.extra_body must be a mapping of request fields, got {extra!r}")
    taken = own_fields_in(extra)
    if taken:
        raise EngineError(f"server.extra_body may not set {', '.join(taken)}: the engine sets them itself")
    return dict(extra)


def reply_limit(max_tokens: int = 0) -> int:
    """Bytes a reply for ``max_tokens`` generated tokens may have."""
    return REPLY_FLOOR_BYTES + REPLY_BYTES_PER_TOKEN * max(0, int(max_tokens))


def exchange(url: str, data: bytes | None, headers: dict, timeout: float, limit: int) -> tuple[int, dict, bytes]:
    """``(status, headers, body)`` of GET (``data`` None) or POST ``url``. Raises
    :class:`TooSlow` past ``timeout`` seconds in all, :class:`EngineError` for a body over
    ``limit`` bytes, ``OSError`` / ``http.client.HTTPException`` for a broken connection."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EngineError(f"{printable(url, lines=False)}: server.base_url must be an http:// or https:// URL")
    target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    proxy = _proxy(parts)
    https = parts.scheme == "https"
    cls = http.client.HTTPSConnection if https else http.client.HTTPConnection
    if proxy is None:
        conn = cls(parts.hostname, parts.port, timeout=timeout)
    else:  # https: a CONNECT tunnel through the proxy; http: the absolute URL to the proxy
        conn = cls(proxy.hostname, proxy.port, timeout=timeout)
        if https:
            conn.set_tunnel(parts.hostname, parts.port)
        else:
            target = url
    deadline = time.monotonic() + timeout
    expired = threading.Event()
    watchdog = threading.Timer(timeout, _cut, (conn, expired))
    watchdog.daemon = True
    watchdog.start()
    try:
        conn.connect()  # bounded by the socket timeout; the watchdog cuts everything after it
        if expired.is_set():
            raise TimeoutError("deadline")
        conn.request("GET" if data is None else "POST", target, body=data, headers=headers)
        reply = conn.getresponse()
        body = _read(reply, limit, deadline, url)
        if expired.is_set():  # the watchdog's cut may read as an early end of the reply
            raise TimeoutError("deadline")
        return reply.status, dict(reply.getheaders()), body
    except (OSError, http.client.HTTPException) as error:
        if expired.is_set() or time.monotonic() >= deadline:
            raise TooSlow(f"no reply within {timeout:g} s") from error
        raise
    finally:
        watchdog.cancel()
        conn.close()


def _proxy(parts: urllib.parse.SplitResult) -> urllib.parse.SplitResult | None:
    """The proxy ``urllib`` would use for this URL (``http_proxy`` etc.), if any."""
    proxy = urllib.request.getproxies().get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(parts.netloc):
        return None
    found = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    return found if found.hostname else None


def _cut(conn: http.client.HTTPConnection, expired: threading.Event) -> None:
    """The deadline passed: wake whatever read or write is blocked on the connection."""
    expired.set()
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _read(reply: http.client.HTTPResponse, limit: int, deadline: float, url: str) -> bytes:
    declared = reply.getheader("Content-Length")
    if declared and declared.strip().isdigit() and int(declared) > limit:
        raise EngineError(f"{url}: a reply of {int(declared)} bytes (at most {limit} are read)")
    chunks, size = [], 0
    while chunk := reply.read1(1 << 16):
        size += len(chunk)
        if size > limit:
            raise EngineError(f"{url}: a reply of more than {limit} bytes (at most {limit} are read)")
        if time.monotonic() >= deadline:
            raise TimeoutError("deadline")
        chunks.append(chunk)
    return b"".join(chunks)


def json_reply(body: bytes, url: str) -> dict:
    """The body as a JSON object, else :class:`EngineError`."""
    try:
        reply = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise EngineError(f"{url}: the reply is not UTF-8 text") from None
    except (ValueError, RecursionError):
        raise EngineError(f"{url}: the reply is not JSON: is server.base_url an OpenAI API root?") from None
    if not isinstance(reply, dict):
        raise EngineError(f"{url}: the reply is a JSON {type(reply).__name__}, not an object")
    return reply


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def error_detail(body: bytes) -> str:
    """The start of an error reply's body, printable on one line."""
    return printable(body[:300].decode("utf-8", errors="replace"), lines=False)


def first_choice(reply: dict, base_url: str) -> dict:
    choices = reply.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise EngineError(f"{base_url}: a reply without choices: {printable(str(reply)[:200], lines=False)}")
    return choices[0]


def reply_tokens(choice: dict, vocab: int = MAX_TOKEN_ID + 1) -> tuple[list[int], list[float]]:
    """Generated ids and log-probs of one ``/v1/completions`` choice (module docstring of
    :mod:`roleagent.engine.openai`); ids must lie in ``[0, vocab)``, log-probs be finite
    and not above 0. :class:`MissingTokens` if there are none, :class:`EngineError` if
    they are malformed.

    >>> reply_tokens({"logprobs": {"content": [{"id": 7, "logprob": -0.5}, {"id": 2, "logprob": -1.0}]}})
    ([7, 2], [-0.5, -1.0])
    >>> reply_tokens({"token_ids": [7, 2], "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-0.5, -1.0]}})
    ([7, 2], [-0.5, -1.0])
    >>> reply_tokens({"logprobs": {"tokens": ["token_id:7", "token_id:2"], "token_logprobs": [-0.5, -1.0]}})
    ([7, 2], [-0.5, -1.0])
    """
    logprobs = choice.get("logprobs") or {}
    if not isinstance(logprobs, dict):
        raise EngineError(f"the completion's logprobs is a {type(logprobs).__name__}, not an object")
    content = logprobs.get("content")
    if content:  # llama.cpp
        if not isinstance(content, list) or not all(isinstance(e, dict) for e in content):
            raise EngineError("the completion's logprobs.content is not a list of objects")
        ids, values = [e.get("id") for e in content], [e.get("logprob") for e in content]
    else:
        values = logprobs.get("token_logprobs") or []
        ids = choice.get("token_ids")
        if ids is None:
            tokens = logprobs.get("tokens") or []
            if not isinstance(tokens, list):
                raise EngineError("the completion's logprobs.tokens is not a list")
            matches = [_TOKEN_ID.fullmatch(t) if isinstance(t, str) else None for t in tokens]
            ids = [int(m.group(1)) if m else None for m in matches]
    if not isinstance(ids, list) or not isinstance(values, list):
        raise EngineError("the completion's token ids or log-probs are not lists")
    if (not ids and choice.get("text")) or any(i is None for i in ids) or len(values) != len(ids):
        raise MissingTokens("the server's completion reply has no token ids with log-probs")
    if any(v is None for v in values):
        raise MissingTokens("the server's completion reply has tokens without log-probs")
    bad_ids = [i for i in ids if type(i) is not int or not 0 <= i < vocab]  # bool is no id
    if bad_ids:
        shown = printable(repr(bad_ids[0])[:40], lines=False)
        raise EngineError(f"the completion holds token id {shown}: not an id of the tokenizer (size {vocab})")
    if not all(_logprob(v) for v in values):
        raise EngineError("the completion holds a log-prob that is not a finite number <= 0")
    return list(ids), [float(v) for v in values]


def _logprob(value: Any) -> bool:
    """A finite number not above 0 (a rounding error's 1e-3 allowed)."""
    if type(value) not in (int, float):
        return False
    try:
        return math.isfinite(float(value)) and value <= 1e-3
    except OverflowError:
        return False


def chat_text(choice: dict) -> str:
    """The assistant text of one ``/v1/chat/completions`` choice ('' for none)."""
    message = choice.get("message")
    if message is None:
        return ""
    if not isinstance(message, dict):
        raise EngineError(f"the chat reply's message is a {type(message).__name__}, not an object")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise EngineError(f"the chat reply's content is a {type(content).__name__}, not a string")
    return content or ""
