"""Shared generations of the exact toy pair for the detection tests.

Every text gets its own watermark key (per-row stream keys), so texts are
independent draws over the key — the randomness the null distributions are
about. (With one fixed key, a low-entropy model makes many texts share
(context, token) pairs and hence statistics; the false-positive *count* over
such a corpus is then not binomial even though each text's p-value is
uniform over keys.)

Batch shapes are shared between calls so each decoder compiles the loop once.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import numpy as np
import pytest

from wmspec_jax import decoders, prf, speculative, theory, toy
from wmspec_jax.speculative import SpeculativeConfig

VOCAB = 16
TV = 0.3
LOOKAHEAD = 3
PROMPT_LEN = 4
BATCH = 2000
P_TAB, Q_TAB = toy.markov_pair(VOCAB, TV, concentration=1.0, seed=0)
MODEL = toy.markov_model(VOCAB)

GUMBEL = decoders.WatermarkDecoder("gumbel")
GUMBEL_TEMPERATURE = 0.5  # the paper's Gumbel-max setting
GUMBEL_NEW = 32
SYNTH_LAYERS = 6
SYNTH = decoders.WatermarkDecoder("synthid", SYNTH_LAYERS)
SYNTH_TEMPERATURE = 0.3
SYNTH_NEW = 48


def keys_for(tag: str, n: int = BATCH) -> np.ndarray:
    return prf.stream_keys([f"{tag}-{i}" for i in range(n)])


def target_entropy(temperature: float) -> float:
    """Mean per-token entropy (nats) of the tempered target over the chain's stationary law."""
    logits = np.log(P_TAB) / temperature
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    evals, evecs = np.linalg.eig(p.T)
    pi = np.real(evecs[:, np.argmin(np.abs(evals - 1))])
    pi /= pi.sum()
    return float(pi @ np.asarray(theory.entropy(p)))


class Run(NamedTuple):
    result: speculative.GenerationResult
    keys: np.ndarray


@functools.lru_cache(maxsize=None)
def generate(method: str, decoder: decoders.WatermarkDecoder, temperature: float, new: int, tag: str,
             seed: int) -> Run:
    k = 0 if method in ("basic", "plain") else LOOKAHEAD
    cfg = SpeculativeConfig(method=method, decoder=decoder, lookahead=k, max_new_tokens=new, temperature=temperature)
    prompts = np.random.default_rng(seed).integers(0, VOCAB, size=(BATCH, PROMPT_LEN))
    keys = keys_for(tag)
    res = speculative.generate(MODEL, toy.log_table(P_TAB), prompts, np.full(BATCH, PROMPT_LEN), keys,
                               jax.random.key(seed), cfg, draft=MODEL, draft_params=toy.log_table(Q_TAB))
    return Run(res, keys)


@pytest.fixture(scope="session")
def gumbel_pos() -> list:
    """Two batches of Alg. 1 generations: [training split, test split]."""
    return [generate("pseudorandom", GUMBEL, GUMBEL_TEMPERATURE, GUMBEL_NEW, f"gumbel-pos{j}", 1 + j) for j in range(2)]


@pytest.fixture(scope="session")
def gumbel_negs() -> list:
    """Three batches of unwatermarked generations of the same models (6000 texts)."""
    return [generate("standard", GUMBEL, GUMBEL_TEMPERATURE, GUMBEL_NEW, f"gumbel-neg{j}", 10 + j) for j in range(3)]


@pytest.fixture(scope="session")
def gumbel_basic() -> Run:
    """The basic watermark (no speculation, TARGET stream)."""
    return generate("basic", GUMBEL, GUMBEL_TEMPERATURE, GUMBEL_NEW, "gumbel-basic", 3)


@pytest.fixture(scope="session")
def synth_basic() -> Run:
    return generate("basic", SYNTH, SYNTH_TEMPERATURE, SYNTH_NEW, "synth-basic", 4)


@pytest.fixture(scope="session")
def synth_pos() -> Run:
    return generate("pseudorandom", SYNTH, SYNTH_TEMPERATURE, SYNTH_NEW, "synth-pos", 2)


@pytest.fixture(scope="session")
def synth_neg() -> Run:
    return generate("standard", SYNTH, SYNTH_TEMPERATURE, SYNTH_NEW, "synth-neg", 20)


def split(stats, idx):
    """Rows ``idx`` of a statistics NamedTuple (keeps its provenance)."""
    from wmspec_jax import detect

    return detect.take(stats, idx)


def human_windows(num: int, width: int = 64, step: int = 16) -> np.ndarray:
    """``num`` byte windows of built-in human text (chatterbot answers, pydoc paragraphs).

    Tokenised as UTF-8 bytes (vocabulary 256): a deterministic mapping that
    keeps the text's repetitions.
    """
    from wmspec_jax import text_data as data

    texts = data.builtin_questions().human_texts + [e.human for e in data.builtin_openings().examples]
    windows = []
    for t in texts:
        b = np.frombuffer(t.encode("utf-8"), np.uint8)
        for s in range(0, max(len(b) - width, 0) + 1, step):
            if len(b) >= width:
                windows.append(b[s : s + width])
        if len(windows) >= num:
            break
    if len(windows) < num:
        raise RuntimeError(f"built-in corpora gave only {len(windows)} windows")
    return np.stack(windows[:num]).astype(np.int32)
