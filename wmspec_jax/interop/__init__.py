"""Other engines' watermarks, bit for bit: their pseudorandom functions, green lists and g-values
reimplemented from their published code (no torch at run time), so that texts they watermark are
scored here with exact p-values and texts watermarked here in their configuration are scored by them.

Modules: :mod:`.hf_synthid` and :mod:`.hf_kgw` (Hugging Face transformers' SynthID-Text and
Kirchenbauer et al. logits processors), :mod:`.engine_gumbel` (vLLM's ``gumbel`` and
``dual_key_gumbel`` watermarks, Philox4x32-10 keyed). TensorRT-LLM publishes no watermark to
interoperate with.

Each of the three is the public face of smaller modules, one part each: ``hf_synthid_config`` (settings,
sampling table), ``hf_synthid_hash`` (NumPy), ``hf_synthid_jax``, ``hf_synthid_detect``; ``hf_kgw_config``,
``hf_kgw_mt19937`` (torch's generator and ``randperm``), ``hf_kgw_seeding``, ``hf_kgw_greenlist`` (NumPy
green lists and processor), ``hf_kgw_jax``, ``hf_kgw_detect``; ``engine_gumbel_config`` (settings, keys),
``engine_gumbel_prf`` (Philox in NumPy), ``engine_gumbel_jax``, ``engine_gumbel_detect``. Import from the
public modules.
"""


__all__ = []
