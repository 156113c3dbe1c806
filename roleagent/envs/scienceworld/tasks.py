"""The ScienceWorld task catalog (Wang et al., 2022, arXiv 2203.07540), without a JVM.

ScienceWorld has 30 task types in 10 curriculum topics. Each type has numbered
variations; the simulator splits them into contiguous train / dev / test ranges
(``get_variations_train/dev/test``). Those ranges are copied here so that listing tasks
(the trainer's and ``EnvPool.meta``'s job) starts no Java process; a slow test checks
them against the simulator of the pinned package (``scienceworld==1.2.3``).

A task id is ``scienceworld/<task name>/<variation>``, e.g. ``scienceworld/boil/21``.
``task_type`` is the task's topic (7 distinct: Matter, Measurement, Electricity,
Classification, Biology, Chemistry, Forces), so tables have a readable number of
columns; ``metadata["task_name"]`` and ``metadata["task_num"]`` ("1-1") keep the fine
type.

Order of a split: round-robin over the 30 task types in the paper's numbering, the
k-th variation (in increasing order) of every type before any (k+1)-th. So the first 30
tasks of any split are one variation per type, the first 60 two per type (while every
type has two), and ``panel(tasks, max_tasks)`` is a balanced panel.
"""

from __future__ import annotations

import hashlib

from roleagent.types import Task

# task name -> (first dev variation, first test variation, number of variations), in the
# paper's task numbering (1-1 ... 10-2). Train is [0, dev), dev [dev, test), test [test, n).
VARIATION_RANGES: dict[str, tuple[int, int, int]] = {
    "boil": (14, 21, 30),
    "melt": (14, 21, 30),
    "freeze": (14, 21, 30),
    "change-the-state-of-matter-of": (14, 21, 30),
    "use-thermometer": (270, 405, 540),
    "measure-melting-point-known-substance": (218, 327, 436),
    "measure-melting-point-unknown-substance": (150, 225, 300),
    "power-component": (10, 15, 20),
    "power-component-renewable-vs-nonrenewable-energy": (10, 15, 20),
    "test-conductivity": (450, 675, 900),
    "test-conductivity-of-unknown-substances": (300, 450, 600),
    "find-living-thing": (150, 225, 300),
    "find-non-living-thing": (150, 225, 300),
    "find-plant": (150, 225, 300),
    "find-animal": (150, 225, 300),
    "grow-plant": (62, 93, 126),
    "grow-fruit": (62, 93, 126),
    "chemistry-mix": (16, 24, 32),
    "chemistry-mix-paint-secondary-color": (18, 27, 36),
    "chemistry-mix-paint-tertiary-color": (18, 27, 36),
    "lifespan-longest-lived": (62, 93, 125),
    "lifespan-shortest-lived": (62, 93, 125),
    "lifespan-longest-lived-then-shortest-lived": (62, 93, 125),
    "identify-life-stages-1": (6, 9, 14),
    "identify-life-stages-2": (4, 6, 10),
    "inclined-plane-determine-angle": (84, 126, 168),
    "inclined-plane-friction-named-surfaces": (692, 1038, 1386),
    "inclined-plane-friction-unnamed-surfaces": (80, 120, 162),
    "mendelian-genetics-known-plant": (60, 90, 120),
    "mendelian-genetics-unknown-plant": (240, 360, 480),
}
TASK_NAMES: tuple[str, ...] = tuple(VARIATION_RANGES)

# Topic per task number prefix (the paper's Table 1 groups).
TOPICS = {
    "1": "Matter",
    "2": "Measurement",
    "3": "Electricity",
    "4": "Classification",
    "5": "Biology",
    "6": "Chemistry",
    "7": "Biology",
    "8": "Biology",
    "9": "Forces",
    "10": "Biology",
}
TOPIC_ORDER = ("Matter", "Measurement", "Electricity", "Classification", "Biology", "Chemistry", "Forces")
# Task number ("1-1") per task name, in the order above.
TASK_NUMS: dict[str, str] = {
    name: num
    for name, num in zip(
        TASK_NAMES,
        ["1-1", "1-2", "1-3", "1-4", "2-1", "2-2", "2-3", "3-1", "3-2", "3-3", "3-4", "4-1", "4-2", "4-3", "4-4"]
        + ["5-1", "5-2", "6-1", "6-2", "6-3", "7-1", "7-2", "7-3", "8-1", "8-2", "9-1", "9-2", "9-3", "10-1", "10-2"],
    )
}
SPLITS = ("train", "dev", "test")
SPLIT_ALIASES = {"eval": "test"}


def variations(task_name: str, split: str) -> range:
    """Variation numbers of ``task_name`` in ``split``, e.g. ``variations("boil", "test")``
    is ``range(21, 30)`` (9 variations)."""
    dev, test, n = VARIATION_RANGES[task_name]
    return {"train": range(0, dev), "dev": range(dev, test), "test": range(test, n)}[split]


def resolve_split(split: str) -> str:
    split = SPLIT_ALIASES.get(split, split)
    if split not in SPLITS:
        raise KeyError(f"unknown split {split!r}; ScienceWorld splits: {SPLITS} (alias: eval = test)")
    return split


def catalog(split: str, task_names: tuple[str, ...] = TASK_NAMES, env: str = "scienceworld") -> list[Task]:
    """The tasks of ``split`` in round-robin order (see the module docstring)."""
    split = resolve_split(split)
    unknown = sorted(set(task_names) - set(TASK_NAMES))
    if unknown:
        raise ValueError(f"unknown ScienceWorld tasks {unknown}; known: {list(TASK_NAMES)}")
    names = [n for n in TASK_NAMES if n in set(task_names)]  # the paper's order, always
    per_task = {n: list(variations(n, split)) for n in names}
    out: list[Task] = []
    for rank in range(max(len(v) for v in per_task.values())):
        for name in names:
            if rank < len(per_task[name]):
                out.append(_task(name, per_task[name][rank], split, env))
    return out


def _task(name: str, variation: int, split: str, env: str) -> Task:
    num = TASK_NUMS[name]
    return Task(
        id=f"scienceworld/{name}/{variation}",
        env=env,
        split=split,
        payload={"task_name": name, "variation": variation},
        metadata={"task_type": TOPICS[num.split("-")[0]], "task_name": name, "task_num": num},
    )


def panel_hash(tasks: list[Task]) -> str:
    """sha256 of the task ids, one per line in panel order: the panel's fingerprint (the
    games themselves are the pinned jar's)."""
    return hashlib.sha256("\n".join(t.id for t in tasks).encode()).hexdigest()
