"""The chapter's experiment: ``Config``, ``run`` and the statistics of the ledger."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import torch

from compendium.stats import mean_interval, paired_difference
from compendium.training import torch_threads
from compendium.validation import require_int, require_number

from . import task
from .decoding import generate, hinted_generate
from .losses import cll, idft_lambda, weighted_nll
from .lm import greedy_accuracy, response_logits

# arm -> (training data, loss); the first six are the methods, the last two the on-policy control
ARMS = {"sft": ("B", "ce"), "dft": ("B", "dft"), "idft": ("B", "idft"), "idft_sg": ("B", "idft_sg"), "sft_hd": ("HD", "ce"),
        "rft": ("RFT", "ce"), "sft_a": ("A", "ce"), "idft_a": ("A", "idft")}
LABELS = {"sft": "SFT (style B)", "dft": "DFT (style B)", "idft": "IDFT (style B)", "idft_sg": "IDFT, stopped weight (style B)",
          "sft_hd": "SFT on HD data",
          "rft": "RFT (self-samples)", "sft_a": "SFT (style A)", "idft_a": "IDFT (style A)"}
UNIT = "base-model seeds"
CHANCE = 1.0 / task.MODULUS  # accuracy of a uniform guess of the answer residue


@dataclass(frozen=True)
class Config:
    """Registry parameters of the chapter plus ``seed`` (see workflow/config/chapters.yaml)."""

    num_models: int = 3
    finetune_problems: int = 1200
    finetune_steps: int = 24
    batch_size: int = 48
    learning_rates: tuple = (1e-3,)
    test_problems: int = 300
    subtraction_problems: int = 500
    analysis_problems: int = 2700
    auroc_lengths: tuple = (1, 2, 4, 8, 16, 32)
    rft_samples: int = 4
    hd_beta: float = 3.0
    hd_temperature: float = 0.3
    hd_top_p: float = 0.95
    idft_beta: float = 1.0
    gamma_min: float = 0.1
    gamma_max: float = 2.0
    warmup_ratio: float = 0.0
    transition_ratio: float = 0.0
    gradient_vectors: int = 100
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "learning_rates", tuple(float(x) for x in self.learning_rates))
        object.__setattr__(self, "auroc_lengths", tuple(int(x) for x in self.auroc_lengths))
        require_int("num_models", self.num_models, 2, 20)
        require_int("finetune_problems", self.finetune_problems, 100, 100_000)
        require_int("finetune_steps", self.finetune_steps, 1, 100_000)
        require_int("batch_size", self.batch_size, 1, 4096)
        require_int("test_problems", self.test_problems, 50, 100_000)
        require_int("subtraction_problems", self.subtraction_problems, 50, 100_000)
        require_int("analysis_problems", self.analysis_problems, 100, 100_000)
        require_int("rft_samples", self.rft_samples, 1, 64)
        require_int("gradient_vectors", self.gradient_vectors, 1, 10_000)
        require_int("seed", self.seed, 0, 2**31 - 1)
        if not self.learning_rates or min(self.learning_rates) <= 0:
            raise ValueError("learning_rates must be a non-empty list of positive numbers")
        L = self.auroc_lengths
        if len(L) < 2 or list(L) != sorted(set(L)) or L[0] < 1:
            raise ValueError("auroc_lengths must be at least two increasing lengths >= 1")
        if self.analysis_problems * 6 // L[-1] < 2:
            raise ValueError("analysis_problems is too small for the longest AUROC length")
        require_number("hd_beta", self.hd_beta, 0, 100)
        require_number("hd_temperature", self.hd_temperature, 0, 10)
        require_number("hd_top_p", self.hd_top_p, 0, 1, low_open=True)
        require_number("idft_beta", self.idft_beta, 0, 100, low_open=True)
        require_number("gamma_min", self.gamma_min, 0, 10, low_open=True)
        require_number("gamma_max", self.gamma_max, self.gamma_min, 10)
        require_number("warmup_ratio", self.warmup_ratio, 0, 1)
        require_number("transition_ratio", self.transition_ratio, 0, 1)

    @property
    def idft(self) -> dict:
        return {"beta": self.idft_beta, "gamma_min": self.gamma_min, "gamma_max": self.gamma_max}


@dataclass
class Result:
    """Per-arm metrics (arrays over base models), DDT statistics and what the figures draw."""

    base: dict = field(default_factory=dict)        # acc_in, acc_ood, nll_sub: (M,)
    arms: dict = field(default_factory=dict)        # arm -> acc_in, acc_ood, dnll, style_b: (M,)
    phi_means: dict = field(default_factory=dict)   # data set -> (M,) mean phi per token under the base model
    auroc: dict = field(default_factory=dict)       # "style_b" / "on_policy": (M, lengths)
    docs_at_longest: dict = field(default_factory=dict)
    hd_accuracy: np.ndarray | None = None
    demo_accuracy: np.ndarray | None = None
    learning_rates: dict = field(default_factory=dict)
    data_sizes: dict = field(default_factory=dict)  # data set -> (M,) examples (RFT keeps only correct ones)
    figures: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------- data
def token_phi(model, prompts: np.ndarray, responses: np.ndarray, batch: int = 2000) -> np.ndarray:
    """DDT's phi of every response token under ``model`` (teacher forced), ``(B, R)``."""
    out = []
    with torch.no_grad():
        for i in range(0, len(prompts), batch):
            logits = response_logits(model, prompts[i:i + batch], responses[i:i + batch])
            phi, _, _ = cll(logits, torch.as_tensor(responses[i:i + batch]))
            out.append(phi.double().numpy())
    return np.concatenate(out)


def doc_means(phi: np.ndarray, length: int) -> np.ndarray:
    """Mean phi over consecutive ``length``-token documents of the flattened response stream."""
    flat = phi.reshape(-1)
    k = len(flat) // length
    return flat[:k * length].reshape(k, length).mean(1)


def auroc(positive: np.ndarray, negative: np.ndarray) -> float:
    """P(score of a positive > score of a negative) + ties / 2 (sklearn's ROC AUC)."""
    from sklearn.metrics import roc_auc_score

    y = np.r_[np.ones(len(positive)), np.zeros(len(negative))]
    return float(roc_auc_score(y, np.r_[positive, negative]))


def sample_on_policy(model, ops: np.ndarray, rng: np.random.Generator, temperature: float = 1.0) -> np.ndarray:
    """Responses sampled from the model on the plain prompts (``2n`` tokens each)."""
    steps = 2 * ops.shape[1]
    return generate(model, task.plain_prompt(ops), steps, uniforms=rng.random((len(ops), steps)), temperature=temperature)


def hinted_data(model, ops: np.ndarray, rng: np.random.Generator, config: Config) -> np.ndarray:
    """Hinted-Decoding rewrites of the problems (the answer is the hint)."""
    steps = 2 * ops.shape[1]
    toks, _ = hinted_generate(model, task.hinted_prompt(ops), task.plain_prompt(ops), steps, beta=config.hd_beta,
                              marker=task.MARK, uniforms=rng.random((len(ops), steps)),
                              temperature=config.hd_temperature, top_p=config.hd_top_p)
    return toks


def rft_data(model, ops: np.ndarray, rng: np.random.Generator, samples: int) -> tuple[np.ndarray, np.ndarray]:
    """Rejection-sampling data: per problem the first of ``samples`` self-samples with the right answer."""
    keep_ops, keep_resp = [], []
    todo = np.arange(len(ops))
    for _ in range(samples):  # only the problems still without a correct sample are sampled again
        if len(todo) == 0:
            break
        resp = sample_on_policy(model, ops[todo], rng)
        ok = task.parse_answer(resp) == task.answers(ops[todo])
        keep_ops.append(ops[todo[ok]])
        keep_resp.append(resp[ok])
        todo = todo[~ok]
    if not keep_ops:
        return ops[:0], np.zeros((0, 2 * ops.shape[1]), dtype=np.int64)
    return np.concatenate(keep_ops), np.concatenate(keep_resp)


# ----------------------------------------------------------------------------------------------- training
def finetune(base, ops: np.ndarray, responses: np.ndarray, loss: str, *, learning_rate: float, config: Config,
             batches: np.ndarray):
    """One fine-tuning run from a copy of ``base``: ``batches (steps, batch)`` index the data (taken mod its size)."""
    from compendium.training import TrainSpec, fit

    model = copy.deepcopy(base)
    if len(ops) == 0:  # e.g. RFT from a model that never answers right: nothing to train on
        return model.eval()
    prompts = task.plain_prompt(ops)
    steps = len(batches)
    spec = TrainSpec(max_steps=steps, learning_rate=learning_rate, schedule="cosine", grad_clip=1.0, threads=1,
                     log_every=max(steps, 1))

    def loss_fn(step):
        idx = batches[step] % len(ops)
        logits = response_logits(model, prompts[idx], responses[idx])
        lam = idft_lambda(step / steps, config.warmup_ratio, config.transition_ratio)
        mask = torch.ones(responses[idx].shape)
        return weighted_nll(logits, torch.as_tensor(responses[idx]), mask, loss,
                            **({**config.idft, "lam": lam} if loss.startswith("idft") else {}))

    fit(model, loss_fn, spec)
    return model.eval()


def subtraction_nll(model, prompts: np.ndarray, responses: np.ndarray) -> float:
    """Mean NLL (nats) of the subtraction answer token."""
    with torch.no_grad():
        logits = response_logits(model, prompts, responses)[:, 0].double()
        return float(-torch.log_softmax(logits, -1).gather(-1, torch.as_tensor(responses[:, :1]))[:, 0].mean())


def evaluate(model, sets: dict) -> dict:
    out_in = generate(model, task.plain_prompt(sets["in"]), 6, temperature=0.0)
    return {"acc_in": float((task.parse_answer(out_in) == task.answers(sets["in"])).mean()),
            "acc_ood": greedy_accuracy(model, sets["ood"]),
            "nll_sub": subtraction_nll(model, *sets["sub"]),
            "style_b": float(task.is_style_b(sets["in"], out_in).mean())}


# ----------------------------------------------------------------------------------------------- run
def run(config: Config, models: list) -> Result:
    """Every arm on every base model at one token budget, the DDT statistics and the figure data."""
    if len(models) < config.num_models:
        raise ValueError(f"need {config.num_models} base models, got {len(models)}")
    models = models[:config.num_models]
    prob_rng = np.random.default_rng([config.seed, 0])
    ft_ops = task.problems(config.finetune_problems, 3, prob_rng, task.IN_RANGE)
    sets = {"in": task.problems(config.test_problems, 3, prob_rng, task.IN_RANGE),
            "ood": task.problems(config.test_problems, 4, prob_rng, task.OOD_RANGE),
            "sub": task.subtraction(config.subtraction_problems, prob_rng)}
    dev = task.problems(config.test_problems, 3, prob_rng, task.IN_RANGE)
    p1 = task.problems(config.analysis_problems, 3, prob_rng, task.IN_RANGE)
    p2 = task.problems(config.analysis_problems, 3, prob_rng, task.IN_RANGE)
    res = Result()
    M = len(models)
    per = {arm: {k: np.zeros(M) for k in ("acc_in", "acc_ood", "dnll", "style_b")} for arm in ARMS}
    base = {k: np.zeros(M) for k in ("acc_in", "acc_ood", "nll_sub", "style_b")}
    phi_means = {k: np.zeros(M) for k in ("on_policy", "B", "A", "HD", "RFT")}
    L = config.auroc_lengths
    au = {"style_b": np.zeros((M, len(L))), "on_policy": np.zeros((M, len(L)))}
    res.hd_accuracy, res.demo_accuracy = np.zeros(M), np.zeros(M)
    with torch_threads(1):  # one thread: faster for these sizes on a shared machine, and reproducible
        for i, model in enumerate(models):
            rng = np.random.default_rng([config.seed, 1, i])
            ev = evaluate(model, sets)
            for k in base:
                base[k][i] = ev[k]
            data = {"B": (ft_ops, task.response_b(ft_ops)), "A": (ft_ops, task.response_a(ft_ops, rng)),
                    "HD": (ft_ops, hinted_data(model, ft_ops, rng, config)),
                    "RFT": rft_data(model, ft_ops, rng, config.rft_samples)}
            for name, (o, _) in data.items():
                res.data_sizes.setdefault(name, np.zeros(M, dtype=int))[i] = len(o)
            res.hd_accuracy[i] = float((task.parse_answer(data["HD"][1]) == task.answers(ft_ops)).mean())
            res.demo_accuracy[i] = float((task.parse_answer(data["B"][1]) == task.answers(ft_ops)).mean())
            # DDT: on-policy samples (two independent sets) against style-B demonstrations
            on1, on2 = sample_on_policy(model, p1, rng), sample_on_policy(model, p2, rng)
            phi_on1 = token_phi(model, task.plain_prompt(p1), on1)
            phi_on2 = token_phi(model, task.plain_prompt(p2), on2)
            phi_b2 = token_phi(model, task.plain_prompt(p2), task.response_b(p2))
            for j, length in enumerate(L):
                d1 = doc_means(phi_on1, length)
                au["style_b"][i, j] = auroc(d1, doc_means(phi_b2, length))
                au["on_policy"][i, j] = auroc(d1, doc_means(phi_on2, length))
            res.docs_at_longest = {"on_policy": len(doc_means(phi_on1, L[-1])), "style_b": len(doc_means(phi_b2, L[-1]))}
            phis = {name: token_phi(model, task.plain_prompt(o), r) if len(o) else np.zeros((0, 6))
                    for name, (o, r) in data.items()}
            phis["on_policy"] = phi_on1
            for name in phi_means:
                phi_means[name][i] = float(phis[name].mean()) if phis[name].size else np.nan
            if i == 0:
                res.figures["phi_tokens"] = {"on-policy samples": phi_on1.ravel(), "style B demos": phis["B"].ravel(),
                                             "Hinted Decoding": phis["HD"].ravel()}
                with torch.no_grad():
                    logits = response_logits(model, task.plain_prompt(ft_ops[:500]), data["B"][1][:500])
                    phi_b, logp_b, _ = cll(logits, torch.as_tensor(data["B"][1][:500]))
                res.figures["weights"] = {"phi": phi_b.numpy().ravel(), "p": logp_b.exp().numpy().ravel()}
            # one index stream per base model: every arm sees the same batch positions (paired)
            batches = np.random.default_rng([config.seed, 2, i]).integers(0, 2**31 - 1, (config.finetune_steps, config.batch_size))
            for arm, (source, loss) in ARMS.items():
                if i == 0 and arm not in res.learning_rates:
                    res.learning_rates[arm] = select_learning_rate(model, data[source], loss, config, batches, dev)
                tuned = finetune(model, *data[source], loss, learning_rate=res.learning_rates[arm], config=config, batches=batches)
                ev = evaluate(tuned, sets)
                per[arm]["acc_in"][i], per[arm]["acc_ood"][i] = ev["acc_in"], ev["acc_ood"]
                per[arm]["dnll"][i], per[arm]["style_b"][i] = ev["nll_sub"] - base["nll_sub"][i], ev["style_b"]
    res.base, res.arms, res.phi_means, res.auroc = base, per, phi_means, au
    return res


def select_learning_rate(model, data, loss: str, config: Config, batches: np.ndarray, dev: np.ndarray) -> float:
    """The rate of ``config.learning_rates`` with the best in-domain dev accuracy (first base model only; ties: the first)."""
    if len(config.learning_rates) == 1:
        return config.learning_rates[0]
    scores = [greedy_accuracy(finetune(model, *data, loss, learning_rate=lr, config=config, batches=batches), dev)
              for lr in config.learning_rates]
    return config.learning_rates[int(np.argmax(scores))]


# ----------------------------------------------------------------------------------------------- ledger statistics
def measurements(res: Result, level: float = 0.90) -> dict:
    """Estimates over base-model seeds (t intervals at ``level``) and worst-seed values for the ledger."""
    a = res.arms
    m = {}
    m["forgetting_gap"] = paired_difference(a["sft"]["dnll"], a["idft"]["dnll"], level=level, unit=UNIT)
    m["in_domain_gap"] = paired_difference(a["idft"]["acc_in"], a["sft"]["acc_in"], level=level, unit=UNIT)
    m["sg_forgetting_gap"] = paired_difference(a["sft"]["dnll"], a["idft_sg"]["dnll"], level=level, unit=UNIT)
    m["sg_in_domain_gap"] = paired_difference(a["idft_sg"]["acc_in"], a["sft"]["acc_in"], level=level, unit=UNIT)
    m["ood_gap"] = paired_difference(a["idft"]["acc_ood"], a["sft"]["acc_ood"], level=level, unit=UNIT)
    m["hd_vs_b"] = paired_difference(a["sft_hd"]["acc_ood"], a["sft"]["acc_ood"], level=level, unit=UNIT)
    gap_b = a["sft"]["dnll"] - a["idft"]["dnll"]
    gap_a = a["sft_a"]["dnll"] - a["idft_a"]["dnll"]
    m["onpolicy_gap"] = paired_difference(gap_b, gap_a, level=level, unit=UNIT)
    m["phi_gap"] = paired_difference(np.abs(res.phi_means["B"]), np.abs(res.phi_means["HD"]), level=level, unit=UNIT)
    m["hd_accuracy_ratio"] = mean_interval(res.hd_accuracy / res.demo_accuracy, level=level, unit=UNIT)
    m["headroom"] = max((mean_interval(a["sft"][k], level=level, unit=UNIT) for k in ("acc_in", "acc_ood")),
                        key=lambda e: e.high)
    m["base_headroom"] = mean_interval(res.base["acc_in"], level=level, unit=UNIT)
    # preconditions: every base model above chance in domain (worst model), SFT has learned style B (its share of
    # style B answers against the base model's, paired), SFT's OOD accuracy above chance
    m["base_floor_worst"] = float(res.base["acc_in"].min() - CHANCE)
    m["sft_style_b_gain"] = paired_difference(a["sft"]["style_b"], res.base["style_b"], level=level, unit=UNIT)
    m["sft_ood_above_chance"] = mean_interval(a["sft"]["acc_ood"] - CHANCE, level=level, unit=UNIT)
    au = res.auroc
    m["auroc_longest_min"] = float(au["style_b"][:, -1].min())
    m["auroc_rise_min"] = float((au["style_b"][:, -1] - au["style_b"][:, 0]).min())
    dev = au["on_policy"][:, -1] - 0.5
    m["auroc_control_worst"] = float(0.5 + dev[np.argmax(np.abs(dev))])
    m["count_forgetting"] = int((gap_b > 0).sum())
    m["count_onpolicy"] = int((gap_b > gap_a).sum())
    return m
