"""Progress on the long steps: a phase line saying what is about to run, then a tqdm bar
(count, rate, ETA), both on stderr, neither in quiet mode (``Trainer(quiet=True)``, ranks
other than 0 of a data-parallel run, library calls that do not ask for them).

Used by SFT epochs (``SFT: 356 examples, 2 epochs × 89 steps``, a bar in examples per
epoch), the expert's play (SFT data, ``roleagent expert-data``, ``roleagent sft``),
``roleagent eval --policy expert`` and ``roleagent export`` (a bar over its stages); the
training loop's rollout and evaluation bars are the trainer's own (``Trainer._progress``).
"""

from __future__ import annotations

import sys

from tqdm.auto import tqdm


def phase(line: str, *, quiet: bool = False) -> None:
    """One line announcing a long step (its size), on stderr."""
    if not quiet:
        print(line, file=sys.stderr, flush=True)


def bar(total: int, desc: str, unit: str, *, quiet: bool = False) -> tqdm:
    """A tqdm bar on stderr (disabled when ``quiet``), removed when it closes."""
    return tqdm(total=total, desc=desc, unit=unit, disable=quiet, file=sys.stderr, leave=False, dynamic_ncols=True)
