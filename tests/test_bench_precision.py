"""The precision benchmark (benchmarks/bench_precision.py) on the tiny model: its training
rows carry the loss on the command only, and a run prints every ratio it promises."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_precision  # noqa: E402

from roleagent.engine import create_engine  # noqa: E402
from roleagent.models.loading import load_policy  # noqa: E402


def test_command_rows_are_left_padded_with_the_loss_on_the_command_only():
    engine = create_engine("hf", load_policy("tiny"), max_batch=2)
    ids, mask, labels = bench_precision.command_batch(engine, [[5, 6, 7], [8]], [[9, 10], [11, 12, 13]])
    pad = engine.tokenizer.pad_token_id
    assert ids.tolist() == [[5, 6, 7, 9, 10], [pad, 8, 11, 12, 13]]
    assert mask.tolist() == [[1, 1, 1, 1, 1], [0, 1, 1, 1, 1]]
    assert labels.tolist() == [[-100, -100, -100, 9, 10], [-100, -100, 11, 12, 13]]


def test_a_run_prints_each_phase_ratio_and_what_bf16_changed(capsys):
    bench_precision.main(["--model", "tiny", "--batch", "3", "--repeats", "1"])
    out = capsys.readouterr().out
    for phase in ("greedy step", "sampled step", "train step"):
        assert f"bf16 / fp32 time, {phase} = " in out
    assert "greedy commands equal in bf16 and fp32: " in out and "/3" in out
    assert "computes bf16 natively: " in out and "max " in out
