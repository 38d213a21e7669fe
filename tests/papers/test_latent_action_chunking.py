"""Tests for compendium.papers.latent_action_chunking: shapes, properties, known answers, tiny run."""

import dataclasses

import numpy as np
import pytest
import torch

from compendium.papers import latent_action_chunking as paper
from compendium.stats import Estimate


def _episodes(n=4, seed=0):
    return paper.sample_episodes(n, np.random.default_rng(seed))


def _oracle(episodes, models=2):
    """A policy that returns the expert's own chunk from the launch step (read off the phase)."""
    def act(obs):
        t0 = np.rint(obs[0, :, 4] * paper.EPISODE_STEPS).astype(int)
        chunk = paper.chunk_targets(episodes.commands, t0[:, None])[:, 0]
        return np.broadcast_to(chunk, (models,) + chunk.shape)
    return act


def _go(mode, latency, project=None, n=4):
    ep = _episodes(n)
    out = paper.rollout(_oracle(ep), ep, 2, mode=mode, latency=latency, rng=np.random.default_rng(0),
                        goal_noise=0.0, project=project)
    return ep, out


# ------------------------------------------------------------------------ tasks and metrics
def test_expert_paths_and_plant():
    ep = _episodes(6)
    assert ep.commands.shape == (6, paper.EPISODE_STEPS, 2) and ep.states.shape == ep.commands.shape
    # both directions start at the same point and are mirror images about the centre line
    assert np.allclose(ep.commands[:, 0], ep.alt_commands[:, 0])
    assert paper.path_deviation(ep.states, ep).max() == 0.0
    assert np.allclose(paper.path_deviation(ep.alt_states, ep), 0.0)
    s, contact = paper.timing_law()
    assert s[0] == 0 and s[-1] == 1 and np.all(np.diff(s) >= 0) and contact.max() == pytest.approx(1.0, abs=1e-6)


def test_cubic_jerk_and_linear():
    t = np.arange(30) / paper.HZ
    for a in (0.5, -3.0):
        assert paper.jerk(np.stack([a * t ** 3, 0 * t], -1)) == pytest.approx(6 * abs(a), rel=1e-9)
    assert paper.jerk(np.stack([2 * t + 1, -t], -1)) == pytest.approx(0.0, abs=1e-9)


def test_boundary_gap_takes_largest_per_cycle():
    a = np.zeros((10, 2))
    a[4:, 0] = 1.0              # a jump of 1 at step 4
    a[7:, 0] = 1.5              # and of 0.5 at step 7
    assert paper.boundary_gap(a, [[4, 7]]) == pytest.approx(1.0)
    assert paper.boundary_gap(a, [[4], [7]]) == pytest.approx(0.75)


def test_chunk_targets_hold_past_end():
    ep = _episodes(2)
    c = paper.chunk_targets(ep.commands, np.array([[230], [0]]))
    assert c.shape == (2, 1, paper.HORIZON, 2)
    assert np.allclose(c[0, 0, 10:], ep.commands[0, -1]) and np.allclose(c[1, 0], ep.commands[1, :paper.HORIZON])


# ------------------------------------------------------------------------ execution
def test_align_stale_drops_latency():
    chunk = np.arange(48 * 2, dtype=float).reshape(48, 2)
    for d in (0, 6, 12, 24):
        rest, dropped = paper.align_stale(chunk, 24, 24 + d)
        assert dropped == d and rest.shape == (48 - d, 2) and (rest[0] == chunk[d]).all()
    with pytest.raises(ValueError):
        paper.align_stale(chunk, 10, 5)


def test_ensemble_weights_oldest_first():
    w = paper.ensemble_weights(4, 0.5)
    assert w.sum() == pytest.approx(1.0) and np.all(np.diff(w) < 0)
    assert np.allclose(w, np.exp(-0.5 * np.arange(4)) / np.exp(-0.5 * np.arange(4)).sum())
    p = [np.array([0.0, 0.0]), np.array([1.0, 1.0])]
    assert np.allclose(paper.temporal_ensemble(p, 0.0), [0.5, 0.5])


def test_rtr_reset_and_splice():
    rng = np.random.default_rng(0)
    prev, new = rng.normal(size=(2, 3, 48, 2)), rng.normal(size=(2, 3, 48, 2))
    assert paper.rtr_refine(None, new, 24, lambda c: c * 0) is new          # no reuse after a reset
    out = paper.rtr_refine(prev, new, 24, lambda c: c)
    assert np.array_equal(out[..., :24, :], prev[..., 24:, :]) and np.array_equal(out[..., 24:, :], new[..., 24:, :])


@pytest.mark.parametrize("latency,same", [(24, True), (12, False), (6, False)])
def test_identity_splice_equals_naive_only_at_the_period(latency, same):
    """Inconsistent (random) chunks: the bare splice executes naive's commands exactly when the latency
    equals the period (every reused step is past), and differs below it (the negative control's range)."""
    ep = _episodes(3)

    def noisy(obs):
        t0 = int(np.rint(obs[0, 0, 4] * paper.EPISODE_STEPS))
        return np.random.default_rng(t0).normal(size=obs.shape[:2] + (paper.HORIZON, 2))

    acts = {mode: paper.rollout(noisy, ep, 2, mode=mode, latency=latency, rng=np.random.default_rng(0),
                                goal_noise=0.0).actions for mode in ("naive", "rtr_identity")}
    assert bool(np.abs(acts["naive"] - acts["rtr_identity"]).max() == 0.0) is same


def test_crossfade_endpoints():
    old, new = np.zeros((20, 2)), np.ones((20, 2))
    out = paper.crossfade(old, new, 4)
    assert np.allclose(out[:4, 0], [0.2, 0.4, 0.6, 0.8]) and np.allclose(out[4:], 1.0)


@pytest.mark.parametrize("mode", ["naive", "ensemble", "crossfade", "rtr_identity"])
@pytest.mark.parametrize("latency", [0, 12, 24])
def test_consistent_chunks_execute_the_expert(mode, latency):
    """Chunks that agree with each other: every asynchronous mode runs the expert's commands
    (cross-fade at latency 24 blends from the old chunk's held last step, so it is left out)."""
    if mode == "crossfade" and latency == 24:
        pytest.skip("the old chunk has no steps left at latency 24")
    ep, out = _go(mode, latency)
    assert out.dropped == [latency] * sum(t + latency < paper.EPISODE_STEPS for t in out.launches)
    assert np.allclose(out.actions[:, :, latency:], ep.commands[None, :, latency:])
    if latency == 0:
        assert np.allclose(paper.path_deviation(out.states, ep), 0.0)


def test_sync_stalls_and_lags():
    ep, out0 = _go("sync", 0)
    _, out12 = _go("sync", 12)
    assert np.allclose(out0.actions, ep.commands[None])
    assert paper.stall_count(out12.velocities).mean() > paper.stall_count(out0.velocities).mean()
    assert paper.path_deviation(out12.states, ep).mean() > 0.01


def test_hold_policy_stands_still_and_deviates():
    """The floor's baseline: every chunk holds the current position, so the commands never move
    (zero jerk) and the path deviates from the expert's; the oracle's deviation is far below it."""
    ep = _episodes(4)
    out = paper.rollout(paper.hold_policy(), ep, 2, mode="sync", latency=0, rng=np.random.default_rng(0), goal_noise=0.0)
    assert np.allclose(out.actions, ep.commands[None, :, :1])
    assert np.allclose(paper.jerk(out.actions), 0.0)
    held = paper.path_deviation(out.states, ep)
    _, oracle = _go("sync", 0)
    assert np.all(held > 0.05) and np.log(paper.path_deviation(oracle.states, ep).mean() / held.mean()) < paper.FLOOR_DEVIATION


def test_rollout_rejects_bad_input():
    ep = _episodes(2)
    with pytest.raises(ValueError):
        paper.rollout(_oracle(ep), ep, 2, mode="fastest", latency=0, rng=np.random.default_rng(0))
    with pytest.raises(ValueError):
        paper.rollout(_oracle(ep), ep, 2, mode="naive", latency=30, rng=np.random.default_rng(0))
    with pytest.raises(ValueError):
        paper.rollout(_oracle(ep), ep, 2, mode="rtr", latency=12, rng=np.random.default_rng(0))


# ------------------------------------------------------------------------ models
def test_spline_and_upsampling():
    B = paper.spline_basis(48, 20)
    assert B.shape == (48, 20) and np.allclose(B.sum(1), 1.0)
    for kind in ("linear", "cubic"):
        U = paper.upsample_matrix(kind)
        assert U.shape == (48, 13)
        assert np.allclose(U[paper.KNOTS_15HZ[:-1]], np.eye(13)[:-1])       # knots are reproduced
        assert np.allclose(U @ np.arange(13.0), np.arange(48) / 4)           # lines are reproduced


def test_vae_and_policy_shapes():
    vae = paper.ChunkVAE(2)
    x = torch.randn(2, 5, 48, 2)
    mu, logvar = vae.encode(x)
    assert mu.shape == logvar.shape == (2, 5, 12, 4) and vae.decode(mu).shape == (2, 5, 48, 2)
    assert torch.isfinite(vae.loss(x, torch.Generator().manual_seed(0)))
    obs = torch.randn(2, 5, paper.tasks.OBS_DIM)
    for head in paper.HEADS:
        p = paper.ChunkPolicy(2, 26, head, hidden=16)
        y = p.predict(obs, torch.Generator().manual_seed(0))
        assert y.shape == (2, 5, 26)
        assert torch.isfinite(p.loss(obs, torch.randn(2, 5, 26), torch.Generator().manual_seed(0)))
    with pytest.raises(ValueError):
        paper.ChunkPolicy(2, 26, "flow")


def test_batched_models_are_independent():
    """Model m's output depends only on model m's parameters (the batched layers do not mix)."""
    lin = paper.BatchedLinear(3, 4, 5)
    x = torch.randn(3, 7, 4)
    y = lin(x)
    with torch.no_grad():
        lin.weight[1] += 1.0
    y2 = lin(x)
    assert torch.equal(y[0], y2[0]) and torch.equal(y[2], y2[2]) and not torch.equal(y[1], y2[1])
    vae = paper.ChunkVAE(2)
    z = torch.randn(2, 3, 12, 4)
    out = vae.decode(z)
    z2 = z.clone()
    z2[1] += 1.0
    assert torch.allclose(vae.decode(z2)[0], out[0])


def test_savgol_window_smallest_meeting_target():
    jerks = {5: np.array([10.0, 10.0]), 7: np.array([6.0, 9.0]), 9: np.array([4.0, 8.5])}
    assert list(paper.savgol_window(jerks, np.array([6.5, 1.0]))) == [7, 9]


def test_config_validation():
    with pytest.raises(ValueError):
        paper.Config(latencies=(0, 30))
    with pytest.raises(ValueError):
        paper.Config(claim_latencies=(6,), latencies=(0, 12))
    with pytest.raises(ValueError):
        paper.Config(test_episodes=1)
    with pytest.raises(ValueError, match="below the period"):
        paper.Config(latencies=(0, 24), claim_latencies=(24,))   # the negative control would have nothing to test
    assert paper.Config(latencies=[0, 12], claim_latencies=[12]).latencies == (0, 12)


# ------------------------------------------------------------------------ tiny end to end
@pytest.fixture(scope="module")
def tiny():
    settings = dataclasses.replace(paper.settings_for("smoke"), models=2, demos=6, start_stride=12, vae_steps=3,
                                   policy_steps=3, batch_size=16, hidden=16)
    return paper.train_all(settings, 0)


@pytest.mark.slow
def test_tiny_run(tiny):
    vae, policies, meta = tiny
    assert set(policies) == {(s, h) for s in paper.SPACES for h in paper.HEADS}
    config = paper.Config(test_episodes=3, dev_episodes=3, latencies=(0, 12), claim_latencies=(12,))
    result = paper.run(config, vae, policies)
    m = paper.measurements(result)
    assert m["dropped_ok"]
    assert isinstance(m["headline_token"][1], Estimate) and m["headline_token"][1].n == 2
    assert m["identity_key"] == 12 and isinstance(m["identity"], Estimate) and set(m["identity_all"]) == {12}
    assert m["identity_equals_naive"] is None and result.checks["identity_vs_naive"][12] > 0.0
    assert m["floor"][0] in m["floor_parts"] and set(m["floor_parts"]) == {f"{k}" for k in paper.FLOOR_POLICIES}
    assert m["floor"][1].high == max(e.high for e in m["floor_parts"].values())
    assert result.checks["reset_max_change"] == 0.0 and result.checks["cubic_jerk_error"] < 1e-9
    for v in result.policies.values():
        assert np.all(np.isfinite(v["jerk"])) and v["jerk"].shape == (2,)
