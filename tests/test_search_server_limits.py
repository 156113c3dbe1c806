"""The retriever server under load and abuse, in process on 127.0.0.1 with a stub retriever:
64 clients connecting at once are all answered within the client's default timeout, and
connections that stall or trickle their request are cut without holding up anyone else."""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from roleagent.envs.search import server as server_module
from roleagent.envs.search.retriever import HttpRetriever
from roleagent.envs.search.server import make_server

CLIENT_TIMEOUT = 10.0  # HttpRetriever's and the search env's default


class _Stub:
    docs = [{"id": "1", "contents": '"Iron"\nA metal.'}]

    def retrieve(self, queries, topk):
        return [[{"document": dict(self.docs[0]), "score": 1.0}] for _ in queries]


@pytest.fixture
def served():
    servers = []

    def start(serving: bool = True):
        server = make_server(_Stub(), "127.0.0.1", 0)
        servers.append(server)
        if serving:
            serve(server)
        return server

    yield start
    for server in servers:
        if getattr(server, "serving", False):  # shutdown() waits forever on a server never served
            server.shutdown()
        server.server_close()


def serve(server) -> None:
    server.serving = True
    threading.Thread(target=server.serve_forever, daemon=True).start()


def _connect(port: int, timeout: float) -> socket.socket | None:
    sock = socket.socket()
    sock.settimeout(timeout)
    try:
        sock.connect(("127.0.0.1", port))
        return sock
    except OSError:
        sock.close()
        return None


def _ask(sock: socket.socket) -> bytes:
    body = b'{"queries": ["iron"], "topk": 1}'
    sock.sendall(b"POST /retrieve HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    reply = b""
    while chunk := sock.recv(65536):
        reply += chunk
    sock.close()
    return reply


def test_64_clients_at_once_are_answered_within_the_client_timeout(served):
    """All 64 connect while the server is busy (nothing accepted yet): the listen backlog
    must hold them, or the kernel drops their SYNs and they retry after 1, 3, 7 s ..."""
    server = served(serving=False)
    port = server.server_address[1]
    with ThreadPoolExecutor(64) as pool:
        socks = list(pool.map(lambda _: _connect(port, 3.0), range(64)))
    connected = [s for s in socks if s is not None]
    for s in connected:
        s.settimeout(CLIENT_TIMEOUT)
    assert len(connected) == 64, f"only {len(connected)} of 64 clients connected within 3 s"
    started = time.monotonic()
    serve(server)
    with ThreadPoolExecutor(64) as pool:
        replies = list(pool.map(_ask, connected))
    assert all(r.startswith(b"HTTP/1.0 200") and b'"Iron' in r for r in replies)
    assert time.monotonic() - started < CLIENT_TIMEOUT


def _trickle(sock: socket.socket, stop: threading.Event) -> None:
    """A slowloris: a request line, then one header byte every 0.2 s, never finishing."""
    try:
        sock.sendall(b"POST /retrieve HTTP/1.1\r\n")
        while not stop.wait(0.2):
            sock.sendall(b"X")
    except OSError:  # cut by the server: what the test waits for
        pass


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """The server closed the connection (EOF or reset) before ``seconds`` passed."""
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
        return True
    except ConnectionError:
        return True
    except TimeoutError:
        return False


def test_stalled_and_trickling_connections_do_not_block_others(served, monkeypatch):
    monkeypatch.setattr(server_module.RetrievalHandler, "read_deadline", 2.0, raising=False)
    monkeypatch.setattr(server_module.RetrievalHandler, "timeout", 2.0)
    port = served().server_address[1]
    stop = threading.Event()
    idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(50)]
    tricklers = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(5)]
    threads = [threading.Thread(target=_trickle, args=(s, stop), daemon=True) for s in tricklers]
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        started = time.monotonic()
        [hits] = HttpRetriever(f"http://127.0.0.1:{port}", timeout=CLIENT_TIMEOUT).retrieve(["iron"], 1)
        assert hits[0]["document"]["id"] == "1"
        assert time.monotonic() - started < 5.0  # promptly, stalled connections or not
        # cut at the 2 s deadline, however often they send a byte; generous margin for a loaded machine
        assert all(_closed_within(s, 15.0) for s in tricklers)
        assert all(_closed_within(s, 5.0) for s in idle)
    finally:
        stop.set()
        for s in idle + tricklers:
            s.close()


def test_the_limits_fit_the_documented_use():
    assert server_module.BACKLOG >= 64 and server_module.MAX_CONNECTIONS >= 64
    assert server_module.READ_DEADLINE_S <= CLIENT_TIMEOUT and server_module.IDLE_TIMEOUT_S <= CLIENT_TIMEOUT
