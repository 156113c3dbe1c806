"""Progress on the long steps (issue 27, item 4): a phase line, then a tqdm bar with its
count, rate and ETA, on stderr, for SFT epochs, the expert's play, ``eval --policy expert``
and ``export``; nothing on stdout, and nothing at all in quiet mode."""

from __future__ import annotations

import re

from roleagent import cli
from roleagent.sft.data import write_examples
from tests.run_helpers import run
from tests.test_sft import conversation

TINY_SFT = ["model.name=tiny", "model.device=cpu", "threads=1", "sft.epochs=2", "sft.batch_examples=2"]


def _sets(items: list[str]) -> list[str]:
    return [a for item in items for a in ("--set", item)]


def test_sft_epochs_show_a_phase_line_and_a_bar(tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    write_examples(data, [conversation()] * 3 + [conversation((False, True, False))] * 2)
    assert cli.main(["sft", "--data", str(data), "--out", str(tmp_path / "out"), *_sets(TINY_SFT)]) == 0
    out, err = capsys.readouterr()
    assert "SFT: 5 examples, 2 epochs × 3 steps\n" in err
    assert re.search(r"SFT epoch 2/2: +\d+%\|.*\| \d/5 \[[\d:]+<[\d:?]+, +[\d.?]+ ?ex/s", err), err  # count, ETA, rate
    assert "SFT epoch" not in out and "SFT checkpoint:" in out


def test_library_sft_is_quiet_by_default(tmp_path, capsys):
    from roleagent.config import load_config
    from roleagent.engine import create_engine
    from roleagent.models.loading import load_policy
    from roleagent.sft.data import encode_example
    from roleagent.sft.train import train_sft

    policy = load_policy("tiny", device="cpu", lora_rank=0, seed=0)
    encoded = [encode_example(create_engine("hf", policy), conversation())]
    capsys.readouterr()
    train_sft(policy, encoded, tmp_path / "out", cfg=load_config(None, TINY_SFT).sft)
    out, err = capsys.readouterr()  # (transformers' own save_pretrained bar aside)
    assert out == "" and "SFT" not in err


def test_expert_play_shows_a_phase_line_and_a_bar(tmp_path, capsys):
    sets = _sets(["model.name=tiny", "model.device=cpu", "env.processes=false", "threads=1"])
    args = ["expert-data", "scripted", "--tasks", "3", "--workers", "2", "--out", str(tmp_path / "x.jsonl")]
    assert cli.main([*args, *sets]) == 0
    err = capsys.readouterr().err
    assert re.search(r"expert: 3 training tasks, 2 at a time, up to \d+ turns each\n", err), err
    assert re.search(r"expert: +\d+%\|.*\| \d+/16 \[[\d:]+<[\d:?]+, +[\d.?]+ ?turn/s", err), err  # 2 waves × 8


def test_expert_evaluation_shows_a_phase_line_and_a_bar(capsys):
    args = ["eval", "--env", "scripted", "--policy", "expert", "--workers", "2", "--set", "env.processes=false"]
    assert cli.main(args) == 0
    out, err = capsys.readouterr()
    phase = re.search(r"expert on eval: (\d+) tasks, 2 at a time, up to (\d+) turns each\n", err)
    assert phase, err
    total = -(-int(phase.group(1)) // 2) * int(phase.group(2))  # waves × turns
    assert re.search(rf"eval: +\d+%\|.*\| \d+/{total} \[[\d:]+<[\d:?]+, +[\d.?]+ ?turn/s", err), err
    assert "expert eval" in out and "turn/s" not in out


def test_export_shows_a_phase_line_and_a_bar(tmp_path, capsys):
    run(tmp_path / "run", 1, ["eval.at_start=false"])
    capsys.readouterr()
    assert cli.main(["export", str(tmp_path / "run"), "--merge-lora", "--out", str(tmp_path / "out")]) == 0
    out, err = capsys.readouterr()
    # the phase line names the checkpoint "latest" resolved to
    line = f" (latest) of {tmp_path / 'run'} (tiny, merged, fp32) to {tmp_path / 'out'}\n"
    assert re.search(r"export: iter_\d{6}" + re.escape(line), err), err
    assert re.search(r"export: +\d+%\|.*\| \d/3 \[", err), err
    assert out.startswith("exported: ")
