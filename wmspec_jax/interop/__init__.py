"""Other engines' watermarks, bit for bit: their pseudorandom functions, green lists and g-values
reimplemented from their published code (no torch at run time), so that texts they watermark are
scored here with exact p-values and texts watermarked here in their configuration are scored by them.

Modules: :mod:`.hf_synthid` and :mod:`.hf_kgw` (Hugging Face transformers' SynthID-Text and
Kirchenbauer et al. logits processors), :mod:`.engine_gumbel` (vLLM's ``gumbel`` and
``dual_key_gumbel`` watermarks, Philox4x32-10 keyed). TensorRT-LLM publishes no watermark to
interoperate with.
"""
