"""The toy: synthetic multilingual retrieval over latent concepts (generated; nothing is read).

A *document* is a set of 8-16 distinct concepts drawn from one of ``num_topics`` topics (topic
frequencies Zipf, and within a topic the concepts Zipf-weighted over a random subset of the
concept list, so documents of one topic overlap). Each of ``num_languages`` languages writes
concept ``c`` as one of ``1 + synonyms`` tokens of its own (a bijective concept -> token-set map:
no token is shared between languages or concepts; the main form with probability 0.6, each synonym
with the rest split evenly) and orders the concepts of a text by its own permutation of the concept
list (word order). A *query* keeps 40-60 % of its document's concepts and is written in the
document's language or in language 0 (cross-lingual), with probability 1/2 each. Hard negatives are
other documents of the query's topic, in the positive's language. The first ``high_resource``
languages get many training documents, the others few. Batches either draw pool documents
uniformly (each language in proportion to its pool share) or balanced (each language equally
often, as the evaluation sets do; the low-resource languages then repeat their few documents).

Token ids: 0 = padding, 1 = end of text (the pooled token), then the concept forms.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PAD, EOS = 0, 1
MAIN_FORM_PROBABILITY = 0.6


@dataclass(frozen=True)
class TaskSpec:
    """Sizes of the generated language family (fixed by the issue unless a scale says otherwise)."""

    num_concepts: int = 200
    num_topics: int = 20
    topic_size: int = 40            # concepts a topic draws from
    num_languages: int = 6
    high_resource: int = 2
    synonyms: int = 2
    doc_min: int = 8
    doc_max: int = 16
    query_low: float = 0.4
    query_high: float = 0.6
    hard_negatives: int = 5

    def __post_init__(self):
        if not (2 <= self.num_concepts and 1 <= self.num_topics and self.doc_max <= self.topic_size <= self.num_concepts):
            raise ValueError("TaskSpec needs doc_max <= topic_size <= num_concepts and at least one topic")
        if not (1 <= self.high_resource <= self.num_languages and 1 <= self.doc_min <= self.doc_max):
            raise ValueError("TaskSpec needs 1 <= high_resource <= num_languages and 1 <= doc_min <= doc_max")
        if not (0 < self.query_low <= self.query_high <= 1) or self.hard_negatives < 1 or self.synonyms < 0:
            raise ValueError("TaskSpec needs 0 < query_low <= query_high <= 1, hard_negatives >= 1, synonyms >= 0")

    @property
    def forms(self) -> int:
        return 1 + self.synonyms

    @property
    def vocab_size(self) -> int:
        return 2 + self.num_languages * self.num_concepts * self.forms

    @property
    def max_length(self) -> int:
        return self.doc_max + 1                                      # + end of text


@dataclass(frozen=True)
class Task:
    """One draw of the language family: topics, word orders and the token of every form."""

    spec: TaskSpec
    topic_probs: np.ndarray          # (T,)
    topic_concepts: np.ndarray       # (T, topic_size) concept ids
    concept_probs: np.ndarray        # (topic_size,) Zipf weights inside a topic
    order_rank: np.ndarray           # (L, C): position of concept c in language l's word order


def _zipf(n: int) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1)
    return w / w.sum()


def make_task(spec: TaskSpec, rng: np.random.Generator) -> Task:
    """Draw topics (Zipf frequencies, random concept subsets) and word orders."""
    topic_concepts = np.stack([rng.permutation(spec.num_concepts)[:spec.topic_size] for _ in range(spec.num_topics)])
    order_rank = np.stack([np.argsort(rng.permutation(spec.num_concepts)) for _ in range(spec.num_languages)])
    return Task(spec, _zipf(spec.num_topics), topic_concepts, _zipf(spec.topic_size), order_rank)


def token_of(spec: TaskSpec, language, concept, form):
    """Token id of ``form`` of ``concept`` in ``language`` (vectorised; a bijection onto 2..V-1)."""
    return 2 + (np.asarray(language) * spec.num_concepts + np.asarray(concept)) * spec.forms + np.asarray(form)


def sample_documents(task: Task, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``(topics (n,), concepts (n, doc_max))``: concept ids padded with -1 (distinct within a document)."""
    spec = task.spec
    topics = rng.choice(spec.num_topics, size=n, p=task.topic_probs)
    lengths = rng.integers(spec.doc_min, spec.doc_max + 1, size=n)
    concepts = np.full((n, spec.doc_max), -1, dtype=np.int64)
    # distinct draws by the Gumbel-top-k trick on the topic's Zipf weights
    keys = np.log(task.concept_probs)[None, :] - np.log(-np.log(rng.random((n, spec.topic_size))))
    picks = np.argsort(-keys, axis=1)[:, :spec.doc_max]                # (n, doc_max) positions in the topic
    chosen = task.topic_concepts[topics[:, None], picks]
    keep = np.arange(spec.doc_max)[None, :] < lengths[:, None]
    concepts[keep] = chosen[keep]
    return topics, concepts


def sample_queries(task: Task, concepts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Keep a random 40-60 % (at least one) of each document's concepts: ``(n, doc_max)``, -1 padded."""
    spec = task.spec
    lengths = (concepts >= 0).sum(1)
    fraction = rng.uniform(spec.query_low, spec.query_high, size=len(concepts))
    keep_n = np.maximum(1, np.round(fraction * lengths)).astype(int)
    order = np.argsort(np.where(concepts >= 0, rng.random(concepts.shape), np.inf), axis=1)
    out = np.full_like(concepts, -1)
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(concepts.shape[1])[None, :].repeat(len(concepts), 0), axis=1)
    keep = (rank < keep_n[:, None]) & (concepts >= 0)
    out[keep] = concepts[keep]
    return out


def render(task: Task, concepts: np.ndarray, languages: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Write concept sets as token sequences: ``(ids (n, doc_max + 1), lengths (n,))``.

    Concepts are sorted by the language's word order, each written in a random form, then the
    end-of-text token; right-padded with 0.
    """
    spec = task.spec
    n, width = concepts.shape
    languages = np.asarray(languages)
    valid = concepts >= 0
    rank = np.where(valid, task.order_rank[languages[:, None], np.where(valid, concepts, 0)], np.iinfo(np.int64).max)
    order = np.argsort(rank, axis=1, kind="stable")
    sorted_concepts = np.take_along_axis(concepts, order, 1)
    lengths = valid.sum(1)
    u = rng.random((n, width))
    syn, p_main = spec.synonyms, MAIN_FORM_PROBABILITY
    form = np.zeros((n, width), dtype=np.int64)
    if syn:                                           # main form w.p. 0.6, each synonym w.p. 0.4 / syn
        form = np.where(u < p_main, 0, 1 + np.minimum(((u - p_main) / (1 - p_main) * syn).astype(np.int64), syn - 1))
    ids = np.zeros((n, width + 1), dtype=np.int64)
    pos = np.arange(width)[None, :] < lengths[:, None]
    toks = token_of(spec, languages[:, None], np.where(pos, sorted_concepts, 0), form)
    ids[:, :width][pos] = toks[pos]
    ids[np.arange(n), lengths] = EOS
    return ids, lengths + 1


def pair_languages(spec: TaskSpec, n_high: int, n_low: int, rng: np.random.Generator) -> np.ndarray:
    """Document languages of a training pool: ``n_high`` pairs per high-resource language, ``n_low``
    per low-resource one, shuffled."""
    langs = np.concatenate([np.full(n_high if lang < spec.high_resource else n_low, lang)
                            for lang in range(spec.num_languages)])
    return rng.permutation(langs)


def query_languages(doc_languages: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The document's language or language 0, with probability 1/2 each."""
    return np.where(rng.random(len(doc_languages)) < 0.5, doc_languages, 0)


@dataclass
class RetrievalSet:
    """Queries and their documents (query ``i`` belongs to document ``i``), rendered once."""

    query_ids: np.ndarray
    query_lengths: np.ndarray
    doc_ids: np.ndarray
    doc_lengths: np.ndarray
    doc_languages: np.ndarray
    query_languages: np.ndarray
    topics: np.ndarray


def make_retrieval_set(task: Task, n: int, rng: np.random.Generator, languages: np.ndarray | None = None) -> RetrievalSet:
    """``n`` documents and one query each; document languages uniform over all languages unless given."""
    spec = task.spec
    topics, concepts = sample_documents(task, n, rng)
    doc_lang = rng.integers(0, spec.num_languages, size=n) if languages is None else np.asarray(languages)
    q_lang = query_languages(doc_lang, rng)
    d_ids, d_len = render(task, concepts, doc_lang, rng)
    q_ids, q_len = render(task, sample_queries(task, concepts, rng), q_lang, rng)
    return RetrievalSet(q_ids, q_len, d_ids, d_len, doc_lang, q_lang, topics)


@dataclass
class TrainingPool:
    """Training documents (concepts, topic, language) and a sampler of batches with hard negatives."""

    task: Task
    topics: np.ndarray
    concepts: np.ndarray
    languages: np.ndarray

    @classmethod
    def make(cls, task: Task, n_high: int, n_low: int, rng: np.random.Generator) -> "TrainingPool":
        langs = pair_languages(task.spec, n_high, n_low, rng)
        topics, concepts = sample_documents(task, len(langs), rng)
        return cls(task, topics, concepts, langs)

    def __post_init__(self):
        # hard-negative pools: same topic and language; the same topic; anything (first with >= K others)
        self._by_topic_language = {}
        self._by_topic = {}
        self._by_language = [np.flatnonzero(self.languages == g) for g in range(self.task.spec.num_languages)]
        for t in np.unique(self.topics):
            self._by_topic[int(t)] = np.flatnonzero(self.topics == t)
        for t, lang in set(zip(self.topics.tolist(), self.languages.tolist())):
            self._by_topic_language[(t, lang)] = np.flatnonzero((self.topics == t) & (self.languages == lang))

    def _negatives(self, j: int, K: int, rng: np.random.Generator) -> np.ndarray:
        for pool in (self._by_topic_language[(int(self.topics[j]), int(self.languages[j]))],
                     self._by_topic[int(self.topics[j])], np.arange(len(self.topics))):
            pool = pool[pool != j]
            if len(pool) >= K:
                return rng.choice(pool, size=K, replace=False)
        raise ValueError(f"the pool has fewer than {K + 1} documents")

    def sample_indices(self, batch_size: int, rng: np.random.Generator, balanced: bool = False) -> np.ndarray:
        """Pool documents of a batch: uniform over the pool, or (``balanced``) a language drawn
        uniformly for each pair and then a document of that language uniformly."""
        if not balanced:
            return rng.integers(0, len(self.topics), size=batch_size)
        langs = rng.integers(0, self.task.spec.num_languages, size=batch_size)
        pools = self._by_language
        if any(len(pools[int(g)]) == 0 for g in np.unique(langs)):
            raise ValueError("balanced sampling needs at least one pool document in every language")
        return np.array([pools[int(g)][rng.integers(len(pools[int(g)]))] for g in langs], dtype=np.int64)

    def batch(self, batch_size: int, rng: np.random.Generator, balanced: bool = False) -> dict:
        """A batch: queries, positives and ``hard_negatives`` same-topic, same-language negatives each.

        Documents come from :meth:`sample_indices` (``balanced``: every language equally often,
        as in the evaluation sets; otherwise in proportion to its pool share). Queries and the
        forms of every token are drawn afresh (the pool fixes documents, not surface forms).
        Returns token ids and lengths for ``q (B,)``, ``p (B,)``, ``n (B, K)``.
        """
        spec = self.task.spec
        K = spec.hard_negatives
        idx = self.sample_indices(batch_size, rng, balanced)
        neg = np.stack([self._negatives(int(j), K, rng) for j in idx])          # (B, K)
        q_lang = query_languages(self.languages[idx], rng)
        q_ids, q_len = render(self.task, sample_queries(self.task, self.concepts[idx], rng), q_lang, rng)
        p_ids, p_len = render(self.task, self.concepts[idx], self.languages[idx], rng)
        flat = neg.reshape(-1)
        n_ids, n_len = render(self.task, self.concepts[flat], self.languages[flat], rng)
        return {"q": (q_ids, q_len), "p": (p_ids, p_len), "n": (n_ids, n_len), "index": idx, "negatives": neg}
