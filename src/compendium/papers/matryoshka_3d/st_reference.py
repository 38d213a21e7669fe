"""Our MRL and layer losses against sentence-transformers' MatryoshkaLoss / Matryoshka2dLoss.

The config-built Qwen3 backbone is saved to a temporary folder with a word-level tokenizer built
locally (``tokenizers``), then loaded as a ``SentenceTransformer`` (``Transformer`` + last-token
``Pooling``): no network, no hub. Both sides see one batch of token ids:

- ``MatryoshkaLoss(MultipleNegativesRankingLoss(scale = 1 / tau), dims, weights)``: for every width
  the anchor against all positives and all hard-negative columns of the batch (one joint softmax),
  which is :func:`compendium.losses.info_nce` with the candidates ``[positives; negatives by column]``
  on the re-normalised prefix, summed with the weights (:func:`compendium.losses.nested_prefix_loss`).
- ``Matryoshka2dLoss(..., n_layers_per_step=-1, n_dims_per_step=-1, kl_div_weight=0)``, i.e.
  ``AdaptiveLayerLoss`` over every layer: ``L(final) + (1 / L) sum_{i = 0}^{L-1} L(h_i)``, with
  ``h_i`` the raw hidden state after layer ``i`` (``h_0`` the token embeddings), not through the
  final norm. ML-Embed's MLL differs (exits {1, 2, 4, ...} plus L through the final norm, the mean
  of the exit losses); :func:`layer_loss` computes either convention from one set of pooled states.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from compendium.losses import info_nce, nested_prefix_loss

from . import data as D
from .model import TEMPERATURE, Encoder, pad_batch


def mnrl_matryoshka(q: torch.Tensor, p: torch.Tensor, n: torch.Tensor, dims, weights,
                    temperature: float = TEMPERATURE) -> torch.Tensor:
    """Our side of ``MatryoshkaLoss(MNRL)``: ``q (B, d)``, ``p (B, d)``, ``n (B, K, d)``."""
    cands = torch.cat([p, n.transpose(0, 1).reshape(-1, n.shape[-1])])       # [pos; neg column 1; ...; column K]
    return nested_prefix_loss(lambda a, c: info_nce(a, c, temperature=temperature), [q, cands], dims, weights)


@torch.no_grad()
def pooled_states(model: Encoder, ids: torch.Tensor, lengths: torch.Tensor) -> list[torch.Tensor]:
    """Last-token states ``[h_0 (embeddings), h_1, ..., h_{L-1} (raw), last_hidden_state]`` (n, d) each."""
    out = model.backbone(input_ids=ids, output_hidden_states=True, use_cache=False)
    rows, last = torch.arange(ids.shape[0]), lengths - 1
    states = [h[rows, last] for h in out.hidden_states[:-1]]
    return states + [out.last_hidden_state[rows, last]]


def layer_loss(per_layer_losses: list, convention: str, num_layers: int) -> torch.Tensor:
    """Combine per-layer losses ``[L(h_0), ..., L(h_L)]``: ``'sentence_transformers'`` (final + mean of
    the prior layers) or ``'ml_embed'`` (mean over exits {1, 2, 4, ...} plus L)."""
    from .model import mll_layers

    if convention == "sentence_transformers":
        return per_layer_losses[-1] + sum(per_layer_losses[:-1]) / num_layers
    if convention == "ml_embed":
        exits = mll_layers(num_layers)
        return sum(per_layer_losses[e] for e in exits) / len(exits)
    raise ValueError(f"convention must be 'sentence_transformers' or 'ml_embed', got {convention!r}")


def _tokenizer(vocab_size: int):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    vocab = {"[PAD]": D.PAD, "[EOS]": D.EOS, **{f"t{i}": i for i in range(2, vocab_size)}}
    tok = Tokenizer(WordLevel(vocab, unk_token="[PAD]"))
    tok.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", eos_token="[EOS]", unk_token="[PAD]")


def compare(model: Encoder, batch: dict, dims, weights) -> dict:
    """Both sides on one batch: ``{"mrl": (ours, theirs), "layers": (ours, theirs), "ml_embed_layers": ours}``.

    Raises ``ImportError`` if sentence-transformers is missing.
    """
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import (Matryoshka2dLoss, MatryoshkaLoss,
                                                                   MultipleNegativesRankingLoss)
    from sentence_transformers.sentence_transformer.modules import Pooling
    from sentence_transformers.base.modules import Transformer

    (qi, ql), (pi, pl), (ni, nl) = batch["q"], batch["p"], batch["n"]
    B = len(ql)
    K = len(nl) // B
    columns = [pad_batch(qi, ql), pad_batch(pi, pl)]
    neg = ni.reshape(B, K, -1)
    neg_len = nl.reshape(B, K)
    columns += [pad_batch(neg[:, k], neg_len[:, k]) for k in range(K)]

    def features():  # fresh dicts for every loss call: sentence-transformers writes its outputs into them
        return [{"input_ids": ids.clone(), "attention_mask": (torch.arange(ids.shape[1])[None, :] < lens[:, None]).long()}
                for ids, lens in columns]

    d, L = model.settings.hidden_size, model.num_layers

    # ours: pooled states per column and layer, then the two losses
    states = [pooled_states(model, ids, lens) for ids, lens in columns]                 # [column][layer] (B, d)

    def mrl_at(layer, final_norm=False):
        f = model.backbone.norm if final_norm and layer < L else (lambda h: h)
        q, p = f(states[0][layer]), f(states[1][layer])
        n = torch.stack([f(states[2 + k][layer]) for k in range(K)], 1)
        return mnrl_matryoshka(q, p, n, dims, weights)

    with torch.no_grad():
        ours_mrl = float(mrl_at(L))
        ours_layers = float(layer_loss([mrl_at(i) for i in range(L + 1)], "sentence_transformers", L))
        # the ML-Embed convention on the same states, for contrast: exits through the final norm
        ml_embed = float(layer_loss([mrl_at(i, final_norm=True) for i in range(L + 1)], "ml_embed", L))

    with tempfile.TemporaryDirectory(prefix="matryoshka_st_") as tmp:
        model.backbone.save_pretrained(tmp)
        _tokenizer(model.backbone.config.vocab_size).save_pretrained(tmp)
        transformer = Transformer(str(Path(tmp)))
        st = SentenceTransformer(modules=[transformer, Pooling(d, pooling_mode="lasttoken")], device="cpu")
        st.eval()
        mnrl = MultipleNegativesRankingLoss(st, scale=1.0 / TEMPERATURE)
        with torch.no_grad():
            theirs_mrl = float(MatryoshkaLoss(st, mnrl, list(dims), list(weights))(features(), None))
            loss2d = Matryoshka2dLoss(st, mnrl, list(dims), list(weights), n_layers_per_step=-1, n_dims_per_step=-1,
                                      kl_div_weight=0.0, kl_temperature=0.0)
            theirs_layers = float(loss2d(features(), None))
    return {"mrl": (ours_mrl, theirs_mrl), "layers": (ours_layers, theirs_layers), "ml_embed_layers": ml_embed}


__all__ = ["mnrl_matryoshka", "pooled_states", "layer_loss", "compare"]
