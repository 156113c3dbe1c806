"""GiGPO advantages with verl-agent's conventions, and state (anchor) grouping."""

import math
from collections import defaultdict

import numpy as np
import pytest

from roleagent.algos import build_state_groups, gigpo_advantages, lms_score, state_advantages

EPS = 1e-6


def _worked_example(mode):
    # group g, γ = 0.5: trajectory a = states [s0, s1], rewards [0, 1]; b = [s0], [0]
    return gigpo_advantages(["g"] * 3, ["a", "a", "b"], [0, 1, 0], ["s0", "s1", "s0"], gamma=0.5, mode=mode)


def test_worked_example_mean_norm():
    # episode: samples [1, 1, 0], mean 2/3 → [1/3, 1/3, -2/3]
    # returns a → [0.5, 1.0], b → [0.0]; anchor s0 = {0.5, 0.0} mean 0.25 → ±0.25; s1 singleton → 0
    np.testing.assert_allclose(_worked_example("mean_norm"), [1 / 3 + 0.25, 1 / 3, -2 / 3 - 0.25])


def test_worked_example_mean_std_norm():
    # episode std over samples [1, 1, 0] = sqrt(1/3); anchor s0 std over [0.5, 0] = sqrt(0.125)
    e = math.sqrt(1 / 3) + EPS
    s = math.sqrt(0.125) + EPS
    expected = [(1 / 3) / e + 0.25 / s, (1 / 3) / e, (-2 / 3) / e - 0.25 / s]
    np.testing.assert_allclose(_worked_example("mean_std_norm"), expected)
    # 0.5774 + 0.7071, 0.5774, -1.1547 - 0.7071
    np.testing.assert_allclose(expected, [1.2845, 0.5773, -1.8618], atol=1e-4)


def test_step_weight_scales_only_step_branch():
    args = (["g"] * 3, ["a", "a", "b"], [0, 1, 0], ["s0", "s1", "s0"])
    base = gigpo_advantages(*args, gamma=0.5, mode="mean_norm", step_weight=0.0)
    np.testing.assert_allclose(base, [1 / 3, 1 / 3, -2 / 3])
    two = gigpo_advantages(*args, gamma=0.5, mode="mean_norm", step_weight=2.0)
    np.testing.assert_allclose(two, [1 / 3 + 0.5, 1 / 3, -2 / 3 - 0.5])


def test_all_equal_rewards_give_zero():
    # 3 trajectories, same rewards and same states → every statistic is flat
    out = gigpo_advantages([0] * 6, [1, 1, 2, 2, 3, 3], [0, 1] * 3, ["x", "y"] * 3)
    np.testing.assert_allclose(out, 0.0, atol=1e-9)


def test_singleton_anchor_gets_zero_step_advantage():
    # two trajectories, all states different → only the episode term remains
    out = gigpo_advantages([0] * 4, [1, 1, 2, 2], [0, 1, 0, 0], ["a", "b", "c", "d"], mode="mean_norm")
    np.testing.assert_allclose(out, [0.5, 0.5, -0.5, -0.5])


def test_anchor_pools_time_steps_but_not_episode_groups():
    # state "s" at t=0 of a and t=1 of b (same group) is one anchor; group h has "s" too
    # but is separate. γ = 1: returns a=[1,1], b=[0,0], c=[3].
    anchors = build_state_groups(["g", "g", "g", "g", "h"], ["s", "u", "v", "s", "s"])
    assert anchors[0] == anchors[3] and anchors[4] != anchors[0]
    assert len(set(anchors.tolist())) == 4
    out = gigpo_advantages(
        ["g", "g", "g", "g", "h"],
        ["a", "a", "b", "b", "c"],
        [0, 1, 0, 0, 3],
        ["s", "u", "v", "s", "s"],
        gamma=1.0,
        mode="mean_norm",
    )
    # episode g: samples [1, 1, 0, 0] → ±0.5; h singleton sample → 3 - 0 = 3
    # step anchor s in g: a0 return 1, b1 return 0 → ±0.5
    np.testing.assert_allclose(out, [1.0, 0.5, -0.5, -1.0, 3.0])


def test_invalid_penalty_changes_step_returns():
    from roleagent.algos import apply_invalid_penalty

    r = apply_invalid_penalty([0, 1, 0, 1], [True, True, False, True])  # b0 → -0.1
    out = gigpo_advantages([0] * 4, ["a", "a", "b", "b"], r, ["s", "t", "s", "t"], gamma=1.0, mode="mean_norm")
    # episode: scores a 1, b 0.9 → samples [1,1,.9,.9] mean .95 → ±0.05
    # anchor s: returns a0 = 1, b0 = 0.9 → ±0.05; anchor t: 1, 1 → 0
    np.testing.assert_allclose(out, [0.1, 0.05, -0.1, -0.05])


def test_invalid_penalty_step_placement_as_verl_agent():
    # raw rewards a = [0, 1], b = [0, 1]; b0 invalid (penalty 0.1); γ = 1, mean_norm.
    # verl-agent: returns and episode scores from raw rewards, then −0.1 on b0's own return
    # and b0's own episode score. Episode samples [1, 1, 0.9, 1], mean 0.975 →
    # [0.025, 0.025, −0.075, 0.025]; anchor s: returns a0 = 1, b0 = 1 − 0.1 → ±0.05; t: 0.
    args = ([0] * 4, ["a", "a", "b", "b"], [0, 1, 0, 1], ["s", "t", "s", "t"])
    p = [0, 0, 0.1, 0]
    out = gigpo_advantages(*args, penalties=p, gamma=1.0, mode="mean_norm")
    np.testing.assert_allclose(out, [0.075, 0.025, -0.125, 0.025])
    # the folded placement reproduces the old numbers (penalty inside b's reward)
    out = gigpo_advantages(*args, penalties=p, penalty_placement="reward", gamma=1.0, mode="mean_norm")
    np.testing.assert_allclose(out, [0.1, 0.05, -0.1, -0.05])


def test_step_penalty_is_not_discounted_into_earlier_steps():
    from roleagent.algos import penalised_step_values

    # rewards [0, 1], penalties [0, 0.1], γ = 0.5 (docstring example)
    ret, score = penalised_step_values(["a", "a"], [0, 1], [0, 0.1], gamma=0.5)
    np.testing.assert_allclose(ret, [0.5, 0.9])
    np.testing.assert_allclose(score, [1.0, 0.9])
    ret, score = penalised_step_values(["a", "a"], [0, 1], [0, 0.1], gamma=0.5, placement="reward")
    np.testing.assert_allclose(ret, [0.45, 0.9])
    np.testing.assert_allclose(score, [0.9, 0.9])


def test_interleaved_batch_equals_consecutive_batch():
    # worked example: a = [s0, s1] rewards [0, 1]; b = [s0] reward [0]; γ = 0.5, mean_norm
    # consecutive order a0, a1, b0 → [0.5833, 0.3333, -0.9167]; step-major a0, b0, a1 → permuted
    out = gigpo_advantages([0, 0, 0], ["a", "b", "a"], [0, 0, 1], ["s0", "s0", "s1"], gamma=0.5, mode="mean_norm")
    np.testing.assert_allclose(out, [0.25 + 1 / 3, -0.25 - 2 / 3, 1 / 3])
    # a ragged random batch, consecutive vs step-major (t = 0 of every episode, then t = 1, ...)
    rng = np.random.default_rng(3)
    g, t, r, st, pen = [], [], [], [], []
    for task in range(3):
        for k in range(4):
            for _ in range(int(rng.integers(1, 7))):
                g.append(f"g{task}"), t.append(f"g{task}/{k}"), r.append(float(rng.integers(0, 2)))
                st.append(f"s{int(rng.integers(0, 3))}"), pen.append(0.1 * (rng.random() < 0.3))
    pos = np.array([t[:i].count(t[i]) for i in range(len(t))])
    perm = np.lexsort((np.arange(len(t)), pos))  # step-major, episodes in batch order
    arrays = [np.array(x, dtype=object if isinstance(x[0], str) else float) for x in (g, t, r, st, pen)]
    for mode in ("mean_norm", "mean_std_norm"):
        base = gigpo_advantages(*arrays[:4], penalties=arrays[4], gamma=0.9, mode=mode)
        mixed = gigpo_advantages(*(a[perm] for a in arrays[:4]), penalties=arrays[4][perm], gamma=0.9, mode=mode)
        np.testing.assert_allclose(mixed, base[perm], rtol=0, atol=1e-12)


def test_similarity_clustering_merges_near_identical_states():
    s1 = "You are in the middle of a room. You see a cabinet 1 and a sofa 1"  # 18 tokens
    s2 = "you are in the middle of a room . you see a cabinet 2 and a sofa 1"  # one token differs
    s3 = "nothing happens ."
    # lms(s1, s2) = 2·17/36 = 0.9444 (case and the space before "." do not matter)
    assert lms_score(s1, s2) == pytest.approx(34 / 36)
    exact = build_state_groups([0, 0, 0], [s1, s2, s3])
    sim = build_state_groups([0, 0, 0], [s1, s2, s3], similarity_threshold=0.9)
    assert len(set(exact.tolist())) == 3
    assert sim[0] == sim[1] != sim[2]
    strict = build_state_groups([0, 0, 0], [s1, s2, s3], similarity_threshold=0.95)
    assert len(set(strict.tolist())) == 3
    # effect on advantages: a = [s1], reward 1; b = [s2], reward 0 (γ irrelevant)
    out = gigpo_advantages([0, 0], ["a", "b"], [1, 0], [s1, s2], mode="mean_norm", similarity_threshold=0.9)
    # episode ±0.5 plus step ±0.5 because s1 and s2 now share an anchor
    np.testing.assert_allclose(out, [1.0, -1.0])
    out = gigpo_advantages([0, 0], ["a", "b"], [1, 0], [s1, s2], mode="mean_norm")
    np.testing.assert_allclose(out, [0.5, -0.5])


def test_similarity_threshold_is_inclusive():
    # 10 vs 10 tokens, 9 shared → exactly 0.9 → joins at threshold 0.9
    a = "a b c d e f g h i j"
    b = "a b c d e f g h i k"
    assert lms_score(a, b) == 0.9
    codes = build_state_groups(["g", "g"], [a, b], similarity_threshold=0.9)
    assert codes[0] == codes[1]


def test_greedy_first_member_is_representative():
    # A~B and B~C but not A~C: order A, B, C → {A, B}, {C} (C is compared with rep A only)
    a = "w1 w2 w3 w4 w5 w6 w7 w8 w9 w10"
    b = "w1 w2 w3 w4 w5 w6 w7 w8 w9 x10"
    c = "w1 w2 w3 w4 w5 w6 w7 w8 x9 x10"
    assert lms_score(a, b) >= 0.9 and lms_score(b, c) >= 0.9 and lms_score(a, c) < 0.9
    codes = build_state_groups([0, 0, 0], [a, b, c], similarity_threshold=0.9)
    assert codes[0] == codes[1] and codes[2] != codes[0]
    # order B, A, C: rep B absorbs A and C
    codes = build_state_groups([0, 0, 0], [b, a, c], similarity_threshold=0.9)
    assert codes[0] == codes[1] == codes[2]


def test_similarity_mode_requires_text_states():
    with pytest.raises(ValueError, match="str"):
        build_state_groups([0, 0], [1, 2], similarity_threshold=0.9)
    with pytest.raises(ValueError, match="threshold"):
        build_state_groups([0, 0], ["a", "b"], similarity_threshold=1.5)


def test_state_advantages_singletons_and_std():
    out = state_advantages([1.0, 3.0, 7.0], np.array([0, 0, 1]), eps=0.0)
    np.testing.assert_allclose(out, [-1 / math.sqrt(2), 1 / math.sqrt(2), 0.0])


def _reference_gigpo(group_ids, traj_ids, rewards, states, gamma, mode, thr):
    """Small per-sample loop version of verl-agent's functions, for a randomised check."""
    n = len(rewards)
    scores = defaultdict(float)
    for t, r in zip(traj_ids, rewards):
        scores[t] += r
    ep = [scores[t] for t in traj_ids]
    by_group = defaultdict(list)
    for i in range(n):
        by_group[group_ids[i]].append(i)
    a_ep = [0.0] * n
    for idx in by_group.values():
        vals = [ep[i] for i in idx]
        m, sd = (0.0, 1.0) if len(vals) == 1 else (np.mean(vals), np.std(vals, ddof=1))
        for i in idx:
            a_ep[i] = ep[i] - m if mode == "mean_norm" else (ep[i] - m) / (sd + EPS)
    ret = [0.0] * n
    for t in set(traj_ids):
        idx = [i for i in range(n) if traj_ids[i] == t]
        run = 0.0
        for i in reversed(idx):
            run = rewards[i] + gamma * run
            ret[i] = run
    anchor = {}
    for g, idx in by_group.items():
        reps = []
        for i in idx:
            for k, rep in enumerate(reps):
                if (thr is None and states[i] == rep) or (thr is not None and lms_score(states[i], rep) >= thr):
                    anchor[i] = (g, k)
                    break
            else:
                anchor[i] = (g, len(reps))
                reps.append(states[i])
    members = defaultdict(list)
    for i in range(n):
        members[anchor[i]].append(i)
    a_st = [0.0] * n
    for idx in members.values():
        vals = [ret[i] for i in idx]
        m, sd = (vals[0], 1.0) if len(vals) == 1 else (np.mean(vals), np.std(vals, ddof=1))
        for i in idx:
            a_st[i] = ret[i] - m if mode == "mean_norm" else (ret[i] - m) / (sd + EPS)
    return np.array(a_ep) + np.array(a_st)


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
@pytest.mark.parametrize("thr", [None, 0.8])
def test_matches_loop_reference_on_random_batch(mode, thr):
    rng = np.random.default_rng(1)
    vocab = ["room a b c d", "room a b c e", "nothing happens", "kitchen x y z w", "kitchen x y z q", "done"]
    group_ids, traj_ids, rewards, states = [], [], [], []
    for g in range(4):
        for k in range(int(rng.integers(1, 5))):
            for _ in range(int(rng.integers(1, 7))):
                group_ids.append(f"g{g}")
                traj_ids.append(f"g{g}t{k}")
                rewards.append(float(rng.choice([0.0, 0.0, 1.0, -0.1])))
                states.append(str(rng.choice(vocab)))
    out = gigpo_advantages(group_ids, traj_ids, rewards, states, gamma=0.9, mode=mode, similarity_threshold=thr)
    ref = _reference_gigpo(group_ids, traj_ids, rewards, states, 0.9, mode, thr)
    np.testing.assert_allclose(out, ref, atol=1e-9)
