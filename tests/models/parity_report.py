"""Prints max |logit difference| vs transformers for every tiny config (docs/models.md table).

  cd <repo> && PYTHONPATH=.:tests/models python tests/models/parity_report.py

A 19-token sequence (longer than the sliding windows) is fed once as a
prefill and once as 5 + 6 x 1 + 4 x 2 cached decode steps.
"""

import tempfile

import numpy as np

from test_parity import run_schedule, torch_logits
from tiny_hf import TINY, make_torch_model
from wmspec_jax.models import hf


def main():
    print("| config | prefill | cached decode |")
    print("|---|---|---|")
    for name in TINY:
        model = make_torch_model(TINY[name])
        path = tempfile.mkdtemp()
        model.save_pretrained(path)
        ckpt = hf.load_checkpoint(path, tokenizer=False)
        lm = ckpt.language_model()
        seq = np.random.default_rng(1).integers(0, lm.vocab_size, 19)
        ref = torch_logits(model, seq)
        prefill = run_schedule(lm, ckpt.params, [seq], [(19,)])[0]
        decode = run_schedule(lm, ckpt.params, [seq], [(5,)] + [(1,)] * 6 + [(2,)] * 4)[0]
        print(f"| {name} | {np.abs(prefill - ref).max():.1e} | {np.abs(decode - ref).max():.1e} |")


if __name__ == "__main__":
    main()
