"""One ScienceWorld simulator (a Java process behind a py4j gateway) with bounded memory
and a shutdown that leaves no process behind.

``scienceworld.ScienceWorldEnv`` launches ``java`` through ``py4j.launch_gateway`` with
``die_on_exit=True``: the JVM reads its stdin and exits when the pipe closes, so a worker
process that is killed (``EnvPool`` restarts hung or dead workers with SIGKILL) takes its
JVM with it. The package passes no JVM options, so a JVM's heap may grow to a quarter of
the machine's memory; options go in through ``JAVA_TOOL_OPTIONS``, which every JVM reads at
start (set only while the process is launched, then restored).
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Sequence

# -Xmx bounds the heap; SerialGC avoids a parallel collector's per-core threads and
# memory (one JVM per worker process already gives the parallelism).
DEFAULT_JVM_OPTIONS = ("-Xmx1g", "-XX:+UseSerialGC")


def launch(jvm_options: Sequence[str] = DEFAULT_JVM_OPTIONS):
    """A started ``scienceworld.ScienceWorldEnv`` whose JVM runs with ``jvm_options``.

    Its own step limit is off (``envStepLimit`` huge): the rollout's ``max_steps`` ends
    episodes, as for every roleagent environment."""
    from scienceworld import ScienceWorldEnv

    # py4j logs every broken connection with a traceback, from its callback-server threads
    # too. Formatting tracebacks in two threads at once corrupted CPython 3.11.7's shared
    # AST state here (every later ``ast.parse`` raised "AST constructor recursion depth
    # mismatch"). Failures reach the caller as exceptions anyway.
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    previous = os.environ.get("JAVA_TOOL_OPTIONS")
    if jvm_options:
        os.environ["JAVA_TOOL_OPTIONS"] = " ".join(jvm_options)
    try:
        return ScienceWorldEnv("", envStepLimit=10**9)
    finally:
        if previous is None:
            os.environ.pop("JAVA_TOOL_OPTIONS", None)
        else:
            os.environ["JAVA_TOOL_OPTIONS"] = previous


def java_process(sim) -> subprocess.Popen:
    """The ``Popen`` of ``sim``'s JVM."""
    return sim._gateway.java_process


def raise_if_dead(sim, error: BaseException) -> None:
    """Raise ``EnvironmentCrashed`` (from ``error``) when ``sim``'s JVM has exited, so a
    step that failed because the simulator died is a crashed episode, not a failure.
    py4j may notice a dying JVM as a reset connection (a ``Py4JError`` "An error occurred
    while calling o2.step") before the process has exited, so after a py4j error other
    than a Java exception this waits up to 2 s for the exit; after a Java exception
    (``Py4JJavaError``: the JVM is alive) or a Python error it only looks."""
    from py4j.protocol import Py4JError, Py4JJavaError

    from roleagent.envs.base import EnvironmentCrashed

    process = java_process(sim)
    broken = isinstance(error, Py4JError) and not isinstance(error, Py4JJavaError)
    try:
        code = process.wait(timeout=2.0 if broken else 0.0)
    except subprocess.TimeoutExpired:
        return
    raise EnvironmentCrashed(f"the ScienceWorld JVM (pid {process.pid}) exited with code {code}") from error


def shutdown(sim, timeout: float = 10.0) -> None:
    """Stop ``sim``'s gateway and JVM and wait for it; kill it if it has not exited after
    ``timeout`` seconds. Safe to call on a JVM that already died."""
    process = java_process(sim)
    try:
        if process.poll() is None:
            sim.close()  # gateway shutdown + a newline on the JVM's stdin (py4j's exit signal)
        else:  # a dead JVM: close the sockets and the callback server without calling it
            sim._gateway.close(keep_callback_server=False)
    except Exception:  # noqa: BLE001 - a JVM that cannot be closed politely is killed below
        pass
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout)
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            stream.close()
    sim.close = lambda: None  # the package's __del__ calls close() again at collection


def rss_mb(sim) -> float:
    """Resident memory of ``sim``'s JVM in MiB (Linux ``/proc``); 0.0 when gone."""
    try:
        with open(f"/proc/{java_process(sim).pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0
