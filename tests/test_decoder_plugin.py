"""A new watermark scheme is one module and one registry call: defined in this file, registered, run under
Alg. 1 through ``speculative.generate`` and ``wmspec-generate``, and detected with exact p-values through
``detect.statistics`` and ``wmspec-detect``, without a change to the package."""

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import stats
from tests.cli_calls import lines, run_tool, secret_file_flag
from wmspec_jax import decoders, detect, keys, prf, speculative, toy

LANE = 40  # a lane no built-in scheme reads: the scheme's own stream under one secret


@dataclasses.dataclass(frozen=True)
class LaneMixture(decoders.WatermarkDecoder):
    """(1 − θ) Id + θ S (Eq. 9) with S Gumbel-max on a lane of its own: with probability θ (decided by the
    draw's private uniform) the token is the keyed argmax of log(U_w) / P_w, else a plain draw. Unbiased
    and not degenerate; its statistic is the emitted token's uniform in its lane, exactly U(0, 1) when the
    text does not depend on the key."""

    theta: float = 0.8
    kind: ClassVar[str] = "lane_mixture"
    private_sampling: ClassVar[bool] = True

    def __post_init__(self):
        decoders.base.check_real("theta", self.theta, 0.0, 1.0, "LaneMixture")

    @property
    def label(self) -> str:
        return f"LaneMixture(θ={self.theta:g})"

    def _uniforms(self, seeds, tokens):
        return prf.to_uniform(prf.hash_values(seeds, tokens, LANE))

    def watermark_index(self, weights, ids, seeds, uniform=None):
        self.check_uniform(uniform)
        tokens = jnp.arange(weights.shape[-1], dtype=jnp.uint32) if ids is None else ids.astype(jnp.uint32)
        keyed = decoders.gumbel_max_index(weights, self._uniforms(seeds[:, None, :], tokens))
        theta = jnp.float32(self.theta)
        plain = decoders.inverse_cdf(weights, jnp.clip((uniform - theta) / (1.0 - theta), 0.0, 1.0 - 2.0**-24))
        return jnp.where(uniform < theta, keyed, plain)

    def token_statistic(self, seeds, tokens, *, version, vocab_size):
        return self._uniforms(seeds, tokens)


@pytest.fixture(scope="module")
def registered():
    decoders.register(LaneMixture)
    yield LaneMixture
    decoders.unregister(LaneMixture.kind)


V, N = 4, 6000
P_TAB, Q_TAB = toy.markov_pair(V, 0.35, concentration=2.0, seed=3)  # the law test's pair (small V)
DETECT_V = 16
DETECT_P, DETECT_Q = toy.markov_pair(DETECT_V, 0.3, concentration=1.0, seed=0)  # the detection tests' pair
PROMPT = np.array([0, 1, 2, 3])


def alg1(decoder, keys_, n=N, rng=0, new=3, tables=(P_TAB, Q_TAB)):
    cfg = speculative.SpeculativeConfig(method="pseudorandom", decoder=decoder, lookahead=2, max_new_tokens=new,
                                        temperature=1.0)
    p_tab, q_tab = tables
    model = toy.markov_model(p_tab.shape[0])
    return speculative.generate(model, toy.log_table(p_tab), np.broadcast_to(PROMPT, (n, 4)), np.full(n, 4), keys_,
                                jax.random.key(rng), cfg, draft=model, draft_params=toy.log_table(q_tab))


def test_a_registered_scheme_runs_alg1_with_the_targets_law_and_is_detected_exactly(registered):
    scheme = decoders.WatermarkDecoder("lane_mixture", options={"theta": 0.9})  # built by name, like the tools
    assert scheme == LaneMixture(0.9) and "lane_mixture" in decoders.names()
    assert scheme.statistic in decoders.statistics()
    # Thm 4.1 (a): the first three tokens' law over keys is P's (an unbiased scheme keeps it under Alg. 1)
    res = alg1(scheme, prf.stream_keys(list(range(N))))
    toks = np.asarray(res.tokens[:, 4:7])
    counts = np.bincount(toks[:, 0] * V * V + toks[:, 1] * V + toks[:, 2], minlength=V**3)
    stats.assert_counts_match(counts, toy.sequence_probs(P_TAB, PROMPT[-1], 3), "lane mixture under Alg. 1")
    # detection: 64-token texts under per-text keys; Ars-Prior on the scheme's statistics, exact p-values
    n = 400
    text_keys = keys.text_keys(b"plugin-secret", range(n), run="plugin")
    marked = alg1(scheme, text_keys, n=n, rng=1, new=64, tables=(DETECT_P, DETECT_Q))
    rec = detect.records_from_generation(marked)
    common = dict(lengths=rec.lengths, starts=rec.starts, vocab_size=DETECT_V)
    st = detect.statistics(scheme, rec.tokens, text_keys, **common)
    assert st.provenance.decoder == "lane_mixture"
    p = np.asarray(detect.make("ars-prior", st.provenance, draft_fraction=0.5).score(st).pvalue)
    assert np.mean(p <= 0.01) > 0.5, np.mean(p <= 0.01)
    # the null: another secret's keys, and Gumbel-max's detector under the same keys (separate lanes)
    other = keys.text_keys(b"another-secret", range(n), run="plugin")
    for stats_ in (detect.statistics(scheme, rec.tokens, other, **common),
                   detect.statistics(decoders.gumbel(), rec.tokens, text_keys, **common)):
        q = np.asarray(detect.make("ars-prior", stats_.provenance, draft_fraction=0.5).score(stats_).pvalue)
        stats.assert_binomial_rate(int((q <= 0.01).sum()), q.size, 0.01, "null of the registered scheme")
    with pytest.raises(ValueError, match="taken"):
        decoders.register(type("Other", (LaneMixture,), {"__qualname__": "Other"}))


def test_the_tools_generate_and_detect_a_registered_scheme(registered, tmp_path):
    from wmspec_jax.cli import detect as detect_cli
    from wmspec_jax.cli import generate as generate_cli

    secret = "plugin-cli-secret-never-printed"
    key = secret_file_flag(tmp_path, secret)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Why is the sky blue?\nHow do bees make honey?\n")
    out = tmp_path / "gen.jsonl"
    rc, _, err = run_tool(generate_cli, [str(prompts), key, "--decoder=lane_mixture", "--decoder_option=theta=0.95",
                                         "--max_new_tokens=64", "--temperature=1.0", f"--output={out}"], secret)
    assert rc == 0, err
    records = lines(out.read_text())
    assert [r["decoder"] for r in records] == ["lane_mixture"] * 2
    assert records[0]["decoder_options"] == {"theta": 0.95} and records[0]["dipmark_alpha"] is None
    rc, stdout, err = run_tool(detect_cli, [str(out), key, "--format=json"], secret)
    assert rc == 0, err
    res = lines(stdout)
    assert [r["provenance"]["decoder"] for r in res] == ["lane_mixture"] * 2
    assert all(r["detector"]["name"] == "ars-prior" and r["verdict"] == "watermarked" for r in res), \
        [(r["num_scored"], r["pvalue"]) for r in res]
    rc, _, err = run_tool(generate_cli, [str(prompts), key, "--decoder=lane_mixture", "--decoder_option=theta=2",
                                         f"--output={tmp_path / 'bad.jsonl'}"], secret)
    assert rc == 2 and "LaneMixture needs theta in [0, 1], got theta=2" in err and "--decoder_option" in err
