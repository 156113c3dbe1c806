"""The LM head's product on a prefill's last positions: a strided slice against a gathered copy.

``model(..., logits_to_keep=1)`` slices the hidden states of a (B, S, H) prefill to
``hidden[:, -1:, :]``, a (B, 1, H) view with strides (S·H, H, 1). torch's ``matmul`` can fold a
3-d input into one matrix product only when its leading dimensions are contiguous, which this
view's are not (S·H ≠ H); it then runs a batched product, with the (V, H) weight expanded to
each of the B rows. On the CPU in bf16 that batched product copies the weight per row and is
slow; in fp32 it is slower than one product, without the copy. ``roleagent`` keeps the last
position by index (``logits_to_keep=torch.tensor([S - 1])``), which gathers a contiguous
(B, 1, H) (``roleagent.engine.hf.HFEngine._forward``).

For each dtype and batch this prints the time and the resident memory the product adds at its
peak (a thread sampling ``/proc/self/statm`` every 0.2 ms), for the view and for the gathered
copy, side by side, and whether their logits are equal to the bit. The weight has the shape of
SmolLM2-135M's tied LM head (49,152 × 576), random values. One torch thread unless ``--threads``.

    python benchmarks/probe_lm_head_view.py [--dtypes bfloat16 float32] [--rows 1 4 16 32] [--width 300]
"""

from __future__ import annotations

import argparse
import threading
import time

import torch

from roleagent.trainer.memory import resident_mb


class PeakSampler:
    """The highest resident memory seen since :meth:`reset`, sampled on a daemon thread."""

    def __init__(self, interval: float = 0.0002):
        self.interval, self.peak = interval, 0.0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            self.peak = max(self.peak, resident_mb() or 0.0)
            time.sleep(self.interval)

    def reset(self) -> float:
        time.sleep(0.05)  # let the thread see the current level
        self.peak = start = resident_mb() or 0.0
        return start


def measure(weight: torch.Tensor, hidden: torch.Tensor, sampler: PeakSampler, gathered: bool):
    """(seconds, MiB added at the peak, logits) of the head on the last position of ``hidden``."""
    width = hidden.shape[1]
    last = hidden[:, torch.tensor([width - 1]), :] if gathered else hidden[:, -1:, :]
    start = sampler.reset()
    began = time.perf_counter()
    logits = torch.nn.functional.linear(last, weight)
    seconds = time.perf_counter() - began
    time.sleep(0.05)
    return seconds, sampler.peak - start, logits


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"])
    parser.add_argument("--rows", nargs="+", type=int, default=[1, 4, 16, 32])
    parser.add_argument("--width", type=int, default=300, help="prefill width S (tokens)")
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--hidden", type=int, default=576)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    sampler = PeakSampler()
    print(f"LM head {args.vocab} x {args.hidden}, prefill width {args.width}, {torch.get_num_threads()} thread(s)")
    print("| dtype | rows | strided view: s, MiB added | gathered: s, MiB added | view / gathered time | equal |")
    print("|---|---|---|---|---|---|")
    with torch.no_grad():
        for name in args.dtypes:
            dtype = getattr(torch, name)
            weight = torch.randn(args.vocab, args.hidden, dtype=dtype) * 0.05
            measure(weight, torch.randn(2, 8, args.hidden, dtype=dtype), sampler, True)  # warm-up
            for rows in args.rows:
                hidden = torch.randn(rows, args.width, args.hidden, dtype=dtype)
                view_s, view_mb, view = measure(weight, hidden, sampler, gathered=False)
                copy_s, copy_mb, copy = measure(weight, hidden, sampler, gathered=True)
                print(
                    f"| {name} | {rows} | {view_s:.3f}, {view_mb:.0f} | {copy_s:.3f}, {copy_mb:.0f} "
                    f"| {view_s / copy_s:.1f} | {torch.equal(view, copy)} |"
                )


if __name__ == "__main__":
    main()
