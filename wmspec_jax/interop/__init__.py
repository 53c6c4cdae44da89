"""Other engines' watermarks, bit for bit: their pseudorandom functions, green lists and g-values
reimplemented from their published code (no torch at run time), so that texts they watermark are
scored here with exact p-values and texts watermarked here in their configuration are scored by them:
one token at a time (the JAX processors), or through the generation loop, where transformers' SynthID-Text
and vLLM's ``gumbel`` key the target stream of every method (``hf_synthid.HFSynthIDScheme``,
``engine_gumbel.VllmGumbelScheme``, built by :meth:`.foreign.ForeignScheme.decoder`).

Modules: :mod:`.hf_synthid` and :mod:`.hf_kgw` (Hugging Face transformers' SynthID-Text and
Kirchenbauer et al. logits processors), :mod:`.engine_gumbel` (vLLM's ``gumbel`` and
``dual_key_gumbel`` watermarks, Philox4x32-10 keyed). TensorRT-LLM publishes no watermark to
interoperate with.

Each of the three is a package whose ``__init__`` is the public face, its names imported on first use
(reading an engine's configuration does not start JAX), over private modules of one part each:
``_config`` (settings; SynthID's sampling table; vLLM's keys), ``_detect`` (scoring and p-values),
``_jax`` (the PRF or processor in JAX), ``_scheme`` (SynthID's and vLLM's decoder of the generation
loop), and in NumPy ``hf_synthid._hash``, ``engine_gumbel._prf`` and ``hf_kgw._mt19937`` (torch's
generator and ``randperm``), ``hf_kgw._seeding``, ``hf_kgw._greenlist`` (green lists, the processor).
Import from the packages.
"""


__all__ = []
