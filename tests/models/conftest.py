"""Fixtures shared by the model tests: tiny random Hugging Face checkpoints on disk."""

import pytest

from tiny_hf import TINY, make_torch_model


@pytest.fixture(scope="module")
def tiny_checkpoints(tmp_path_factory):
    """{name: (torch model, directory)} saved with save_pretrained (safetensors)."""
    out = {}
    for name, spec in TINY.items():
        model = make_torch_model(spec)
        path = tmp_path_factory.mktemp(name)
        model.save_pretrained(path)
        out[name] = (model, path)
    return out
