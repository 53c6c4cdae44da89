"""vLLM's Gumbel-max watermarks reimplemented in :mod:`wmspec_jax.interop.engine_gumbel`.

Parity is checked against vLLM's own code (its pure-torch CPU reference, copied below with the
file, repository and commit it comes from; vLLM itself is not a dependency), against the
compatibility vectors vLLM publishes (``tests/watermarking/test_prf.py`` and
``tests/watermarking/watermarking_goldens.json``: tokens its sampler generated and the scores
its detectors gave), and statistically (detection power, false-positive rate, exact nulls).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math

import numpy as np
import pytest
from scipy import integrate, stats

from wmspec_jax.interop import engine_gumbel as eg

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """The reference's many small int64 kernels run ~50x slower with threads on shared cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

# ------------------------------------------------------------------------------------------------
# vLLM's reference code, copied for parity (Apache-2.0, Copyright contributors to the vLLM project).
# ------------------------------------------------------------------------------------------------

# From vllm/v1/watermarking/prfs/philox.py, repository vllm-project/vllm,
# commit 373305d65c78b7c368d46cd483a9fa92da71c8a6 (PhiloxPRF, version "philox4x32-10-v1").
_UINT32_MASK = 2**32 - 1
_PHILOX_M0 = 0xD2511F53
_PHILOX_M1 = 0xCD9E8D57
_PHILOX_W0 = 0x9E3779B9
_PHILOX_W1 = 0xBB67AE85
_CONTEXT_DOMAIN = 0x574D4358
_TOKEN_DOMAIN = 0x574D544B


def _mulhilo32(multiplier, values):
    value_low = values & 0xFFFF
    value_high = values >> 16
    multiplier_low = multiplier & 0xFFFF
    multiplier_high = multiplier >> 16

    low_product = value_low * multiplier_low
    cross_product = value_high * multiplier_low + value_low * multiplier_high
    low_with_carry = low_product + ((cross_product & 0xFFFF) << 16)
    low = low_with_carry & _UINT32_MASK
    high = (
        value_high * multiplier_high + (cross_product >> 16) + (low_with_carry >> 32)
    ) & _UINT32_MASK
    return high, low


def _philox4x32_10(counter, key):
    counter_0, counter_1, counter_2, counter_3 = counter
    key_0, key_1 = key
    for round_index in range(10):
        high_0, low_0 = _mulhilo32(_PHILOX_M0, counter_0)
        high_1, low_1 = _mulhilo32(_PHILOX_M1, counter_2)
        counter_0, counter_1, counter_2, counter_3 = (
            (high_1 ^ counter_1 ^ key_0) & _UINT32_MASK,
            low_1,
            (high_0 ^ counter_3 ^ key_1) & _UINT32_MASK,
            low_0,
        )
        if round_index != 9:
            key_0 = (key_0 + _PHILOX_W0) & _UINT32_MASK
            key_1 = (key_1 + _PHILOX_W1) & _UINT32_MASK
    return counter_0, counter_1, counter_2, counter_3


def _philox_uint32(key_0_value, key_1_value, contexts, token_ids, stream_0=0, stream_1=0):
    contexts = contexts.to(torch.int64) & _UINT32_MASK
    prefix_shape = contexts.shape[:-1]
    device = contexts.device
    key_0 = torch.full(prefix_shape, key_0_value, dtype=torch.int64, device=device)
    key_1 = torch.full(prefix_shape, key_1_value, dtype=torch.int64, device=device)
    state = (
        torch.full(prefix_shape, _CONTEXT_DOMAIN, dtype=torch.int64, device=device),
        torch.full(prefix_shape, contexts.shape[-1], dtype=torch.int64, device=device),
        torch.zeros(prefix_shape, dtype=torch.int64, device=device),
        torch.zeros(prefix_shape, dtype=torch.int64, device=device),
    )
    for offset in range(0, contexts.shape[-1], 4):
        block = []
        for index in range(4):
            position = offset + index
            if position < contexts.shape[-1]:
                block.append(contexts[..., position])
            else:
                block.append(torch.full(prefix_shape, _UINT32_MASK - index, dtype=torch.int64, device=device))
        counter = tuple((state[index] ^ block[index]) & _UINT32_MASK for index in range(4))
        state = _philox4x32_10(counter, ((key_0 ^ offset) & _UINT32_MASK, key_1))

    output_shape = torch.broadcast_shapes(prefix_shape + (1,), token_ids.shape)
    tokens = torch.broadcast_to(token_ids.to(device=device), output_shape)
    state = tuple(torch.broadcast_to(word.unsqueeze(-1), output_shape) for word in state)
    candidate_key_0 = torch.broadcast_to(key_0.unsqueeze(-1), output_shape)
    candidate_key_1 = torch.broadcast_to(key_1.unsqueeze(-1), output_shape)
    token_words = tokens.to(torch.int64) & _UINT32_MASK
    outputs = _philox4x32_10(
        (token_words >> 2, state[0], state[1], state[2]),
        (
            (candidate_key_0 ^ state[3] ^ stream_1) & _UINT32_MASK,
            (candidate_key_1 ^ _TOKEN_DOMAIN ^ stream_0) & _UINT32_MASK,
        ),
    )
    word_index = token_words & 3
    output = outputs[0]
    for index in range(1, 4):
        output = torch.where(word_index == index, outputs[index], output)
    return output


# From vllm/v1/watermarking/prfs/base.py, repository vllm-project/vllm,
# commit 773dc86d8bf12bc18ab1ba06b1208f4d90a8ba02.
def uint32_to_uniform(values):
    mantissas = (values & _UINT32_MASK) >> 8
    return ((mantissas.to(torch.float64) + 1.0) / (2**24 + 1)).to(torch.float32)


def vllm_uniform(key, contexts, token_ids):
    """``PhiloxPRF(key).uniform`` (CPU path) of the same file."""
    return uint32_to_uniform(_philox_uint32(key & _UINT32_MASK, key >> 32, contexts, token_ids))


# From vllm/config/watermarking.py, repository vllm-project/vllm,
# commit 01c268bcd2def3eec9548e33c94184eb6b905867.
def derive_watermark_key(key: int, domain: bytes) -> int:
    digest = hashlib.sha256(domain + key.to_bytes(8, "big")).digest()
    return int.from_bytes(digest[:8], "big")


# From vllm/v1/watermarking/gumbel.py, repository vllm-project/vllm,
# commit 01c268bcd2def3eec9548e33c94184eb6b905867: _gamma_survival_integer_shape, the CPU path of
# GumbelWatermarker._sample_watermarked, DualKeyGumbelWatermarkDetector._score_tokens/_get_p_value.
def _gamma_survival_integer_shape(score: float, shape: int) -> float:
    if shape <= 0 or score <= 0:
        return 1.0
    log_score = math.log(score)
    log_term = 0.0
    max_log_term = 0.0
    log_terms = [log_term]
    for index in range(1, shape):
        log_term += log_score - math.log(index)
        log_terms.append(log_term)
        max_log_term = max(max_log_term, log_term)
    log_sum = max_log_term + math.log(sum(math.exp(term - max_log_term) for term in log_terms))
    return min(1.0, math.exp(min(0.0, -score + log_sum)))


def vllm_sample_watermarked(key, logits, contexts):
    vocabulary = torch.arange(logits.shape[-1], device=logits.device)
    uniforms = vllm_uniform(key, contexts, vocabulary)
    uniforms = uniforms.clamp_min(torch.finfo(torch.float32).tiny)
    noise = -torch.log(-torch.log(uniforms))
    return torch.argmax(logits + noise, dim=-1)


def vllm_dual_key_p_value(alpha, score, num_scored_tokens):
    variance = (1 - alpha) ** 2 + alpha**2
    if alpha in (0, 0.5, 1):
        return _gamma_survival_integer_shape(score / variance, round(num_scored_tokens / variance))
    shape = torch.tensor(num_scored_tokens / variance, dtype=torch.float64)
    scaled_score = torch.tensor(score / variance, dtype=torch.float64)
    return torch.special.gammaincc(shape, scaled_score).item()


# From vllm/v1/watermarking/detector.py, repository vllm-project/vllm,
# commit a6d669adc4b8b8c0a4398e0491bcb6db73cafc7a (WatermarkDetector._prepare_inputs and detect).
def vllm_detect(keys, weights, context_width, token_ids, deduplicate_contexts=True):
    contexts, targets = [], []
    seen_contexts = set()
    prefix = [-1] * context_width
    for token_id in token_ids:
        context = tuple(prefix[-context_width:])
        if not deduplicate_contexts or context not in seen_contexts:
            seen_contexts.add(context)
            contexts.append(context)
            targets.append(token_id)
        prefix.append(token_id)
    if not contexts:
        return 0.0, 0
    contexts = torch.tensor(contexts, dtype=torch.int64).reshape(-1, context_width)
    targets = torch.tensor(targets, dtype=torch.int64)
    scores = torch.stack(
        [-torch.log1p(-vllm_uniform(k, contexts, targets.unsqueeze(-1)).squeeze(-1).to(torch.float64)) for k in keys],
        dim=-1,
    )
    return (scores @ scores.new_tensor(weights)).sum().item(), len(targets)


# From vllm/v1/worker/gpu/sample/watermark.py (_repeated_context_mask_cpu, one row), repository
# vllm-project/vllm, commit 01b21056d9ef95ac8c60654181bd868446ffbace.
def vllm_repeated_context(history_tokens, current_context, skip_partial_context, generated_len):
    width = len(current_context)
    if skip_partial_context and generated_len < width:
        return True
    prefix = [-1] * width
    for token_id in history_tokens:
        if tuple(prefix[-width:]) == tuple(current_context):
            return True
        prefix.append(token_id)
    return False


# ------------------------------------------------------------------------------------------------
# vLLM's published compatibility vectors.
# ------------------------------------------------------------------------------------------------

# tests/watermarking/test_prf.py, repository vllm-project/vllm, commit 2c9c7b5b3fcdf0fa13f097f90e6741ad1cf74c01.
PRF_VECTOR = dict(key=42, contexts=[[1, 2, 3, 4], [4, 5, 6, 7]], token_ids=[7, 8],
                  words=[[425429266, 2706218805], [2494036831, 3424185538]],
                  mantissas=[[1661833, 10571167], [9742331, 13375724]])

# tests/watermarking/watermarking_goldens.json, repository vllm-project/vllm: "gumbel-*" entries from
# commit 01c268bcd2def3eec9548e33c94184eb6b905867, "dual-key-*" entries (hexadecimal floats) from
# commit a48a54473dc2124b16f8b0fb32c9379df058a412. The fixtures (tests/watermarking/golden_candidates.py):
# logits(pos) = float32((arange(V) * 37 + pos * 17) % 131 - 56 [+ bias at the dominant token]) / 16;
# routing draw i is key B iff softmax(log([1 - a, a]))[0] <= ROUTING[i % 64]; a repeated context
# (vLLM's repeated_context_mask) is sampled as argmax(logits).
ROUTING = tuple(round(((i + 1) * (5**0.5 - 1) / 2) % 1.0, 4) for i in range(64))

_G42 = [46, 24, 45, 80, 14, 26, 22, 124, 21, 45, 16, 30, 5, 89, 0, 10, 27, 70, 80, 62, 1, 11, 117, 53, 10, 45,
        94, 37, 43, 22, 78, 49, 119, 9, 22, 118, 82, 75, 32, 24, 84, 27, 122, 66, 78, 64, 124, 17, 91, 12, 51, 15,
        75, 64, 127, 45, 112, 15, 83, 114, 121, 109, 24, 77]

GOLDENS = [
    dict(id="gumbel-philox-key0-cw1", algorithm="gumbel", key=0, cw=1, scope="single_turn", det_dedup=True,
         generation=[24, 42, 66, 26, 51, 107, 36, 25, 63, 24, 6, 48, 65, 124, 117, 85, 45, 112, 48, 101, 19, 22, 89,
                     88, 63, 77, 115, 104, 65, 61, 32, 20, 95, 98, 30, 58, 86, 50, 39, 113, 122, 62, 69, 40, 29, 92,
                     113, 120, 52, 112, 108, 1, 25, 96, 3, 95, 84, 65, 76, 3, 68, 71, 81, 56],
         dedup_skips=10, score=236.2768211235414, p=4.532248480235615e-47, n=54),
    dict(id="gumbel-philox-key42-cw4", algorithm="gumbel", key=42, cw=4, scope="single_turn", det_dedup=True,
         generation=_G42, dedup_skips=0, score=296.27295787856264, p=7.128196280874065e-61, n=64),
    dict(id="gumbel-philox-key42-cw4-wrong-key", algorithm="gumbel", key=42, detection_key=43, cw=4,
         scope="single_turn", det_dedup=True, generation=_G42, dedup_skips=0, score=63.25096716585621,
         p=0.5208447936891313, n=64),
    dict(id="gumbel-philox-key2p32-cw5-no-dedup", algorithm="gumbel", key=2**32, cw=5, scope="none", det_dedup=False,
         generation=[21, 10, 73, 94, 19, 61, 85, 42, 95, 116, 105, 47, 58, 36, 74, 42, 95, 70, 34, 37, 125, 29, 64,
                     85, 70, 73, 44, 90, 47, 107, 25, 70, 98, 41, 1, 51, 8, 57, 99, 88, 80, 119, 55, 15, 121, 43, 124,
                     56, 34, 87, 115, 65, 4, 110, 53, 77, 58, 126, 19, 72, 64, 113, 109, 123],
         dedup_skips=0, score=263.04926919645095, p=1.1027575381260964e-49, n=64),
    dict(id="gumbel-philox-keymax-cw16-all", algorithm="gumbel", key=2**64 - 1, cw=16, scope="all", det_dedup=True,
         generation=[46, 42, 38, 34, 30, 26, 22, 18, 14, 10, 6, 2, 44, 125, 121, 117, 88, 6, 97, 12, 86, 121, 0, 106,
                     98, 119, 101, 36, 47, 110, 25, 24, 102, 6, 101, 37, 114, 50, 53, 127, 109, 80, 69, 5, 96, 60, 14,
                     42, 38, 58, 118, 79, 4, 110, 42, 102, 66, 80, 72, 33, 78, 106, 67, 52],
         dedup_skips=16, score=220.2767573421712, p=6.166345567165398e-36, n=64),
    dict(id="dual-key-gumbel-philox-key0-cw1-alpha0", algorithm="dual_key_gumbel", key=0, cw=1, alpha=0.0,
         scope="single_turn", det_dedup=True,
         generation=[81, 91, 84, 122, 37, 118, 11, 3, 116, 56, 66, 37, 44, 40, 85, 31, 102, 73, 126, 16, 40, 93, 11,
                     85, 81, 77, 41, 12, 118, 61, 57, 53, 38, 111, 115, 5, 1, 99, 113, 28, 87, 55, 83, 51, 47, 57, 124,
                     31, 116, 112, 30, 43, 89, 110, 60, 10, 9, 58, 114, 125, 68, 78, 106, 56],
         dedup_skips=9, score="0x1.cbc22aa75c528p+7", p="0x1.38fa65170e6c5p-145", n=55,
         key_a=15691511769010696906, key_b=9736202488081271922),
    dict(id="dual-key-gumbel-philox-key0-cw4-alpha0.1", algorithm="dual_key_gumbel", key=0, cw=4, alpha=0.1,
         scope="single_turn", det_dedup=True,
         generation=[70, 56, 91, 90, 72, 68, 17, 78, 21, 116, 104, 62, 15, 100, 82, 13, 88, 70, 112, 62, 79, 57, 11,
                     113, 88, 80, 23, 90, 79, 42, 18, 60, 10, 73, 94, 64, 96, 71, 35, 56, 38, 93, 37, 54, 82, 127, 0,
                     45, 37, 75, 19, 92, 68, 127, 28, 56, 45, 69, 8, 1, 110, 39, 127, 56],
         dedup_skips=0, key_b_routed=7, score="0x1.e39f5dd1a427ap+7", p="0x1.d8d3619c2d85fp-170", n=64),
    dict(id="dual-key-gumbel-philox-key2p32-cw5-alpha0.5", algorithm="dual_key_gumbel", key=2**32, cw=5, alpha=0.5,
         scope="single_turn", det_dedup=True,
         generation=[53, 116, 48, 94, 47, 118, 64, 123, 106, 65, 59, 48, 4, 86, 64, 32, 84, 116, 23, 23, 65, 15, 50,
                     67, 49, 69, 34, 76, 1, 95, 103, 120, 102, 69, 125, 121, 57, 39, 127, 113, 98, 87, 9, 51, 100, 53,
                     46, 42, 123, 55, 108, 100, 50, 103, 67, 80, 94, 41, 97, 117, 18, 66, 74, 38],
         dedup_skips=0, key_b_routed=33, score="0x1.442218bcaf89dp+7", p="0x1.1e6aa402e9285p-117", n=64,
         key_a=9864452095710749384, key_b=10834826187781349534),
    dict(id="dual-key-gumbel-philox-key42-cw4-alpha-mismatch", algorithm="dual_key_gumbel", key=42, cw=4, alpha=0.1,
         detection_alpha=0.2, scope="single_turn", det_dedup=True,
         generation=[46, 56, 6, 122, 30, 100, 121, 67, 63, 116, 13, 65, 90, 47, 25, 88, 120, 31, 2, 37, 40, 34, 92,
                     28, 45, 126, 94, 90, 18, 36, 74, 102, 10, 13, 101, 51, 29, 29, 46, 81, 63, 2, 29, 78, 121, 89, 124,
                     109, 123, 34, 30, 93, 4, 110, 28, 34, 105, 41, 5, 48, 81, 120, 60, 70],
         dedup_skips=0, key_b_routed=7, score="0x1.ae7cdbab672aap+7", p="0x1.eff6e9045c0cap-163", n=64,
         key_a=37150756557148556, key_b=15826636237805488045),
    dict(id="dual-key-gumbel-philox-key7-cw4-near-threshold", algorithm="dual_key_gumbel", key=7, cw=4, alpha=0.1,
         scope="single_turn", det_dedup=True, vocab=16, generation=[7, 3, 13, 2, 5, 1, 4, 14],
         dedup_skips=0, key_b_routed=1, score="0x1.1487292bfb4a2p+4", p="0x1.174a0a5c98885p-9", n=8,
         key_a=3490214442843822077, key_b=7720047515392181251),
    dict(id="dual-key-gumbel-philox-keymax-cw16-alpha1", algorithm="dual_key_gumbel", key=2**64 - 1, cw=16,
         alpha=1.0, scope="single_turn", det_dedup=True,
         generation=[45, 3, 73, 41, 47, 40, 21, 85, 80, 70, 34, 48, 58, 47, 96, 28, 56, 77, 101, 30, 97, 103, 96, 53,
                     87, 37, 34, 113, 33, 25, 103, 113, 102, 6, 101, 37, 29, 75, 46, 67, 105, 48, 115, 51, 114, 4, 0,
                     81, 98, 35, 115, 111, 7, 78, 21, 52, 112, 48, 19, 47, 68, 17, 106, 73],
         dedup_skips=0, score="0x1.0efa2569c44f9p+8", p="0x1.880bf6f504686p-172", n=64,
         key_a=11075965703501209888, key_b=7399018451426338514),
    dict(id="dual-key-gumbel-philox-keymax-cw4-alpha0.4", algorithm="dual_key_gumbel", key=2**64 - 1, cw=4,
         alpha=0.4, scope="single_turn", det_dedup=True,
         generation=[7, 42, 13, 55, 103, 125, 96, 85, 119, 38, 101, 108, 72, 8, 96, 120, 116, 109, 119, 62, 26, 107,
                     63, 113, 102, 34, 83, 90, 121, 53, 18, 67, 20, 12, 101, 40, 86, 89, 59, 81, 24, 20, 72, 51, 22,
                     117, 14, 88, 116, 44, 100, 118, 75, 7, 10, 70, 91, 5, 33, 22, 4, 71, 31, 121],
         dedup_skips=0, key_b_routed=26, score="0x1.63f71fc4a2c34p+7", p="0x1.aa209501b36bfp-141", n=64),
    dict(id="dual-key-gumbel-philox-repeated-cw1", algorithm="dual_key_gumbel", key=42, cw=1, alpha=0.1,
         scope="single_turn", det_dedup=True, vocab=16, dominant=(3, 52),
         generation=[3, 3, 6, 9, 12, 3, 3, 3, 3, 10, 13, 2, 1, 1, 3, 3, 3, 6, 2, 5, 12, 8, 4, 14, 3, 6, 2, 5, 1, 3, 3,
                     3, 10, 6, 2, 5, 1, 3, 3, 3, 6, 13, 9, 5, 1, 3, 3, 3],
         score="0x1.7e57e335a46dcp+4", p="0x1.687b9d5a574afp-9", n=13),
]


def _float(x):
    return float.fromhex(x) if isinstance(x, str) else float(x)


def _fixture_logits(position, vocab, dominant=None):
    values = (np.arange(vocab, dtype=np.int64) * 37 + position * 17) % 131 - 56
    if dominant is not None:
        values[dominant[0]] += dominant[1]
    return (values.astype(np.float32) / np.float32(16))[None, :]


def _config(g):
    if g["algorithm"] == "gumbel":
        return eg.VllmGumbelConfig(key=g["key"], context_width=g["cw"], deduplicate_contexts=g["scope"])
    return eg.VllmDualKeyGumbelConfig(key=g["key"], context_width=g["cw"], deduplicate_contexts=g["scope"],
                                      alpha=g["alpha"])


def _generate_like_vllm_goldens(g):
    """The golden generator's loop with our sampler (eg.sample_tokens) in place of vLLM's."""
    config = _config(g)
    vocab = g.get("vocab", 128)
    alpha = g.get("alpha")
    routes = g["algorithm"] == "dual_key_gumbel" and 0 < alpha < 1
    # float32 softmax of log([1 - a, a]), as the golden router computes it
    prob_a = None
    if routes:
        lg = torch.tensor([1 - alpha, alpha], dtype=torch.float32).log()
        prob_a = float(lg.softmax(dim=-1)[0])
    generated, skips, routed = [], 0, 0
    for position in range(len(g["generation"])):
        cw = config.context_width
        context = ([-1] * cw + generated)[-cw:]
        logits = _fixture_logits(position, vocab, g.get("dominant"))
        skipped = config.deduplicate_contexts != "none" and vllm_repeated_context(
            generated, context, config.deduplicate_contexts == "all", len(generated))
        use_b = None
        if routes:
            use_b = np.array([prob_a <= ROUTING[position % len(ROUTING)]])
            routed += int(use_b[0])
        token = int(eg.sample_tokens(config, logits, np.array([context]), use_key_b=use_b)[0])
        if skipped:
            skips += 1
            token = int(np.argmax(logits[0]))
        generated.append(token)
    return generated, skips, routed


# ------------------------------------------------------------------------------------------------
# The PRF, bit for bit.
# ------------------------------------------------------------------------------------------------

def test_published_prf_vector():
    v = PRF_VECTOR
    words = eg.philox_words(v["key"], np.array(v["contexts"]), np.array(v["token_ids"]))
    assert words.dtype == np.uint32 and words.tolist() == v["words"]
    u = eg.uniforms(v["key"], np.array(v["contexts"]), np.array(v["token_ids"]))
    expected = ((np.array(v["mantissas"], np.float64) + 1) / (2**24 + 1)).astype(np.float32)
    np.testing.assert_array_equal(u, expected)
    assert u.dtype == np.float32


def test_prf_matches_vllm_code_on_many_contexts():
    """1,200 contexts (widths 1..17, -1 pads, token ids up to 2**32 - 1, edge and random 64-bit keys)."""
    rng = np.random.default_rng(20261201)
    keys = [0, 1, 42, 2**32 - 1, 2**32, 2**63, 2**64 - 1] + [int(k) * 2 + 1 for k in rng.integers(0, 2**63, 5, dtype=np.int64)]
    widths = [1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17]
    checked = 0
    for i, width in enumerate(widths):
        key = keys[i % len(keys)]
        ctx = rng.integers(0, 2**32, size=(110, width), dtype=np.int64)
        ctx[:, :width][rng.random((110, width)) < 0.2] = -1
        ctx[:20] = rng.integers(0, 256, size=(20, width))  # small ids too
        tok = rng.integers(0, 2**32, size=(110, 1), dtype=np.int64)
        ours = eg.philox_words(key, ctx, tok)
        ref = _philox_uint32(key & _UINT32_MASK, key >> 32, torch.tensor(ctx), torch.tensor(tok)).numpy()
        np.testing.assert_array_equal(ours.astype(np.int64), ref)
        np.testing.assert_array_equal(eg.uniforms(key, ctx, tok).view(np.uint32),
                                      vllm_uniform(key, torch.tensor(ctx), torch.tensor(tok)).numpy().view(np.uint32))
        checked += len(ctx)
    assert checked >= 1000


def test_whole_vocabulary_matches_vllm_code():
    """Every token of a vocabulary that is not a multiple of 4, for 1,000 contexts and 3 keys."""
    rng = np.random.default_rng(7)
    vocab = 1001
    for key, width, rows in ((42, 4, 500), (2**64 - 1, 1, 250), (15726070495360670683, 6, 250)):
        ctx = rng.integers(-1, 50_000, size=(rows, width))
        ours = eg.vocab_uniforms(key, ctx, vocab)
        ref = vllm_uniform(key, torch.tensor(ctx), torch.arange(vocab)).numpy()
        assert ours.shape == (rows, vocab) and ours.dtype == np.float32
        np.testing.assert_array_equal(ours.view(np.uint32), ref.view(np.uint32))
        np.testing.assert_array_equal(ours[:3], eg.uniforms(key, ctx[:3], np.arange(vocab)))


def test_uniform_conversion_and_range():
    # the CPU (float64 division) and Triton (float32 ulp below (m + 1) 2^-24) conversions agree for all mantissas
    m = np.arange(2**24, dtype=np.uint32)
    cpu = eg.to_uniform(m << np.uint32(8))
    gpu = ((m + np.uint32(1)).astype(np.float32) * np.float32(2.0**-24)).view(np.uint32) - np.uint32(1)
    np.testing.assert_array_equal(cpu.view(np.uint32), gpu)
    assert cpu.min() > 0 and cpu.max() < 1


def test_gumbel_noise_and_sampling_match_vllm_cpu_path():
    rng = np.random.default_rng(3)
    ctx = rng.integers(-1, 30_000, size=(1000, 4))
    logits = rng.normal(size=(1000, 257)).astype(np.float32)
    u = eg.vocab_uniforms(42, ctx, 257)
    ref_noise = (-torch.log(-torch.log(torch.from_numpy(u).clamp_min(torch.finfo(torch.float32).tiny)))).numpy()
    # float32 log differs between libraries in the last bits (NumPy vs torch's CPU kernels: up to 4 ulp
    # inside, measured); the uniforms are bit-equal, the noise is equal to ~1e-6
    noise = eg.gumbel_noise(u)
    assert np.all(np.abs(noise - ref_noise) <= 4e-6 * np.maximum(1.0, np.abs(ref_noise)))
    ours = eg.gumbel_argmax(42, logits, ctx)
    ref = vllm_sample_watermarked(42, torch.from_numpy(logits), torch.tensor(ctx)).numpy()
    np.testing.assert_array_equal(ours, ref)


def test_jax_whole_vocabulary_is_bit_equal():
    rng = np.random.default_rng(11)
    for key in (42, 2**64 - 1, 2**32):  # width 6: a full and a padded block; one compilation
        ctx = rng.integers(-1, 2**31 - 1, size=(64, 6))
        ours = eg.vocab_uniforms(key, ctx, 1003)
        jx = np.asarray(eg.vocab_uniforms_jax(eg.key_words(key), ctx.astype(np.int32), 1003))
        np.testing.assert_array_equal(jx.view(np.uint32), ours.view(np.uint32))
        logits = rng.normal(size=(64, 1003)).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(eg.gumbel_argmax_jax(eg.key_words(key), logits, ctx.astype(np.int32))),
                                      eg.gumbel_argmax(key, logits, ctx))


def test_key_derivation():
    for key in (0, 7, 42, 2**32, 2**64 - 1):
        for domain in (b"key_a", b"key_b"):
            assert eg.derive_watermark_key(key, domain) == derive_watermark_key(key, domain)
    cfg = eg.VllmDualKeyGumbelConfig(key=0)
    assert cfg.keys() == (15691511769010696906, 9736202488081271922)


# ------------------------------------------------------------------------------------------------
# vLLM's goldens: generation and detection.
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("g", GOLDENS, ids=[g["id"] for g in GOLDENS])
def test_vllm_goldens(g):
    config = _config(g)
    if "key_a" in g:
        assert config.keys() == (g["key_a"], g["key_b"])
    generated, skips, routed = _generate_like_vllm_goldens(g)
    assert generated == g["generation"]
    if "dedup_skips" in g:
        assert skips == g["dedup_skips"]
    if "key_b_routed" in g:
        assert routed == g["key_b_routed"]

    det = config if "detection_key" not in g else _config(dict(g, key=g["detection_key"]))
    alpha = g.get("detection_alpha", g.get("alpha"))
    kw = {} if g["algorithm"] == "gumbel" else {"alpha": alpha}
    result = eg.score(det, g["generation"], dedup="context" if g["det_dedup"] else "none", **kw)
    assert result.n == g["n"]
    assert result.score == pytest.approx(_float(g["score"]), rel=1e-12)
    assert eg.engine_p_value(det, result.score, result.n, **kw) == pytest.approx(_float(g["p"]), rel=1e-9)
    if g["algorithm"] == "gumbel" or alpha in (0.0, 0.5, 1.0):  # vLLM's p-value is exact there
        assert result.p_value == pytest.approx(_float(g["p"]), rel=1e-9)


def test_detector_matches_vllm_detector_on_repetitive_texts():
    rng = np.random.default_rng(5)
    for trial in range(12):
        width = int(rng.integers(1, 6))
        text = rng.integers(0, 6 if trial % 2 else 5000, size=int(rng.integers(1, 300))).tolist()
        dual = trial % 3 == 0
        alpha = [0.1, 0.2, 0.37][trial % 3]
        cfg = (eg.VllmDualKeyGumbelConfig(key=trial * 977, context_width=width, alpha=alpha) if dual
               else eg.VllmGumbelConfig(key=trial * 977, context_width=width))
        keys = cfg.keys()
        weights = [1 - alpha, alpha] if dual else [1.0]
        for dedup, vllm_dedup in (("context", True), ("none", False)):
            ref_score, ref_n = vllm_detect(keys, weights, width, text, vllm_dedup)
            ours = eg.score(cfg, text, dedup=dedup)
            assert ours.n == ref_n
            assert ours.score == pytest.approx(ref_score, rel=1e-12)
            ref_p = vllm_dual_key_p_value(alpha, ref_score, ref_n) if dual else _gamma_survival_integer_shape(ref_score, ref_n)
            assert eg.engine_p_value(cfg, ours.score, ours.n) == pytest.approx(ref_p, rel=1e-9, abs=1e-300)
            if not dual:
                assert ours.p_value == pytest.approx(ref_p, rel=1e-9, abs=1e-300)
    # (context, token) deduplication scores at least as many tokens as context deduplication
    text = [1, 2, 3, 1, 2, 4, 1, 2, 3]
    cfg = eg.VllmGumbelConfig(key=1, context_width=2)
    assert [eg.score(cfg, text, dedup=d).n for d in ("context", "ngram", "none")] == [7, 8, 9]


# ------------------------------------------------------------------------------------------------
# Exact nulls.
# ------------------------------------------------------------------------------------------------

def test_gamma_log_sf_is_exact():
    for n, s in ((1, 0.3), (5, 2.0), (64, 80.0), (300, 250.0), (300, 420.0)):
        assert eg.gamma_log_sf(n, s) == pytest.approx(math.log(stats.gamma.sf(s, n)), rel=1e-12)
    assert eg.gamma_log_sf(64, 296.27295787856264) == pytest.approx(math.log(7.128196280874065e-61), rel=1e-12)
    assert eg.gamma_log_sf(2000, 9000.0) < -3000  # far below float64's smallest p
    assert eg.gamma_log_sf(0, 3.0) == 0.0 and eg.gamma_log_sf(4, 0.0) == 0.0


@pytest.mark.parametrize("n,s,alpha", [(1, 1.5, 0.1), (8, 9.0, 0.2), (20, 25.0, 0.3), (64, 90.0, 0.1),
                                       (64, 50.0, 0.45), (40, 35.0, 0.9)])
def test_dual_key_null_is_exact(n, s, alpha):
    a, b = 1 - alpha, alpha

    def integrand(x):  # P(aX + bY >= s) = P(aX >= s) + ∫_0^{s/a} f_n(x) P(Y >= (s - a x)/b) dx
        return stats.gamma.pdf(x, n) * stats.gamma.sf((s - a * x) / b, n)

    p = integrate.quad(integrand, 0, s / a, epsabs=0, epsrel=1e-12, limit=400)[0] + stats.gamma.sf(s / a, n)
    assert eg.dual_key_log_sf(n, s, alpha) == pytest.approx(math.log(p), rel=1e-9)


def test_dual_key_null_special_cases():
    assert eg.dual_key_log_sf(50, 40.0, 0.5) == pytest.approx(eg.gamma_log_sf(100, 80.0), rel=1e-13)
    assert eg.dual_key_log_sf(50, 40.0, 0.0) == eg.gamma_log_sf(50, 40.0)
    assert eg.dual_key_log_sf(50, 40.0, 1.0) == eg.gamma_log_sf(50, 40.0)
    # symmetric in alpha <-> 1 - alpha; deep tail stays finite
    assert eg.dual_key_log_sf(64, 200.0, 0.1) == pytest.approx(eg.dual_key_log_sf(64, 200.0, 0.9), rel=1e-12)
    assert -1e4 < eg.dual_key_log_sf(500, 3000.0, 0.1) < -700


# ------------------------------------------------------------------------------------------------
# Statistics: watermarked texts are detected, unwatermarked ones are not (more than chance).
# ------------------------------------------------------------------------------------------------

def _simulate(config, num_texts, num_tokens, vocab, rng, watermark=True):
    """vLLM's rule on random high-entropy distributions: Gumbel-max with the PRF (a repeated context,
    or an unwatermarked text, is sampled with ordinary random Gumbel noise); dual key routes with rng."""
    texts = np.zeros((num_texts, num_tokens), np.int64)
    seen = [set() for _ in range(num_texts)]
    cw = config.context_width
    for t in range(num_tokens):
        logits = rng.normal(scale=1.0, size=(num_texts, vocab)).astype(np.float32)
        ctx = np.concatenate([np.full((num_texts, cw), -1), texts[:, :t]], axis=1)[:, -cw:]
        plain = np.argmax(logits + rng.gumbel(size=logits.shape).astype(np.float32), axis=-1)
        if not watermark:
            texts[:, t] = plain
            continue
        use_b = None
        if isinstance(config, eg.VllmDualKeyGumbelConfig) and 0 < config.alpha < 1:
            use_b = rng.random(num_texts) < config.alpha
        marked = eg.sample_tokens(config, logits, ctx, use_key_b=use_b)
        repeated = np.array([tuple(c) in s for c, s in zip(ctx.tolist(), seen)])
        for c, s in zip(ctx.tolist(), seen):
            s.add(tuple(c))
        texts[:, t] = np.where(repeated, plain, marked)
    return texts


@pytest.mark.parametrize("config", [eg.VllmGumbelConfig(key=2026), eg.VllmDualKeyGumbelConfig(key=2026, alpha=0.1)],
                         ids=["gumbel", "dual_key_gumbel"])
def test_watermarked_texts_are_detected(config):
    rng = np.random.default_rng(17)
    texts = _simulate(config, 40, 128, 1000, rng)
    p = np.array([eg.score(config, t).p_value for t in texts])
    assert np.mean(p <= 0.01) >= 0.9
    wrong = dataclasses.replace(config, key=2027)
    assert np.mean([eg.score(wrong, t).p_value <= 0.01 for t in texts]) <= 0.2


def test_false_positive_rate_within_binomial_band():
    """2,000 unwatermarked texts per detector: rejections at 0.01 and 0.1 lie in the two-sided binomial
    band whose total mass outside is 1e-5 (eight checks: false-failure probability < 1e-4)."""
    rng = np.random.default_rng(23)
    num = 2000
    texts = _simulate(eg.VllmGumbelConfig(key=1), num, 64, 200, rng, watermark=False)
    for config in (eg.VllmGumbelConfig(key=99), eg.VllmDualKeyGumbelConfig(key=99, alpha=0.1)):
        for dedup in ("context", "ngram"):
            p = eg.score_batch(config, texts, dedup=dedup).p_value
            for level in (0.01, 0.1):
                lo, hi = stats.binom.ppf(5e-6, num, level), stats.binom.isf(5e-6, num, level)
                assert lo <= int(np.sum(p <= level)) <= hi, (config, dedup, level)


def test_batch_scores_equal_single_scores():
    rng = np.random.default_rng(29)
    texts = rng.integers(0, 7, size=(9, 40))
    lengths = np.array([40, 0, 1, 5, 17, 40, 33, 2, 39])
    for config in (eg.VllmGumbelConfig(key=3, context_width=2), eg.VllmDualKeyGumbelConfig(key=3, alpha=0.3)):
        for dedup in ("context", "ngram", "none"):
            batch = eg.score_batch(config, texts, lengths, dedup=dedup)
            for i, length in enumerate(lengths):
                one = eg.score(config, texts[i, :length], dedup=dedup)
                assert (batch.n[i], batch.score[i]) == (one.n, pytest.approx(one.score, rel=1e-13))
                assert batch.p_value[i] == pytest.approx(one.p_value, rel=1e-12)
                assert batch.log_p_value[i] == pytest.approx(eg.log_p_value(config, one.score, one.n), rel=1e-12)


# ------------------------------------------------------------------------------------------------
# Configuration.
# ------------------------------------------------------------------------------------------------

def test_config_never_shows_the_key():
    key = 123456789012345
    cfg = eg.config_from_dict(json.dumps({"algorithm": "dual_key_gumbel", "key": key, "alpha": 0.2,
                                          "context_width": 3, "deduplicate_contexts": "all",
                                          "deduplicate_contexts_max_history": None, "prf": "philox",
                                          "allow_target_only_watermarking": True}))
    assert isinstance(cfg, eg.VllmDualKeyGumbelConfig)
    assert (cfg.alpha, cfg.context_width, cfg.deduplicate_contexts, cfg.deduplicate_contexts_max_history) == \
        (0.2, 3, "all", None)
    for text in (repr(cfg), str(cfg), json.dumps(cfg.record())):
        assert str(key) not in text and cfg.fingerprint in text
    rec = cfg.record()
    assert "key" not in rec and rec["algorithm"] == "dual_key_gumbel" and rec["prf_version"] == eg.PRF_VERSION
    assert len(cfg.fingerprint) == 16 and cfg.fingerprint != eg.VllmDualKeyGumbelConfig(key=key + 1).fingerprint
    plain = eg.config_from_dict({"key": 42})
    assert type(plain) is eg.VllmGumbelConfig and plain.context_width == 4
    assert plain.deduplicate_contexts == "single_turn" and plain.deduplicate_contexts_max_history == 8192
    assert eg.VllmGumbelConfig.from_dict('{"key": 5, "algorithm": "gumbel", "alpha": 0.1}').key == 5


@pytest.mark.parametrize("data,error", [
    ({"algorithm": "gumbel"}, "no 'key'"),
    ({"key": -1}, r"\[0, 2\*\*64 - 1\]"),
    ({"key": 2**64}, r"\[0, 2\*\*64 - 1\]"),
    ({"key": 1, "algorithm": "sbw"}, "unsupported vLLM watermark algorithm"),
    ({"key": 1, "sbw_gamma": 0.5}, "unknown field"),
    ({"key": 1, "algorithm": "gumbel", "alpha": 2.0, "typo": 1}, "unknown field"),
    ({"key": 1, "context_width": 0}, "context_width"),
    ({"key": 1, "algorithm": "dual_key_gumbel", "alpha": 1.5}, "alpha"),
    ({"key": 1, "deduplicate_contexts": "everything"}, "deduplicate_contexts"),
    ({"key": 1, "prf": "hmac_sha256"}, "prf"),
    ("{not json", "not valid JSON"),
])
def test_config_validation(data, error):
    with pytest.raises((ValueError, TypeError), match=error):
        eg.config_from_dict(data)


def test_input_validation():
    cfg = eg.VllmGumbelConfig(key=1)
    with pytest.raises(ValueError, match="one text"):
        eg.score(cfg, np.zeros((2, 3), np.int64))
    with pytest.raises(ValueError, match=r"\[0, 2\*\*32\)"):
        eg.score(cfg, [1, -1, 2])
    with pytest.raises(TypeError, match="integers"):
        eg.score(cfg, [1.5, 2.0])
    with pytest.raises(ValueError, match="dedup"):
        eg.score(cfg, [1, 2], dedup="tokens")
    with pytest.raises(ValueError, match="dual_key_gumbel only"):
        eg.score(cfg, [1, 2], alpha=0.3)
    with pytest.raises(TypeError, match="integer array"):
        eg.uniforms(1, np.array([[0.5]]), np.array([1]))
    with pytest.raises(ValueError, match="use_key_b"):
        eg.sample_tokens(eg.VllmDualKeyGumbelConfig(key=1), np.zeros((2, 8)), np.zeros((2, 4), np.int64))
    with pytest.raises(ValueError, match=r"contexts must be \[B, 4\]"):
        eg.sample_tokens(cfg, np.zeros((2, 8)), np.zeros((2, 3), np.int64))
    assert eg.score(cfg, []) == (0.0, 0, 1.0)
