"""Our GRPO loss (compendium.rl.grpo) against trl's, on one shared batch.

trl computes its loss inside ``GRPOTrainer._compute_loss(model, inputs)``. The test builds a
trainer around a one-layer GPT-2 made from a config (saved to a temporary folder: trl rebuilds
its reference model from the model's path, which a config-built model does not have), feeds both
losses the same per-token log-probabilities (trl's own ``_get_per_token_logps_and_entropies``,
with gradient), the same old and reference log-probabilities, advantages and a ragged completion
mask, and compares the loss values and every parameter gradient.

trl's default ``use_bias_correction_kl=True`` multiplies the KL term by the importance ratio;
compendium.rl.grpo does not, so the trainer here turns it off (and ``test_bias_correction_differs``
shows the switch matters, so the agreement is not vacuous).
"""

import pytest
import torch

pytest.importorskip("trl")

from compendium.rl.grpo import grpo_loss  # noqa: E402

B, P, T = 4, 3, 5
BETA, EPS = 0.04, 0.2


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
    from trl import GRPOConfig, GRPOTrainer

    vocab = {f"t{i}": i for i in range(30)} | {"<pad>": 30}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<pad>")
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("trl")
    GPT2LMHeadModel(GPT2Config(vocab_size=31, n_positions=32, n_embd=16, n_layer=1, n_head=2)).save_pretrained(
        folder / "policy")
    args = GRPOConfig(output_dir=str(folder / "out"), use_cpu=True, report_to="none", beta=BETA, epsilon=EPS,
                      loss_type="grpo", use_bias_correction_kl=False, num_generations=2,
                      per_device_train_batch_size=2, max_completion_length=4)
    out = GRPOTrainer(model=str(folder / "policy"), reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                      args=args, train_dataset=Dataset.from_dict({"prompt": ["t1 t2", "t3 t4"]}),
                      processing_class=tokenizer)
    out.model.eval()  # no dropout, and trl then divides by no gradient-accumulation count
    return out


@pytest.fixture(scope="module")
def batch(trainer):
    g = torch.Generator().manual_seed(1)
    prompt_ids = torch.randint(0, 30, (B, P), generator=g)
    completion_ids = torch.randint(0, 30, (B, T), generator=g)
    completion_mask = torch.ones(B, T, dtype=torch.long)
    completion_mask[1, 3:] = 0
    completion_mask[2, 4:] = 0
    ids = torch.cat([prompt_ids, completion_ids], 1)
    mask = torch.cat([torch.ones(B, P, dtype=torch.long), completion_mask], 1)
    with torch.no_grad():
        base, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, T)
    return dict(prompt_ids=prompt_ids, prompt_mask=torch.ones(B, P, dtype=torch.long), completion_ids=completion_ids,
                completion_mask=completion_mask, advantages=torch.tensor([1.0, -0.5, 2.0, -1.5]),
                old_per_token_logps=base + 0.3 * torch.randn(B, T, generator=g),   # ratios beyond the clip range
                ref_per_token_logps=base + 0.2 * torch.randn(B, T, generator=g)), ids, mask


def _both(trainer, batch, loss_type, aggregation):
    inputs, ids, mask = batch
    model = trainer.model
    trainer.loss_type = loss_type
    model.zero_grad()
    theirs = trainer._compute_loss(model, inputs)
    theirs.backward()
    grads_theirs = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    logp, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, T)
    ours = grpo_loss(logp, inputs["old_per_token_logps"], inputs["advantages"],
                     logp_ref=inputs["ref_per_token_logps"], mask=inputs["completion_mask"], kl_coef=BETA,
                     clip_eps=EPS, aggregation=aggregation).loss
    ours.backward()
    grads_ours = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    return float(theirs.detach()), float(ours.detach()), grads_theirs, grads_ours


@pytest.mark.parametrize("loss_type, aggregation", [("grpo", "sequence"), ("bnpo", "token")])
def test_loss_and_gradients_equal_trl(trainer, batch, loss_type, aggregation):
    theirs, ours, g_theirs, g_ours = _both(trainer, batch, loss_type, aggregation)
    assert ours == pytest.approx(theirs, rel=1e-6, abs=1e-7)
    for a, b in zip(g_theirs, g_ours):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-7)
    assert any(float(a.abs().max()) > 0 for a in g_theirs)


def test_bias_correction_differs(trainer, batch):
    """With trl's default KL importance correction on, the two losses part: the comparison above can fail."""
    trainer.args.use_bias_correction_kl = True
    try:
        theirs, ours, _, _ = _both(trainer, batch, "grpo", "sequence")
    finally:
        trainer.args.use_bias_correction_kl = False
    assert abs(theirs - ours) > 1e-5
