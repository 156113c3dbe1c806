"""Role-Agent World-In-Agent: LMS, horizon, score matrix, modulated returns, advantages."""

import math

import numpy as np
import pytest

from roleagent.algos import (
    MAX_LMS_TOKENS,
    build_state_groups,
    lms_score,
    lms_tokens,
    prediction_horizon,
    prediction_score_matrix,
    role_agent_advantages,
    wia_returns,
)

EPS = 1e-6


def _lcs_dp(a, b):
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


#: the worked example's batch: group ids, trajectory ids, rewards, states, prediction scores
WORKED = ([0] * 3, ["a", "a", "b"], [0, 1, 0], ["s0", "s1", "s0"], [[1.0], [0.5], [0.2]])


def test_lms_identity_bounds_and_empties():
    assert lms_score("You see a Fridge 1.", "you  see a fridge 1 .") == 1.0  # case / whitespace
    assert lms_score("", "") == 1.0
    assert lms_score("", "abc") == 0.0 and lms_score("abc", "") == 0.0
    assert lms_score("alpha beta", "gamma delta") == 0.0
    # [you, see, a, apple, 1, .] vs [you, see, a, bread, 1, .]: LCS 5 → 10/12
    assert lms_score("You see a apple 1.", "you see a bread 1.") == pytest.approx(10 / 12)


def test_lms_is_symmetric_where_difflib_is_not():
    from difflib import SequenceMatcher

    a, b = "a b c a b", "b a c b a c"
    assert SequenceMatcher(None, a, b).ratio() != SequenceMatcher(None, b, a).ratio()
    assert lms_score(a, b) == lms_score(b, a)
    # LCS of [a b c a b] and [b a c b a c] is 3 (e.g. "a c b") → 2·3/11
    assert lms_score(a, b) == pytest.approx(6 / 11)


def test_lms_bit_parallel_equals_dp_lcs():
    rng = np.random.default_rng(0)
    words = ["a", "b", "c", "d", "e"]
    for _ in range(300):
        a = list(rng.choice(words, size=int(rng.integers(0, 80))))
        b = list(rng.choice(words, size=int(rng.integers(0, 80))))
        sa, sb = " ".join(a), " ".join(b)
        expected = 1.0 if not a and not b else 2 * _lcs_dp(a, b) / (len(a) + len(b))
        got = lms_score(sa, sb)
        assert got == pytest.approx(expected, abs=1e-12)
        assert got == lms_score(sb, sa)
        assert 0.0 <= got <= 1.0


def test_lms_token_cap():
    long_a = " ".join(["x"] * (MAX_LMS_TOKENS + 50))
    long_b = " ".join(["x"] * (MAX_LMS_TOKENS + 7))
    assert len(lms_tokens(long_a)) == MAX_LMS_TOKENS
    assert lms_score(long_a, long_b) == 1.0  # tails past the cap are ignored


def test_prediction_horizon_rounds_half_up():
    assert prediction_horizon(50) == 3  # 2.5 → 3 (banker's round would give 2)
    assert prediction_horizon(15) == 1  # 0.75
    assert prediction_horizon(4) == 1  # 0.2 → max(1, 0)
    assert prediction_horizon(30) == 2  # 1.5 → 2
    assert prediction_horizon(100, fraction=0.1) == 10
    assert prediction_horizon(0) == 1


def test_prediction_score_matrix_nan_past_end():
    # T = 3, H = 2. truth for (t, h) is future_states[t + h - 1]
    preds = [["s1", "s2"], ["s2", "zz"], ["s3", "s4"]]
    future = ["s1", "s2", "s3"]
    m = prediction_score_matrix(preds, future)
    assert m.shape == (3, 2)
    np.testing.assert_array_equal(m[:, 0], [1.0, 1.0, 1.0])
    assert m[0, 1] == 1.0 and m[1, 1] == 0.0 and math.isnan(m[2, 1])


def test_prediction_score_matrix_missing_prediction_scores_zero():
    m = prediction_score_matrix([["a b"], ["c", "d"], []], ["a b", "c", "d"])
    # H = 2: step 0 lacks its h=2 prediction (truth "c") → 0; step 2 has none: h=1 → 0, h=2 NaN
    np.testing.assert_array_equal(m[:2], [[1.0, 0.0], [1.0, 1.0]])
    assert m[2, 0] == 0.0 and math.isnan(m[2, 1])
    with pytest.raises(ValueError):
        prediction_score_matrix([["a"]], ["a", "b"])
    # a fixed horizon pads with NaN past the end / 0 for missing, and cuts longer lists
    m = prediction_score_matrix([["a", "b", "c"], ["b"]], ["a", "b"], horizon=2)
    assert m.shape == (2, 2) and m[0].tolist() == [1.0, 1.0] and m[1, 0] == 1.0 and math.isnan(m[1, 1])


def test_wia_returns_zero_task_return_is_zero_whatever_the_prediction():
    out = wia_returns(["a", "a", "b"], [0, 0, 0], [[1.0, 1.0], [1.0, np.nan], [0.3, np.nan]], gamma=0.9)
    np.testing.assert_array_equal(out, [0.0, 0.0, 0.0])


def test_wia_returns_modulates_and_drops_nan():
    # rewards [0, 1], γ = 0.5 → R_task [0.5, 1.0]
    # R_pre: t0 = 1.0 + 0.5·0.5 = 1.25; t1 = 0.8 (h=2 past the end, dropped not renormalised)
    out = wia_returns(["a", "a"], [0, 1], [[1.0, 0.5], [0.8, np.nan]], gamma=0.5)
    np.testing.assert_allclose(out, [0.5 * 2.25, 1.0 * 1.8])
    # perfect predictions never more than (1 + Σγ^{h-1}) times the task return
    out = wia_returns(["a"], [2.0], [[0.0, np.nan]], gamma=0.5)
    np.testing.assert_allclose(out, [2.0])  # wrong prediction: credit kept, not amplified


def test_wia_better_prediction_never_lowers_return_with_negative_task_return():
    # Issue example: one task, two failed trajectories from the same first state; the second
    # step of each is invalid (reward [0, −0.1] when the penalty is folded in); the first
    # step's prediction scores 1.0 (a) vs 0.0 (b); γ = 0.95, mean_std_norm, α = 0 (A^S only).
    # Old rule R = R_task·(1 + R_pre) on the penalised return: a0 = −0.095·2 = −0.19,
    # b0 = −0.095 → A^S = −0.707 for the perfect predictor, +0.707 for the bad one.
    # New rule: the factor scales only the non-negative environment return (0 here), the
    # penalty is added after → R0 = 0 for both ("step") or −0.095 for both ("reward") → A^S 0.
    groups, trajs, states = [0] * 4, ["a", "a", "b", "b"], ["s0", "s1", "s0", "s1"]
    scores = [[1.0], [np.nan], [0.0], [np.nan]]
    for placement in ("step", "reward"):
        out = role_agent_advantages(
            groups,
            trajs,
            [0, 0, 0, 0],
            states,
            scores,
            penalties=[0, 0.1, 0, 0.1],
            penalty_placement=placement,
            gamma=0.95,
            alpha=0.0,
        )
        np.testing.assert_allclose(out, [0.0, 0.0, 0.0, 0.0], atol=1e-12)
    # the caller folding the penalty itself (rewards [0, −0.1]): negative returns are not scaled
    out = role_agent_advantages(groups, trajs, [0, -0.1, 0, -0.1], states, scores, gamma=0.95, alpha=0.0)
    np.testing.assert_allclose(out, [0.0, 0.0, 0.0, 0.0], atol=1e-12)
    r = wia_returns(trajs, [0, 0, 0, 0], scores, penalties=[0, 0.1, 0, 0.1], penalty_placement="reward", gamma=0.95)
    np.testing.assert_allclose(r, [-0.095, -0.1, -0.095, -0.1])
    # A positive return with a penalty inside: rewards [0, 0, 1], step 1 invalid, γ = 0.5,
    # scores [[1], [nan], [0.5]]: R_env = [0.25, 0.5, 1], R_pre = [1, 0, 0.5]
    # "step":   [0.25·2, 0.5·1 − 0.1, 1·1.5] = [0.5, 0.4, 1.5]
    # "reward": discounted penalties [0.05, 0.1, 0] → [0.45, 0.4, 1.5]
    args = (["a"] * 3, [0, 0, 1], [[1.0], [np.nan], [0.5]])
    np.testing.assert_allclose(wia_returns(*args, penalties=[0, 0.1, 0], gamma=0.5), [0.5, 0.4, 1.5])
    np.testing.assert_allclose(
        wia_returns(*args, penalties=[0, 0.1, 0], penalty_placement="reward", gamma=0.5), [0.45, 0.4, 1.5]
    )


@pytest.mark.parametrize("placement", ["step", "reward"])
def test_wia_returns_monotone_in_every_prediction_score(placement):
    rng = np.random.default_rng(0)
    traj = np.repeat(np.arange(6), 5)
    rewards = rng.choice([-1.0, 0.0, 0.0, 1.0], size=traj.size)  # negative env rewards too
    penalties = 0.1 * (rng.random(traj.size) < 0.3)
    scores = rng.random((traj.size, 2))
    base = wia_returns(traj, rewards, scores, penalties=penalties, penalty_placement=placement, gamma=0.9)
    for i in range(traj.size):
        better = scores.copy()
        better[i, 0] = min(1.0, better[i, 0] + 0.5)
        out = wia_returns(traj, rewards, better, penalties=penalties, penalty_placement=placement, gamma=0.9)
        assert np.all(out >= base - 1e-12)


def test_wia_interleaved_batch_equals_consecutive_batch():
    # worked example of role_agent_advantages, step-major: a0, b0, a1
    out = role_agent_advantages(
        [0] * 3, ["a", "b", "a"], [0, 0, 1], ["s0", "s0", "s1"], [[1.0], [0.2], [0.5]], gamma=0.5, mode="mean_norm"
    )
    np.testing.assert_allclose(out, [0.5 + 1 / 3, -0.5 - 2 / 3, 1 / 3])
    np.testing.assert_allclose(
        wia_returns(["a", "b", "a"], [0, 0, 1], [[1.0], [0.2], [0.5]], gamma=0.5), [1.0, 0.0, 1.5]
    )


def test_wia_returns_validates_scores():
    with pytest.raises(ValueError):
        wia_returns(["a"], [1.0], [[1.5]], gamma=0.9)
    with pytest.raises(ValueError):
        wia_returns(["a", "a"], [1.0, 0.0], [[0.5]], gamma=0.9)


def test_role_agent_worked_example_mean_norm():
    # one group, γ = 0.5: a = [s0, s1], rewards [0, 1], scores [[1.0], [0.5]]; b = [s0], [0], [[0.2]]
    # R: a → [0.5·2, 1·1.5] = [1.0, 1.5]; b → [0.0]
    # A^S: s0 = {1.0, 0.0} → ±0.5; s1 singleton → 0.   A^E: samples [1, 1, 0] − 2/3
    out = role_agent_advantages(
        [0] * 3, ["a", "a", "b"], [0, 1, 0], ["s0", "s1", "s0"], [[1.0], [0.5], [0.2]], gamma=0.5, mode="mean_norm"
    )
    np.testing.assert_allclose(out, [0.5 + 1 / 3, 1 / 3, -0.5 - 2 / 3])
    # α = 0 leaves only the state term
    out = role_agent_advantages(*WORKED, gamma=0.5, mode="mean_norm", alpha=0.0)
    np.testing.assert_allclose(out, [0.5, 0.0, -0.5])


def test_role_agent_mean_std_norm_and_prediction_breaks_ties():
    # two trajectories through the same states with the same rewards; only predictions differ
    # γ = 1: R_task = [1, 1] each; a predicts perfectly (R = 2), b badly (R = 1.25 and 1.0)
    out = role_agent_advantages(
        [0] * 4, ["a", "a", "b", "b"], [0, 1, 0, 1], ["x", "y", "x", "y"], [[1.0], [1.0], [0.25], [0.0]], gamma=1.0
    )
    # A^E = 0 (equal episodes). x: {2, 1.25}: mean 1.625, std 0.53033; y: {2, 1}: std 0.70711
    sx, sy = math.sqrt(2 * 0.375**2) + EPS, math.sqrt(0.5) + EPS
    np.testing.assert_allclose(out, [0.375 / sx, 0.5 / sy, -0.375 / sx, -0.5 / sy])
    np.testing.assert_allclose(out, [0.7071, 0.7071, -0.7071, -0.7071], atol=1e-4)


def test_role_agent_similarity_state_groups():
    s1 = "on the desk 1 you see a pen 1 and a book 2"
    s2 = "on the desk 1 you see a pen 1 and a book 3"  # 2·11/24 = 0.9167
    assert build_state_groups([0, 0], [s1, s2], similarity_threshold=0.9).tolist() == [0, 0]
    out = role_agent_advantages(
        [0, 0], ["a", "b"], [1, 0], [s1, s2], [[1.0], [1.0]], gamma=0.9, mode="mean_norm", similarity_threshold=0.9
    )
    # R = [1·2, 0] → state ±1; episode ±0.5
    np.testing.assert_allclose(out, [1.5, -1.5])
    out = role_agent_advantages([0, 0], ["a", "b"], [1, 0], [s1, s2], [[1.0], [1.0]], gamma=0.9, mode="mean_norm")
    np.testing.assert_allclose(out, [0.5, -0.5])  # exact hashing: singletons → A^S = 0


def test_episode_advantage_hand_case_eq1_against_step_statistics():
    """Issue 24, item 13: a 3-step success and a 1-step failure. Role-Agent eq. 1 (over
    trajectories) gives [0.71 ×3, −0.71]; GiGPO's step statistics give [0.5 ×3, −1.5]."""
    from roleagent.algos.wia import episode_advantages

    args = ([0] * 4, ["a", "a", "a", "b"], [0, 0, 1, 0])
    eq1 = episode_advantages(*args, episode_stats="trajectories", eps=0.0)
    np.testing.assert_allclose(eq1, [math.sqrt(0.5)] * 3 + [-math.sqrt(0.5)])
    steps = episode_advantages(*args, episode_stats="steps", eps=0.0)
    np.testing.assert_allclose(steps, [0.5, 0.5, 0.5, -1.5])
    np.testing.assert_allclose(episode_advantages(*args, eps=0.0), steps)  # the default
    with pytest.raises(ValueError, match="episode_stats"):
        episode_advantages(*args, episode_stats="tokens")


def test_role_agent_eq1_option_in_the_worked_example():
    # the worked example above with A^E over trajectories: scores {1, 0} − 1/2
    out = role_agent_advantages(*WORKED, gamma=0.5, mode="mean_norm", episode_stats="trajectories")
    np.testing.assert_allclose(out, [1.0, 0.5, -1.0])


def test_role_agent_estimator_reads_algo_episode_stats():
    """The ``role_agent`` estimator follows ``algo.episode_stats`` (default: step statistics),
    and the config rule rejects other values."""
    from roleagent.config import AlgoConfig, ConfigError, load_config
    from roleagent.methods.role_agent.wia import role_agent_estimator
    from roleagent.trainer.advantages import StepBatch
    from roleagent.types import Step, Task, Trajectory

    def trajectory(rewards, tag):
        steps = [Step(f"{tag}{t}", f"{tag}{t}", "x", "x", True, reward=r) for t, r in enumerate(rewards)]
        return Trajectory(task=Task("t/0", "scripted"), seed=0, instruction="", steps=steps)

    batch = StepBatch.from_trajectories([trajectory([0, 0, 1], "a"), trajectory([0], "b")])
    default = role_agent_estimator(batch, AlgoConfig())
    np.testing.assert_allclose(default.parts["episode"], [0.5, 0.5, 0.5, -1.5], atol=1e-5)
    eq1 = role_agent_estimator(batch, AlgoConfig(episode_stats="trajectories"))
    np.testing.assert_allclose(eq1.parts["episode"], [0.7071] * 3 + [-0.7071], atol=1e-4)
    assert load_config(None, ["algo.episode_stats=trajectories"]).algo.episode_stats == "trajectories"
    with pytest.raises(ConfigError, match="algo.episode_stats"):
        load_config(None, ["algo.episode_stats=tokens"])


def test_prediction_weight_damps_the_factor_and_zero_is_the_task_return():
    """``R_t = R_task · (1 + w · R_pre)``: the docstring's w = 0.2 case, w = 0 leaves the
    task return (GiGPO's step return), and the config carries w to the estimator."""
    args = (["a", "a"], [0, 1], [[1.0, 0.5], [0.8, np.nan]])
    np.testing.assert_allclose(wia_returns(*args, gamma=0.5, weight=0.2), [0.625, 1.16])
    np.testing.assert_allclose(wia_returns(*args, gamma=0.5, weight=0.0), [0.5, 1.0])
    np.testing.assert_allclose(wia_returns(*args, gamma=0.5), wia_returns(*args, gamma=0.5, weight=1.0))
    with pytest.raises(ValueError, match="prediction weight"):
        wia_returns(*args, gamma=0.5, weight=-0.1)
    from roleagent.algos import gigpo_advantage_parts, role_agent_advantage_parts
    from roleagent.config import ConfigError, load_config

    groups, trajs, rewards, states = ["g"] * 3, [0, 0, 1], [0, 1, 0], ["s0", "s1", "s0"]
    scores = [[1.0], [0.5], [0.2]]
    undamped = role_agent_advantage_parts(groups, trajs, rewards, states, scores, gamma=0.5, mode="mean_norm")[0]
    off = role_agent_advantage_parts(
        groups, trajs, rewards, states, scores, gamma=0.5, mode="mean_norm", prediction_weight=0.0
    )[0]
    np.testing.assert_allclose(undamped, [0.5, 0.0, -0.5])  # role_agent_advantages' worked example
    np.testing.assert_allclose(
        off, gigpo_advantage_parts(groups, trajs, rewards, states, gamma=0.5, mode="mean_norm")[1]
    )
    assert load_config(None, ["algo.prediction_weight=0.2"]).algo.prediction_weight == 0.2
    with pytest.raises(ConfigError, match="algo.prediction_weight"):
        load_config(None, ["algo.prediction_weight=-1"])


def test_credit_change_counts_what_the_prediction_factor_moved():
    """``algos.credit_change``: the docstring's example; a predictor that scores every step
    the same leaves the credit as GiGPO's (the factor cancels in each state group), and
    scores that differ inside a group flip a step's sign."""
    from roleagent.algos import credit_change, gigpo_advantage_parts, role_agent_advantage_parts

    out = credit_change([0.7, -0.7, 0.0, 0.5], [0.7, -0.7, 0.0, -0.5])
    assert out["credited"] == 3 and out["sign_changed"] == pytest.approx(1 / 3)
    assert out["corr"] == pytest.approx(0.7093, abs=1e-4)
    assert math.isnan(credit_change([0.0, 0.0], [0.0, 0.0])["sign_changed"])
    with pytest.raises(ValueError, match="shape"):
        credit_change([1.0], [1.0, 2.0])

    # two successes from s0: a in two steps (R_task(s0) = 0.95), b in one (R_task = 1)
    groups, trajs, rewards, states = ["g"] * 3, [0, 0, 1], [0, 1, 1], ["s0", "s1", "s0"]
    task = gigpo_advantage_parts(groups, trajs, rewards, states, gamma=0.95)[1]

    def modulated(scores):
        return role_agent_advantage_parts(groups, trajs, rewards, states, scores, gamma=0.95)[0]

    constant = modulated([[0.6]] * 3)
    np.testing.assert_allclose(constant, task, atol=1e-4)
    same = credit_change(constant, task)
    assert same["credited"] == 2 and same["sign_changed"] == 0.0 and same["corr"] == pytest.approx(1.0)
    # a foresees the next state (1.0), b does not (0.0): a's return 0.95 * 2 passes b's 1.0 * 1
    varied = modulated([[1.0], [1.0], [0.0]])
    assert task[0] < 0 < task[2] and varied[0] > 0 > varied[2]
    assert credit_change(varied, task) == {"credited": 2, "sign_changed": 1.0, "corr": pytest.approx(-1.0)}


def test_role_agent_estimator_reports_the_task_return_step_part():
    """The ``step_task`` part is GiGPO's step part of the same batch; it is not trained on."""
    from roleagent.algos import credit_change as algos_credit_change
    from roleagent.config import AlgoConfig
    from roleagent.methods.role_agent.wia import role_agent_estimator
    from roleagent.trainer.advantages import StepBatch, gigpo
    from roleagent.types import Step, Task, Trajectory

    def trajectory(rewards, tag, score):
        steps = [Step("o", "s0" if t == 0 else f"{tag}{t}", "x", "x", True, reward=r) for t, r in enumerate(rewards)]
        for step in steps:
            step.extras["wia"] = {"predictions": ["o"], "scores": [score]}
        return Trajectory(task=Task("t/0", "scripted"), seed=0, instruction="", steps=steps)

    batch = StepBatch.from_trajectories(
        [trajectory([0, 1], "a", 1.0), trajectory([1], "b", 0.0), trajectory([0], "c", 0.0)]
    )
    out = role_agent_estimator(batch, AlgoConfig(name="role_agent"))
    np.testing.assert_allclose(out.parts["step_task"], gigpo(batch, AlgoConfig(name="gigpo")).parts["step"])
    np.testing.assert_allclose(out.value, out.parts["step"] + out.parts["episode"])
    assert not np.allclose(out.parts["step"], out.parts["step_task"])

    # the method's metrics read them back from the records the trainer writes
    from roleagent.methods.role_agent.wia import credit_metrics
    from roleagent.trainer.advantages import write_records

    write_records(batch, out)
    metrics = credit_metrics(batch.steps)
    expected = algos_credit_change(out.parts["step"], out.parts["step_task"])
    assert metrics == {f"credit_{k}": pytest.approx(v) for k, v in expected.items()} | {
        "score_std_in_group": pytest.approx(np.std([1.0, 0.0, 0.0]))  # s0: a, b and c
    }
    assert credit_metrics([Step("o", "s", "x", "x", True)]) == {}  # no records: no metrics
