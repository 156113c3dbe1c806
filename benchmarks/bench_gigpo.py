"""GiGPO (Feng et al., 2025, arXiv 2505.10978) advantages: vectorised ``roleagent.algos.gigpo_advantages`` vs a loop reference.

The reference is written the way verl-agent's ``gigpo/core_gigpo.py`` computes GiGPO (python
dicts and per-sample loops: ``compute_step_discounted_returns``, ``episode_norm_reward``,
``build_step_group``, ``step_norm_reward``) — our own code, in float64, calling our
``lms_score`` where verl-agent calls ``SequenceMatcher.ratio``. The invalid-action penalty
(0.1) is placed as verl-agent places it (``apply_invalid_action_penalty`` in
``verl/trainer/ppo/ray_trainer.py``): step returns and episode scores are computed from the
raw environment rewards, then the penalty is subtracted from the invalid sample's own step
return and its own episode score; the vectorised side gets raw rewards plus ``penalties``. The batch is ALFWorld-sized:
16 tasks × 8 rollouts × up to 50 steps, with templated, heavily repeated observations
(identical start state per task, revisited receptacles, "Nothing happens.") and
near-duplicates (a receptacle seen again after an object was taken), seeded.

Run: ``python benchmarks/bench_gigpo.py`` (about 10–30 s on one CPU core).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install

from roleagent.algos import build_state_groups, gigpo_advantages, lms_score

N_TASKS, GROUP_SIZE, MAX_STEPS = 16, 8, 50
GAMMA, EPS, THRESHOLD, PENALTY = 0.95, 1e-6, 0.9, 0.1

RECEPTACLES = [
    "cabinet",
    "countertop",
    "drawer",
    "fridge",
    "shelf",
    "sinkbasin",
    "stoveburner",
    "microwave",
    "garbagecan",
    "diningtable",
]
OBJECTS = [
    "apple",
    "bread",
    "butterknife",
    "cup",
    "egg",
    "fork",
    "knife",
    "lettuce",
    "mug",
    "pan",
    "plate",
    "potato",
    "saltshaker",
    "spatula",
    "tomato",
    "spoon",
]
CLOSABLE = {"cabinet", "drawer", "fridge", "microwave"}


def _listing(objs: list[str]) -> str:
    if not objs:
        return "nothing"
    items = [f"a {o}" for o in objs]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f", and {items[-1]}"


def make_batch(seed: int = 0):
    """Flattened step samples of an ALFWorld-like batch: (group_ids, traj_ids, raw env rewards, valid, obs)."""
    rng = np.random.default_rng(seed)
    group_ids, traj_ids, rewards, valid, obs = [], [], [], [], []
    for task in range(N_TASKS):
        recs = [f"{r} {i}" for r in RECEPTACLES for i in range(1, int(rng.integers(1, 4)) + 1)]
        recs = [recs[i] for i in rng.choice(len(recs), size=min(len(recs), 14), replace=False)]
        layout0 = {
            r: [
                f"{o} {int(rng.integers(1, 3))}"
                for o in rng.choice(OBJECTS, size=int(rng.integers(0, 4)), replace=False)
            ]
            for r in recs
        }
        goal = str(rng.choice(OBJECTS))
        start = (
            f"-= Welcome to TextWorld, ALFRED! =- You are in the middle of a room. Looking quickly "
            f"around you, you see {_listing(recs)}. Your task is to: put a clean {goal} in "
            f"{rng.choice(recs)}."
        )
        for k in range(GROUP_SIZE):
            layout = {r: list(v) for r, v in layout0.items()}
            opened: set[str] = set()
            success = rng.random() < 0.4
            length = int(rng.integers(8, MAX_STEPS + 1)) if success else MAX_STEPS
            current, here = start, None
            for t in range(length):
                group_ids.append(f"task{task}")
                traj_ids.append(f"task{task}/rollout{k}")
                obs.append(current)  # the state the action is taken in
                is_valid = rng.random() > 0.1
                valid.append(is_valid)
                rewards.append(10.0 if success and t == length - 1 else 0.0)
                u = rng.random()
                if not is_valid or u < 0.12:
                    current = "Nothing happens."
                elif here is not None and u < 0.35 and layout[here] and (here not in CLOSABLE or here in opened):
                    item = layout[here].pop(int(rng.integers(len(layout[here]))))
                    current = f"You pick up the {item} from the {here}."
                elif here is not None and u < 0.45 and here.split()[0] in CLOSABLE and here not in opened:
                    opened.add(here)
                    current = f"You open the {here}. The {here} is open. In it, you see {_listing(layout[here])}."
                else:
                    here = recs[int(rng.integers(min(len(recs), 6)))]  # agents revisit a few places
                    if here.split()[0] in CLOSABLE and here not in opened:
                        current = f"You arrive at {here}. The {here} is closed."
                    else:
                        current = f"You arrive at {here}. On the {here}, you see {_listing(layout[here])}."
    return np.array(group_ids), np.array(traj_ids), np.array(rewards), np.array(valid), obs


# ----------------------------- loop reference (verl-agent style) -----------------------------


def ref_step_returns(traj_ids, rewards, gamma):
    out = np.zeros(len(rewards))
    for uid in np.unique(traj_ids):
        locs = np.where(traj_ids == uid)[0]
        running = 0.0
        for loc in reversed(locs):
            running = rewards[loc] + gamma * running
            out[loc] = running
    return out


def ref_episode_scores(traj_ids, rewards):
    totals = defaultdict(float)
    for uid, r in zip(traj_ids, rewards):
        totals[uid] += r
    return np.array([totals[uid] for uid in traj_ids])


def ref_apply_invalid_penalty(step_returns, scores, valid):
    """verl-agent: −penalty on the invalid sample's own step return and own episode score."""
    step_returns, scores = step_returns.copy(), scores.copy()
    for i in range(len(valid)):
        if not valid[i]:
            step_returns[i] -= PENALTY
            scores[i] -= PENALTY
    return step_returns, scores


def ref_episode_norm(scores, index, remove_std):
    id2score = defaultdict(list)
    for i in range(len(scores)):
        id2score[index[i]].append(scores[i])  # every step sample counts
    id2mean, id2std = {}, {}
    for idx, vals in id2score.items():
        if len(vals) == 1:
            id2mean[idx], id2std[idx] = 0.0, 1.0
        else:
            id2mean[idx], id2std[idx] = float(np.mean(vals)), float(np.std(vals, ddof=1))
    out = np.zeros(len(scores))
    for i in range(len(scores)):
        d = scores[i] - id2mean[index[i]]
        out[i] = d if remove_std else d / (id2std[index[i]] + EPS)
    return out


def ref_build_step_group(anchor_obs, index, threshold):
    uids = np.empty(len(anchor_obs), dtype=object)
    for idx in np.unique(index):
        locs = np.where(index == idx)[0]
        if threshold is None:
            clusters = defaultdict(list)
            for loc in locs:
                clusters[anchor_obs[loc]].append(loc)
            for key, members in clusters.items():
                for loc in members:
                    uids[loc] = (idx, key)
        else:
            clusters = []  # [{"rep": str, "locs": [...]}], greedy, first member is the rep
            for loc in locs:
                for cluster in clusters:
                    if lms_score(anchor_obs[loc], cluster["rep"]) >= threshold:
                        cluster["locs"].append(loc)
                        break
                else:
                    clusters.append({"rep": anchor_obs[loc], "locs": [loc]})
            for c, cluster in enumerate(clusters):
                for loc in cluster["locs"]:
                    uids[loc] = (idx, c)
    return uids


def ref_step_norm(values, step_uids, remove_std):
    id2score = defaultdict(list)
    for i in range(len(values)):
        id2score[step_uids[i]].append(values[i])
    id2mean, id2std = {}, {}
    for uid, vals in id2score.items():
        id2mean[uid] = float(np.mean(vals))
        id2std[uid] = 1.0 if len(vals) == 1 else float(np.std(vals, ddof=1))
    out = np.zeros(len(values))
    for i in range(len(values)):
        d = values[i] - id2mean[step_uids[i]]
        out[i] = d if remove_std else d / (id2std[step_uids[i]] + EPS)
    return out


def ref_gigpo(group_ids, traj_ids, rewards, valid, obs, mode, threshold):
    remove_std = mode == "mean_norm"
    step_returns, scores = ref_apply_invalid_penalty(
        ref_step_returns(traj_ids, rewards, GAMMA), ref_episode_scores(traj_ids, rewards), valid
    )
    episode = ref_episode_norm(scores, group_ids, remove_std)
    step_uids = ref_build_step_group(obs, group_ids, threshold)
    step = ref_step_norm(step_returns, step_uids, remove_std)
    return episode + 1.0 * step


# ----------------------------------------- driver -----------------------------------------


def _best_of(fn, repeats):
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # --help; no options
    group_ids, traj_ids, rewards, valid, obs = make_batch(seed=0)
    penalties = PENALTY * ~valid
    n = len(rewards)
    print(
        f"batch: {N_TASKS} groups x {GROUP_SIZE} rollouts, {n} step samples, "
        f"{len(set(obs))} distinct observations, gamma={GAMMA}"
    )
    rows = []
    for label, thr in (("exact", None), (f"sim>={THRESHOLD}", THRESHOLD)):
        anchors = build_state_groups(group_ids, obs, similarity_threshold=thr)
        n_anchor = int(anchors.max()) + 1
        singletons = int(np.sum(np.bincount(anchors) == 1))
        for mode in ("mean_std_norm", "mean_norm"):
            ref_t, ref = _best_of(
                lambda mode=mode, thr=thr: ref_gigpo(group_ids, traj_ids, rewards, valid, obs, mode, thr),
                1 if thr else 3,
            )
            vec_t, vec = _best_of(
                lambda mode=mode, thr=thr: gigpo_advantages(
                    group_ids,
                    traj_ids,
                    rewards,
                    obs,
                    penalties=penalties,
                    gamma=GAMMA,
                    mode=mode,
                    similarity_threshold=thr,
                ),
                5,
            )
            assert np.allclose(vec, ref, atol=1e-6, rtol=0.0), f"{label}/{mode}: mismatch"
            rows.append((label, mode, n_anchor, singletons, ref_t, vec_t, float(np.max(np.abs(vec - ref)))))
    header = ("anchors", "mode", "groups", "single", "loop ms", "vector ms", "speed-up", "max|diff|")
    print("{:<9} {:<14} {:>6} {:>6} {:>9} {:>9} {:>8} {:>9}".format(*header))
    for label, mode, n_anchor, singles, ref_t, vec_t, diff in rows:
        print(
            f"{label:<9} {mode:<14} {n_anchor:>6} {singles:>6} {ref_t * 1e3:>9.1f} {vec_t * 1e3:>9.1f} "
            f"{ref_t / vec_t:>7.1f}x {diff:>9.1e}"
        )
    print("all values identical to the loop reference (np.allclose, atol 1e-6)")


if __name__ == "__main__":
    main()
