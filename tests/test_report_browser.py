"""The report of a real tiny run (tiny model, Role-Agent with Agent-In-World) rendered in
headless Chromium: the page runs without console errors, its DOM holds the charts and the
rollout browser's side-by-side columns, hostile model output stays text, and the
screenshot shows the plotted lines. Skipped only where Chromium is not installed
(``scripts/setup.sh --all`` installs it)."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess

import pytest

from roleagent.report import write_report
from roleagent.types import Step, Task, Trajectory
from tests.run_helpers import AIW, run

pytestmark = pytest.mark.slow

HOSTILE = "</script><script>alert(1)</script><img src=x onerror=alert(2)>"


def chromium(tmp_path, *args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("chromium is not installed (scripts/setup.sh --all installs the Debian package)")
    command = [
        exe, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
        "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", *args,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=180)


def console_errors(stderr: str) -> list[str]:
    """Lines where the page logged to the console or threw (Chromium writes them as CONSOLE)."""
    return [line for line in stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A real tiny run, and a copy whose first dumped rollout is hostile model output."""
    root = tmp_path_factory.mktemp("report")
    run_dir = root / "tiny_run"
    run(run_dir, 2, AIW)
    hostile_dir = root / "hostile_run"
    shutil.copytree(run_dir, hostile_dir)
    hostile = Trajectory(
        Task(f"lucky/train/{HOSTILE}", "lucky"),
        steps=[Step(HOSTILE, "s", HOSTILE, HOSTILE, True, reward=1.0, extras={"wia": {"predictions": [HOSTILE]}})],
        success=True,
        instruction=HOSTILE,
        final_observation=HOSTILE,
    )
    lost = Trajectory(hostile.task, steps=hostile.steps, success=False, instruction=HOSTILE)  # a mixed group
    dump = hostile_dir / "rollouts" / "iter_000001.jsonl"  # the last dump: the browser opens on it
    dump.write_text("".join(json.dumps(t.to_json()) + "\n" for t in (hostile, lost)) + dump.read_text())
    with sqlite3.connect(hostile_dir / "failure_memory.sqlite") as db:  # its failure-memory entry, hostile too
        db.execute(
            "INSERT INTO failures (task_id, iteration, dominant_type, critical_step, core_lesson, detail, source,"
            " mode_id, created) VALUES (?, 1, 'loop', 0, ?, '', 'rule', 1, 0)",
            (hostile.task.id, "lesson " + HOSTILE),
        )
    return root, run_dir, hostile_dir


@pytest.fixture(scope="module")
def report(runs):
    root, run_dir, hostile_dir = runs
    return write_report([run_dir, hostile_dir], root / "report.html")  # two overlaid series


def test_chromium_detects_a_script_error(tmp_path):
    """The console check below can fail: a page that throws is caught."""
    page = tmp_path / "bad.html"
    page.write_text("<html><body><script>undefinedFunction();</script></body></html>")
    assert console_errors(chromium(tmp_path, "--dump-dom", page.as_uri()).stderr)


def test_report_runs_in_chromium_with_plots_and_rollout_browser(report, tmp_path):
    result = chromium(tmp_path, "--dump-dom", report.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    assert console_errors(result.stderr) == []
    dom = result.stdout
    assert 'data-ready="1"' in dom  # the browser's script ran to its end
    assert re.search(r'<div id="js-errors"></div>', dom)
    assert dom.count('<svg class="chart"') >= 20  # a curve per metric
    for title in ("train/success", "train/anchor_group_size_mean", "aiw/sampler_entropy", "update/kl"):
        assert f'aria-label="{title}"' in dom, title
    assert "failures recorded per type" in dom  # Agent-In-World's failure modes
    assert dom.count('class="rollout-col') == 2  # a task of the last dump: G = 2 rollouts side by side
    assert "state group #" in dom and "A = " in dom and "(episode " in dom  # what the algorithm computed


def test_hostile_rollout_text_stays_text(runs, tmp_path):
    root, _, hostile_dir = runs
    page = write_report([hostile_dir], root / "hostile.html")  # the browser opens on the hostile group
    result = chromium(tmp_path, "--dump-dom", page.as_uri())
    dom = result.stdout
    assert 'data-ready="1"' in dom and dom.count('class="rollout-col') == 2
    assert dom.count("<script") == 2  # the data block and the browser's own script, nothing injected
    assert "<img" not in dom
    shown = dom[dom.index('id="rb-view"') :]
    assert shown.count("&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;") >= 8  # actions, observations...
    assert "failure memory entries (Agent-In-World) for this task, iteration 1" in shown
    assert "loop @ step 0: lesson &lt;/script&gt;" in shown
    assert console_errors(result.stderr) == []


def test_screenshot_shows_the_plots(report, tmp_path):
    from PIL import Image

    shot = tmp_path / "shot.png"
    result = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,2000", report.as_uri())
    assert shot.exists(), result.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    colours = {colour: n for n, colour in image.getcolors(maxcolors=2**24)}
    blue = colours.get((0x00, 0x72, 0xB2), 0)  # the first run's line colour
    orange = colours.get((0xD5, 0x5E, 0x00), 0)  # the second run's
    assert blue > 200 and orange > 200, (blue, orange)
