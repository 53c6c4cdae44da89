"""Fixtures shared by the model tests: tiny random Hugging Face checkpoints on disk."""

import pytest

from tiny_hf import TINY, make_torch_model


class _TinyCheckpoints:
    """{name: (torch model, directory)}, each built on first use and kept for the session."""

    def __init__(self, tmp_path_factory):
        self._factory = tmp_path_factory
        self._built = {}

    def __getitem__(self, name):
        if name not in self._built:
            model = make_torch_model(TINY[name])
            path = self._factory.mktemp(name)
            model.save_pretrained(path)  # config.json + model.safetensors (+ generation_config.json)
            self._built[name] = (model, path)
        return self._built[name]


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory):
    """Lazily built tiny random transformers checkpoints (see tiny_hf.TINY)."""
    return _TinyCheckpoints(tmp_path_factory)
