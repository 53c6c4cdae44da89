"""The generation setting: its rules, its text-line record both ways, its config and its provenance."""

import json
import warnings

import pytest

from wmspec_jax import decoders, keys, prf, speculative
from wmspec_jax.setting import Setting, SpeculativeConfig

GUMBEL = decoders.WatermarkDecoder("gumbel")
SYNTHID = decoders.WatermarkDecoder("synthid", 20)

SETTINGS = {
    "one chain": Setting(method="pseudorandom", decoder=GUMBEL, lookahead=3, temperature=0.7, top_k=50),
    "tree 3x2x1, distinct": Setting.from_shape("pseudorandom", SYNTHID, 3, "3x2x1d", context_width=2),
    "key sequence": Setting(method="dathathri", decoder=GUMBEL, lookahead=2, key_sequence=256),
    "SynthID draft decoder": Setting(method="hu", decoder=GUMBEL, draft_decoder=SYNTHID, lookahead=4),
    "basic, no speculation": Setting(method="basic", decoder=decoders.WatermarkDecoder("kgw"), lookahead=0),
    "draft at its own temperature": Setting(method="pseudorandom", lookahead=2, temperature=0.7,
                                            draft_temperature=1.5),
}


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_the_record_reads_back_to_the_same_setting(name):
    setting = SETTINGS[name]
    record = json.loads(json.dumps(setting.to_record()))  # as a line stores it
    assert Setting.from_record(record) == setting
    assert Setting.from_record({**record, "model": "builtin", "seed": 3}) == setting  # other fields are not its


def test_the_record_holds_the_fields_wmspec_generate_writes():
    record = SETTINGS["tree 3x2x1, distinct"].to_record()
    assert list(record) == ["method", "lookahead", "decoder", "synthid_layers", "dipmark_alpha", "kgw_gamma",
                            "kgw_delta", "draft_decoder", "context_width", "key_sequence", "temperature",
                            "draft_temperature", "top_k",
                            "draft_tree", "distinct_drafts", "prf_version"]
    assert (record["decoder"], record["synthid_layers"], record["draft_tree"], record["distinct_drafts"]) == (
        "synthid", 20, [3, 2, 1], True)
    one = SETTINGS["one chain"].to_record()
    assert (one["draft_tree"], one["distinct_drafts"], one["key_sequence"], one["top_k"]) == (None, None, None, 50)
    assert one["draft_temperature"] is None  # Q at P's temperature
    assert SETTINGS["draft at its own temperature"].to_record()["draft_temperature"] == 1.5
    assert SETTINGS["SynthID draft decoder"].to_record()["draft_decoder"] == "synthid"
    # an alias keeps the name it was asked for by, and reads back to the same scheme
    alias = Setting(decoder=decoders.make("gamma_reweight"))
    assert alias.to_record("gamma_reweight")["decoder"] == "gamma_reweight"
    assert Setting.from_record(alias.to_record("gamma_reweight")) == Setting.from_record(alias.to_record()) == alias


def test_an_old_line_reads_with_the_defaults_of_its_missing_fields():
    # a line of the first text-record format: no format_version, draft decoder, draft tree, key sequence
    # or PRF version, and a null synthid_layers for a Gumbel-max decoder
    old = {"id": "gen-1/0", "run": "gen-1", "index": 0, "method": "pseudorandom", "lookahead": 3,
           "decoder": "gumbel", "synthid_layers": None, "context_width": 4, "temperature": 1.0, "top_k": None,
           "max_new_tokens": 128, "stop_at_eos": True, "model": "builtin", "tokenizer": "builtin", "seed": 0,
           "key_fingerprint": "fp2-0123456789abcdef", "key_derivation": "wmspec-keys-v1"}
    assert Setting.from_record(old) == Setting(method="pseudorandom", decoder=GUMBEL, lookahead=3)
    assert Setting.from_record({"method": "basic"}).lookahead == 0  # no lookahead: a method that does not speculate
    assert Setting.from_record({"draft_tree": [2, 1]}).draft_tree == (2, 1)  # no lookahead: the tree's depth
    assert Setting.from_record({"decoder": "synthid"}).decoder == decoders.WatermarkDecoder("synthid", 30)
    v1 = Setting.from_record({**old, "prf_version": prf.PRF_V1})
    assert v1.prf_version == prf.PRF_V1
    with pytest.raises(ValueError, match="scored, not generated"):
        v1.config(16)
    with pytest.raises(ValueError, match="method must be one of"):
        Setting.from_record({"method": "beam"})


@pytest.mark.parametrize("fields, message", [
    ({"method": "basic", "lookahead": 3}, "does not speculate: set lookahead=0"),
    ({"method": "pseudorandom", "lookahead": 0}, "needs lookahead K >= 1"),
    ({"lookahead": 33}, "exceeds 32"),
    ({"decoder": SYNTHID, "key_sequence": 16}, "key_sequence needs a decoder of the Gumbel-max family"),
    ({"num_drafts": 2, "draft_tree": (2, 1, 1)}, "give num_drafts or draft_tree, not both"),
    ({"method": "standard", "draft_decoder": SYNTHID}, "draws no watermarked draft token"),
    ({"decoder": decoders.WatermarkDecoder("kgw"), "num_drafts": 2}, "biased decoder"),
    ({"draft_tree": (2, 2)}, "has 2 depths; lookahead K is 3"),
    ({"prf_version": "wmspec-prf-v9"}, "PRF version"),
    ({"method": "basic", "lookahead": 0, "draft_temperature": 0.5}, "no draft_temperature"),
    ({"draft_temperature": -1.0}, "temperature must be a finite number >= 0"),
])
def test_the_rules_refuse_a_setting_the_loop_cannot_run(fields, message):
    with pytest.raises(ValueError, match=message):
        Setting(**fields)
    with pytest.raises(ValueError, match=message):
        SpeculativeConfig(**fields)


def test_the_rules_normalise_as_the_config_does():
    s = Setting(lookahead=2, num_drafts=3, top_k=0, draft_decoder=GUMBEL, distinct_drafts=True)
    assert (s.num_drafts, s.draft_tree, s.top_k, s.draft_decoder, s.distinct_drafts, s.siblings) == (
        1, (3, 1), None, None, True, 3)
    assert Setting(distinct_drafts=True).distinct_drafts is False  # one chain has no siblings
    assert Setting(temperature=0.7, draft_temperature=0.7).draft_temperature is None  # Q at P's temperature
    assert Setting(temperature=0.7, draft_temperature=1.5).q_temperature == 1.5
    assert Setting(method="basic", lookahead=0, temperature=0.5, draft_temperature=0.5).draft_temperature is None
    with pytest.warns(UserWarning, match="no watermark is embedded"):
        Setting(temperature=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Setting(method="standard", temperature=0)  # a method without a watermark does not warn
        Setting(temperature=0.0, method="plain", lookahead=0)


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_its_config_is_the_config_built_field_by_field(name):
    s = SETTINGS[name]
    old_way = speculative.SpeculativeConfig(
        method=s.method, decoder=s.decoder, draft_decoder=s.draft_decoder, lookahead=s.lookahead,
        max_new_tokens=24, temperature=s.temperature, top_k=s.top_k, context_width=s.context_width,
        eos_id=(7, 2), pad_id=1, draft_tree=s.draft_tree, distinct_drafts=s.distinct_drafts,
        key_sequence=s.key_sequence, draft_temperature=s.draft_temperature)
    config = s.config(24, (2, 7), pad_id=1)
    assert config == old_way and hash(config) == hash(old_way) and config.static() == old_way.static()
    assert config.setting == s and type(config.setting) is Setting
    assert config.stop_ids == (2, 7)
    with pytest.raises(ValueError, match="max_new_tokens must be an int >= 1"):
        s.config(0)


def test_from_shape_is_the_config_the_experiments_build():
    config = SpeculativeConfig.from_setting("pseudorandom", GUMBEL, 3, drafts="3x2x1d", max_new_tokens=8)
    assert config == Setting.from_shape("pseudorandom", GUMBEL, 3, "3x2x1d").config(8)
    assert config.draft_tree == (3, 2, 1) and config.distinct_drafts


def test_its_provenance_names_the_statistics_detection_recomputes():
    s = Setting.from_shape("pseudorandom", SYNTHID, 3, "3x2x1", context_width=2)
    p = s.provenance()
    assert (p.decoder, p.num_layers, p.context_width, p.siblings, p.key_fingerprint) == ("synthid", 20, 2, 3, None)
    secret = keys.Secret("a secret of the tests")
    keyed = s.provenance(secret.stream_keys())
    assert (keyed.key_fingerprint, keyed.key_derivation) == (secret.fingerprint, keys.DIRECT)
    mixed = Setting(method="hu", decoder=decoders.make("inverse_transform"), draft_decoder=GUMBEL).provenance()
    assert (mixed.decoder, mixed.draft_decoder) == ("inverse_transform", "gumbel")
    assert SETTINGS["key sequence"].provenance().key_sequence == 256


def test_an_experiment_run_is_a_name_and_a_setting():
    import dataclasses

    from wmspec_jax.lab import runs

    run = runs.RunSpec("pseudorandom", "synthid", 3, 0.7, 20, drafts="3x2x1d")
    assert run.setting == Setting.from_shape("pseudorandom", SYNTHID, 3, "3x2x1d", temperature=0.7)
    assert run.config(8, eos_id=2, top_k=5) == dataclasses.replace(run.setting, top_k=5).config(8, 2)
    assert (run.siblings, run.watermark_decoder, run.name) == (3, SYNTHID, "pseudorandom-synthid20-K3-T0.7-D3x2x1d")
    hot = runs.RunSpec("pseudorandom", "gumbel", 2, 0.7, drafts="1", draft_temperature=1.5)
    assert hot.setting.draft_temperature == 1.5 and hot.name == "pseudorandom-gumbel-K2-T0.7-Q1.5"
    assert runs.RunSpec("hu", "gumbel", 2, 0.7, draft_temperature=0.7).name == "hu-gumbel-K2-T0.7"
