"""On-Policy SFT chapter: the toy language, DDT, the three losses, samplers and Hinted Decoding,
and a tiny-config run."""

import numpy as np
import pytest
import torch

from compendium.papers import on_policy_sft as paper
from compendium.papers.on_policy_sft import task
from compendium.papers.on_policy_sft.lm import PretrainSettings, gpt2_config, new_model, pretrain


@pytest.fixture(scope="module")
def tiny_model():
    return new_model(gpt2_config(PretrainSettings(n_embd=16, n_head=2, n_layer=1)), 3).eval()


def test_styles_are_equally_correct_and_parse():
    rng = np.random.default_rng(0)
    for n in (2, 3, 4):
        ops = task.problems(200, n, rng)
        a, b = task.response_a(ops, rng), task.response_b(ops)
        assert a.shape == b.shape == (200, 2 * n)
        assert np.array_equal(task.parse_answer(a), task.answers(ops))
        assert np.array_equal(task.parse_answer(b), task.answers(ops))
        assert task.plain_prompt(ops).shape == (200, 2 + 2 * n) and task.hinted_prompt(ops).shape == (200, 4 + 2 * n)
    ops = np.array([[1, 2, 3]])
    assert task.response_a(ops).tolist() == [[3, task.COMMA, 6, task.MARK, 6, task.EOS]]
    assert task.response_a(np.array([[1, 2, 3, 4]])).tolist() == [[3, task.COMMA, 6, task.COMMA, 3, task.MARK, 3, task.EOS]]  # mod 7
    assert task.response_b(np.array([[1, 2, 3, 4]])).tolist() == [[0, task.SEMI, 2, task.SEMI, 3, task.MARK, 3, task.EOS]]
    assert task.parse_answer(np.array([[1, 2, 3, 4]])).tolist() == [-1]
    assert task.is_style_b(np.array([[1, 2, 4]]), task.response_b(np.array([[1, 2, 4]]))).tolist() == [True]
    with pytest.raises(ValueError):
        task.problems(3, 1, rng)


def test_phi_is_centred_and_weights_follow_gamma():
    rng = np.random.default_rng(1)
    z = torch.tensor(rng.normal(0, 3, (50, 40)))
    p = torch.softmax(z, -1)
    phi = torch.stack([paper.cll(z, torch.full((50,), v))[0] for v in range(40)], -1)  # (50, V)
    assert torch.allclose((p * phi).sum(-1), torch.zeros(50, dtype=z.dtype), atol=1e-12)  # E_p[phi] = 0
    g = paper.idft_gamma(torch.tensor([-20.0, 0.0, 20.0]))
    assert torch.allclose(g, torch.tensor([2.0, 1.0, 0.1]))
    assert paper.idft_gamma(torch.tensor([-20.0]), lam=0.0).item() == 1.0
    w = paper.token_weights(z[None], torch.zeros(1, 50, dtype=torch.long), "idft")
    p0 = p[:, 0]
    assert torch.all((w[0] >= p0**2 - 1e-12) & (w[0] <= p0**0.1 + 1e-12))
    stats = paper.seq_phi_stats(phi[:, :5], torch.ones(50, 5))
    assert torch.allclose(stats["mean"], phi[:, :5].mean(1)) and stats["cumsum"].shape == (50, 5)


def test_idft_gradient_identity_and_limits():
    rng = np.random.default_rng(2)
    grad = paper.gradient_check(30, rng, beta=1.0, gamma_min=0.1, gamma_max=2.0)
    assert grad["max_rel_error_released"] < 1e-12 and grad["max_rel_error_stopped"] < 1e-12
    from compendium.papers.on_policy_sft.checks import loss_limits

    lim = loss_limits(rng)
    assert lim["gamma_one_vs_dft"] < 1e-14 and lim["lambda_zero_vs_gamma_one"] < 1e-14
    assert lim["released_value_vs_stopped"] < 1e-14
    # the released form pushes a token down when p_y < exp(-1/gamma), the stopped form always up
    z = torch.tensor([[[0.0, 4.0, 4.0]]], dtype=torch.float64, requires_grad=True)   # p_0 ~ 0.009, gamma = 2
    for loss, sign in (("idft", 1.0), ("idft_sg", -1.0), ("ce", -1.0)):
        (g,) = torch.autograd.grad(paper.weighted_nll(z, torch.tensor([[0]]), torch.ones(1, 1), loss), z)
        assert sign * g[0, 0, 0].item() > 0, loss
    mean, var = paper.symbolic_phi_moments()
    assert mean == 0 and var == 0
    assert [paper.idft_lambda(x, 0.2, 0.1) for x in (0.0, 0.19, 0.25, 0.3, 1.0)] == pytest.approx([0, 0, 0.5, 1, 1])
    with pytest.raises(ValueError):
        paper.weighted_nll(torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long), torch.ones(2, 4))
    with pytest.raises(ValueError):
        paper.token_weights(torch.zeros(1, 1, 3), torch.zeros(1, 1, dtype=torch.long), "dpo")


def test_sample_token_is_inverse_cdf_with_nucleus():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]], dtype=torch.float64)
    u = torch.linspace(0, 1, 10_001, dtype=torch.float64)[:-1]
    toks = paper.sample_token(probs.log().expand(len(u), 4), u)
    freq = torch.bincount(toks, minlength=4).double() / len(u)
    assert torch.allclose(freq, probs[0], atol=2e-4)
    toks = paper.sample_token(probs.log().expand(len(u), 4), u, top_p=0.75)  # nucleus {0, 1}
    freq = torch.bincount(toks, minlength=4).double() / len(u)
    assert torch.allclose(freq, torch.tensor([0.625, 0.375, 0, 0], dtype=torch.float64), atol=2e-4)
    assert paper.sample_token(probs.log(), torch.zeros(1), temperature=0.0).item() == 0


def test_cached_generation_matches_full_recompute(tiny_model):
    rng = np.random.default_rng(3)
    ops = task.problems(20, 3, rng)
    u = rng.random((20, 6))
    out = paper.generate(tiny_model, task.plain_prompt(ops), 6, uniforms=u)
    ids = torch.as_tensor(task.plain_prompt(ops))
    with torch.no_grad():
        for t in range(6):
            logits = tiny_model(input_ids=ids).logits[:, -1].double()
            tok = paper.sample_token(torch.log_softmax(logits, -1), torch.as_tensor(u[:, t]))
            ids = torch.cat([ids, tok[:, None]], 1)
    assert np.array_equal(out, ids[:, -6:].numpy())


def test_hinted_decoding_limits(tiny_model):
    rng = np.random.default_rng(4)
    ops = task.problems(64, 3, rng)
    lim = paper.hinted_limits(tiny_model, ops, rng, beta=3.0, temperature=1.0, top_p=0.95)
    assert lim["beta0_mismatch"] == 0 and lim["lambda1_mismatch"] == 0 and lim["after_marker_not_q"] == 0
    assert lim["first_token_lambda"] == 0.0
    # after the marker only q decodes: a different hint cannot change those tokens unless the prefix changed
    u = rng.random((64, 6))
    kw = dict(beta=3.0, marker=task.MARK, uniforms=u, temperature=1.0, top_p=1.0, force_lambda=0.0)
    a, _ = paper.hinted_generate(tiny_model, task.hinted_prompt(ops), task.plain_prompt(ops), 6, **kw)
    b, _ = paper.hinted_generate(tiny_model, task.hinted_prompt(ops, (task.answers(ops) + 1) % task.MODULUS), task.plain_prompt(ops), 6, **kw)
    for r in range(64):
        marks = np.flatnonzero(a[r] == task.MARK)
        if len(marks) and np.array_equal(a[r, :marks[0] + 1], b[r, :marks[0] + 1]):
            assert np.array_equal(a[r], b[r])
    assert paper.hinted_lambda(torch.log(torch.full((1, task.VOCAB_SIZE), 1 / task.VOCAB_SIZE, dtype=torch.float64)), 3.0).item() == 1.0


def test_auroc_and_documents():
    assert paper.auroc(np.array([3.0, 4.0]), np.array([1.0, 2.0])) == 1.0
    assert paper.auroc(np.array([1.0, 2.0]), np.array([1.0, 2.0])) == 0.5
    assert paper.doc_means(np.arange(12.0).reshape(2, 6), 5).tolist() == [2.0, 7.0]


def test_config_checks():
    with pytest.raises(ValueError):
        paper.Config(num_models=1)
    with pytest.raises(ValueError):
        paper.Config(auroc_lengths=(4, 2))
    with pytest.raises(ValueError):
        paper.Config(learning_rates=())
    assert paper.Config(learning_rates=[1e-3]).learning_rates == (1e-3,)


def test_tiny_pretrain_and_run():
    settings = PretrainSettings(models=1, max_steps=4, batch_size=8, check_every=2, dev_problems=10,
                                target_accuracy=1.0, n_embd=16, n_head=2, n_layer=1)
    model, log = pretrain(settings, 0)
    model2, log2 = pretrain(settings, 0)
    assert log["steps"] == 4 and log["losses"] == log2["losses"]
    models = [model, new_model(gpt2_config(settings), 1).eval()]
    config = paper.Config(num_models=2, finetune_problems=100, finetune_steps=2, batch_size=4, test_problems=50,
                          subtraction_problems=50, analysis_problems=100, auroc_lengths=(1, 6), rft_samples=1)
    res = paper.run(config, models)
    assert set(res.arms) == set(paper.ARMS)
    for arm in paper.ARMS:
        assert res.arms[arm]["acc_in"].shape == (2,) and np.all((0 <= res.arms[arm]["acc_ood"]) & (res.arms[arm]["acc_ood"] <= 1))
    assert res.auroc["style_b"].shape == (2, 2) and np.all(res.demo_accuracy == 1.0)
    m = paper.measurements(res)
    assert m["forgetting_gap"].n == 2 and 0 <= m["count_forgetting"] <= 2


def test_fused_activation_equals_gelu_new(tiny_model):
    """The config's fused tanh-GELU computes GPT-2's default ``gelu_new`` up to float rounding."""
    from transformers.activations import ACT2FN

    assert tiny_model.config.activation_function == "gelu_pytorch_tanh"
    x = torch.linspace(-8, 8, 2001)
    assert torch.allclose(ACT2FN["gelu_pytorch_tanh"](x), ACT2FN["gelu_new"](x), atol=1e-6)
    ids = torch.as_tensor(task.plain_prompt(task.problems(8, 3, np.random.default_rng(5))))
    with torch.no_grad():
        fused = tiny_model(input_ids=ids).logits
        for block in tiny_model.transformer.h:
            block.mlp.act = ACT2FN["gelu_new"]
        try:
            plain = tiny_model(input_ids=ids).logits
        finally:
            for block in tiny_model.transformer.h:
                block.mlp.act = ACT2FN["gelu_pytorch_tanh"]
    assert torch.allclose(fused, plain, atol=1e-5)


def test_rft_keeps_one_correct_sample_per_solved_problem(tiny_model):
    from compendium.papers.on_policy_sft.experiment import rft_data

    ops = task.problems(200, 3, np.random.default_rng(6), task.IN_RANGE)
    kept_ops, kept = rft_data(tiny_model, ops, np.random.default_rng(7), 3)
    assert kept.shape == (len(kept_ops), 6) and 0 < len(kept_ops) <= len(ops)
    assert np.array_equal(task.parse_answer(kept), task.answers(kept_ops))
    # at most one sample per problem: the kept rows are distinct problems of the input
    from collections import Counter

    given, got = Counter(map(tuple, ops.tolist())), Counter(map(tuple, kept_ops.tolist()))
    assert all(got[r] <= given[r] for r in got)
    none_ops, none = rft_data(tiny_model, ops[:0], np.random.default_rng(7), 3)
    assert none_ops.shape == (0, 3) and none.shape == (0, 6)


def _trl_dft_loss(model, input_ids, labels):
    """trl's own DFT loss: ``SFTTrainer.compute_loss`` (trl 1.16, ``loss_type="dft"``) called on a minimal stand-in
    for the trainer (the attributes the method reads), on ``model`` patched with trl's fused LM head, as the
    trainer's ``__init__`` patches it. No dataset, tokenizer or training loop is built."""
    from collections import defaultdict
    from types import SimpleNamespace

    from trl import SFTTrainer
    from trl.trainer.utils import add_fused_lm_head

    add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
    stand_in = SimpleNamespace(
        model=model, aux_loss_enabled=False, compute_loss_func=None, label_smoother=None,
        args=SimpleNamespace(loss_type="dft", average_tokens_across_devices=False),
        accelerator=SimpleNamespace(parallelism_config=None, gather_for_metrics=lambda x: x),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)}, _total_train_tokens=0, _tp_size=1)
    inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels}
    return SFTTrainer.compute_loss(stand_in, model, inputs)


def test_dft_and_idft_at_gamma_one_match_trl_dft():
    """Our DFT, and IDFT where it coincides with DFT (lambda = 0, stopped weight), equal trl's DFT loss in value and
    in every parameter gradient on a tiny random batch; released IDFT at lambda = 0 has the same value only."""
    pytest.importorskip("trl")
    # float32: trl's fused LM head computes its log-probabilities in float32 whatever the model's dtype
    model = new_model(gpt2_config(PretrainSettings(n_embd=16, n_head=2, n_layer=1)), 5).train()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, task.VOCAB_SIZE, (6, 9), generator=g)
    labels = ids.clone()
    labels[:, :4] = -100  # the prompt: no loss, as in trl's completion-only training
    labels[0, 7:] = -100  # one shorter response
    params = [p for p in model.parameters() if p.requires_grad]

    def value_and_grads(loss):
        grads = torch.autograd.grad(loss, params)
        return loss.detach(), torch.cat([x.reshape(-1) for x in grads])

    logits = model(input_ids=ids).logits[:, :-1]
    targets, mask = ids[:, 1:], (labels[:, 1:] != -100).long()
    ours = {"dft": value_and_grads(paper.dft_loss(logits, targets, mask))}
    logits = model(input_ids=ids).logits[:, :-1]
    ours["idft_lam0_stopped"] = value_and_grads(paper.idft_loss(logits, targets, mask, lam=0.0, stop_weight=True))
    logits = model(input_ids=ids).logits[:, :-1]
    released = value_and_grads(paper.idft_loss(logits, targets, mask, lam=0.0))
    ce_value = paper.ce_loss(model(input_ids=ids).logits[:, :-1], targets, mask).detach()
    ref_value, ref_grad = value_and_grads(_trl_dft_loss(model, ids, labels))
    assert ref_grad.abs().max() > 1e-6 and abs(ref_value - ce_value) > 1e-3  # DFT is not cross-entropy here
    for name, (value, grad) in ours.items():
        assert torch.allclose(value, ref_value, rtol=1e-5, atol=1e-7), name
        assert torch.allclose(grad, ref_grad, rtol=1e-4, atol=1e-6), name
    assert torch.allclose(released[0], ref_value, rtol=1e-5, atol=1e-7)
    assert not torch.allclose(released[1], ref_grad, rtol=1e-3, atol=1e-6)  # the gradient also flows through p


def test_precondition_measurements_on_a_hand_built_result():
    """The three preconditions read what they say: the worst base model's in-domain accuracy minus chance (1/7), SFT's
    style B share against the base model's (paired) and SFT's OOD accuracy minus chance; a base at chance fails."""
    M = 3
    arms = {arm: {k: np.full(M, 0.5) for k in ("acc_in", "acc_ood", "dnll", "style_b")} for arm in paper.ARMS}
    arms["sft"]["style_b"] = np.array([0.9, 0.8, 0.7])
    arms["sft"]["acc_ood"] = np.array([1 / 7, 1 / 7 + 0.02, 1 / 7 + 0.01])  # at the floor
    res = paper.Result(base={"acc_in": np.array([0.6, 0.11, 0.7]), "acc_ood": np.full(M, 0.3), "nll_sub": np.ones(M),
                             "style_b": np.array([0.0, 0.1, 0.0])},
                       arms=arms, phi_means={k: np.array([-1.0, -1.1, -0.9]) for k in ("on_policy", "B", "A", "HD", "RFT")},
                       auroc={"style_b": np.array([[0.8, 0.95], [0.7, 0.96], [0.75, 0.97]]),
                              "on_policy": np.array([[0.5, 0.49], [0.52, 0.5], [0.5, 0.53]])},
                       hd_accuracy=np.array([0.9, 0.95, 1.0]), demo_accuracy=np.ones(M))
    m = paper.measurements(res)
    assert paper.CHANCE == pytest.approx(1 / 7)
    assert m["base_floor_worst"] == pytest.approx(0.11 - 1 / 7) and m["base_floor_worst"] < 0.10
    assert m["sft_style_b_gain"].point == pytest.approx(0.8 - 1 / 30) and m["sft_style_b_gain"].n == M
    assert m["sft_ood_above_chance"].point == pytest.approx(0.01) and m["sft_ood_above_chance"].low < 0.05
