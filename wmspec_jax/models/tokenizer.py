"""Rebuilds a byte-level BPE tokenizer from GGUF metadata (``tokenizer.ggml.*``).

The result is a ``transformers.PreTrainedTokenizerFast`` so the built-in model
exposes the same tokenizer API (``encode``, ``decode``,
``apply_chat_template``) as checkpoints loaded with ``AutoTokenizer``.
"""

from __future__ import annotations

# GGUF token types (gguf.TokenType): 1 normal, 2 unknown, 3 control, 4 user-defined,
# 5 unused, 6 byte.
_SPECIAL_TYPES = (2, 3, 4)

# Pre-tokenizers by ``tokenizer.ggml.pre``: "smollm" splits digits individually
# and then applies the GPT-2 regex (llama.cpp's LLAMA_VOCAB_PRE_TYPE_SMOLLM);
# "gpt-2" / "default" apply the GPT-2 regex only.
_DIGIT_SPLITTING = ("smollm", "starcoder", "refact", "deepseek-llm")


def tokenizer_from_gguf(reader):
    """``PreTrainedTokenizerFast`` for a GGUF with ``tokenizer.ggml.model == "gpt2"``."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    kind = reader.field("tokenizer.ggml.model")
    if kind != "gpt2":
        raise ValueError(f"GGUF tokenizer model {kind!r} is not supported (byte-level BPE 'gpt2' only)")
    tokens = list(reader.field("tokenizer.ggml.tokens"))
    types = list(reader.field("tokenizer.ggml.token_type"))
    merges = [tuple(m.split(" ", 1)) for m in reader.field("tokenizer.ggml.merges")]
    pre = reader.field("tokenizer.ggml.pre", "default")

    vocab = {tok: i for i, tok in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in _DIGIT_SPLITTING:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    specials = [tokens[i] for i, t in enumerate(types) if t in _SPECIAL_TYPES]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])

    def token_of(key):
        idx = reader.field(key, -1)
        return tokens[int(idx)] if 0 <= int(idx) < len(tokens) else None

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=token_of("tokenizer.ggml.bos_token_id"),
        eos_token=token_of("tokenizer.ggml.eos_token_id"),
        unk_token=token_of("tokenizer.ggml.unknown_token_id"),
        pad_token=token_of("tokenizer.ggml.padding_token_id"),
        additional_special_tokens=[s for s in specials],
    )
    template = reader.metadata.get("tokenizer.chat_template")
    if template is not None:
        fast.chat_template = template
    return fast


__all__ = ["tokenizer_from_gguf"]
