"""A retrieval server speaking Search-R1's HTTP API (Jin et al., 2025, arXiv 2503.09516)::

    POST /retrieve  {"queries": ["..."], "topk": 3, "return_scores": true}
    -> {"result": [[{"document": {"id": "...", "contents": "\\"Title\\"\\ntext"}, "score": 7.1}, ...]]}

(``return_scores`` false: each hit is the bare document). ``GET /health`` answers
``{"status": "ok", "documents": N}``. Standard library only (``ThreadingHTTPServer``);
bound to 127.0.0.1 unless told otherwise. Bad requests get HTTP 400 with ``{"error": ...}``.

Limits, sized for the documented use (an RL run's env workers, 64 clients at once, each
waiting up to its 10 s default timeout): a listen backlog of ``BACKLOG`` connections, one
thread per connection up to ``MAX_CONNECTIONS`` (more are closed at once), a connection
silent for ``IDLE_TIMEOUT_S`` is closed, and one whose request is not read within
``READ_DEADLINE_S`` is cut (a client trickling its headers cannot hold a thread).

    roleagent retriever --host 127.0.0.1 --port 8000          # the shipped corpus, BM25
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from roleagent.envs.search.retriever import check_topk

MAX_BODY_BYTES = 1 << 20
MAX_QUERIES = 512
MAX_QUERY_CHARS = 2000
BACKLOG = 256
MAX_CONNECTIONS = 256
IDLE_TIMEOUT_S = 10.0
READ_DEADLINE_S = 10.0


def parse_request(body: bytes) -> tuple[list[str], int, bool]:
    """Validate a ``/retrieve`` body; raises ``ValueError`` with the reason.

    >>> parse_request(b'{"queries": ["iron"], "topk": 2, "return_scores": true}')
    (['iron'], 2, True)
    """
    try:
        request = json.loads(body)
    except (ValueError, RecursionError) as error:
        raise ValueError("the body is not JSON") from error
    if not isinstance(request, dict):
        raise ValueError("the body must be a JSON object")
    queries = request.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise ValueError("'queries' must be a list of strings")
    if len(queries) > MAX_QUERIES:
        raise ValueError(f"at most {MAX_QUERIES} queries per request, got {len(queries)}")
    scores = request.get("return_scores", False)
    if not isinstance(scores, bool):
        raise ValueError("'return_scores' must be true or false")
    return [q[:MAX_QUERY_CHARS] for q in queries], check_topk(request.get("topk", 3)), scores


class RetrievalHandler(BaseHTTPRequestHandler):
    retriever: Any = None  # set on the class ``make_server`` builds
    documents: int = 0
    quiet: bool = True
    timeout = IDLE_TIMEOUT_S  # socket timeout of each read and write (StreamRequestHandler)
    read_deadline = READ_DEADLINE_S

    def setup(self) -> None:
        super().setup()
        self._deadline = threading.Timer(self.read_deadline, self._cut)
        self._deadline.daemon = True
        self._deadline.start()

    def _cut(self) -> None:
        """The request was not read in time: close the connection under the blocked read."""
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def finish(self) -> None:
        self._deadline.cancel()
        super().finish()

    def do_POST(self) -> None:  # noqa: N802 - the http.server API
        if self.path.rstrip("/") != "/retrieve":
            return self._send(404, {"error": f"no such endpoint {self.path!r}: POST /retrieve"})
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            return self._send(400, {"error": "bad Content-Length"})
        if not 0 < length <= MAX_BODY_BYTES:
            return self._send(413 if length else 400, {"error": f"the body must have 1 to {MAX_BODY_BYTES} bytes"})
        body = self.rfile.read(length)
        self._deadline.cancel()  # the request is in: answering it is not bounded by the deadline
        if len(body) < length:
            return None  # cut or closed mid-body: nobody to answer
        try:
            queries, topk, scores = parse_request(body)
        except ValueError as error:
            return self._send(400, {"error": str(error)})
        try:
            hits = self.retriever.retrieve(queries, topk)
        except Exception as error:  # noqa: BLE001 - answer 500 with the reason, keep serving
            return self._send(500, {"error": f"{type(error).__name__}: {error}"})
        result = [[h if scores else h["document"] for h in row] for row in hits]
        self._send(200, {"result": result})

    def do_GET(self) -> None:  # noqa: N802
        self._deadline.cancel()
        if self.path.rstrip("/") == "/health":
            return self._send(200, {"status": "ok", "documents": self.documents})
        self._send(404, {"error": "GET /health or POST /retrieve"})

    def _send(self, code: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the http.server API
        if not self.quiet:
            super().log_message(format, *args)


class RetrievalServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` with the module's limits: backlog, daemon threads, at most
    ``MAX_CONNECTIONS`` connections served at once (more are closed unanswered)."""

    request_queue_size = BACKLOG
    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any):
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # a client that went away or was cut: no traceback
            super().handle_error(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def make_server(retriever: Any, host: str = "127.0.0.1", port: int = 8000, quiet: bool = True) -> RetrievalServer:
    """A server answering with ``retriever`` (port 0: any free port, see ``server_address``)."""
    handler = type(
        "Handler",
        (RetrievalHandler,),
        {"retriever": retriever, "documents": len(getattr(retriever, "docs", ())), "quiet": quiet},
    )
    return RetrievalServer((host, port), handler)


def serve(retriever: Any, host: str = "127.0.0.1", port: int = 8000, quiet: bool = True) -> None:
    """Serve until interrupted; prints ``listening on http://HOST:PORT`` once bound."""
    server = make_server(retriever, host, port, quiet)
    bound_host, bound_port = server.server_address[:2]
    print(f"listening on http://{bound_host}:{bound_port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        print("retriever stopped", file=sys.stderr, flush=True)


def main(args: Any) -> int:
    """``roleagent retriever``: build the retriever, then serve until interrupted."""
    from roleagent.envs.search.retriever import make_retriever

    if not 0 <= args.port <= 65535:
        raise SystemExit(f"--port must be in [0, 65535], got {args.port}")
    print(f"indexing the corpus ({args.retriever}) ...", file=sys.stderr, flush=True)
    serve(make_retriever(args.retriever, corpus=args.corpus), args.host, args.port, quiet=not args.verbose)
    return 0
