"""Lazy package attributes (PEP 562): a package names its submodules and public names, and each is
imported on first use. ``import wmspec_jax`` (and ``wmspec_jax.detect``) then costs nothing until a
name is used, so a command-line tool's ``--help`` does not start JAX."""

from __future__ import annotations

import importlib
from typing import Callable, Iterable, Mapping


def attach(package: str, submodules: Iterable[str], names: Mapping[str, str]) -> tuple[Callable, Callable, list]:
    """(``__getattr__``, ``__dir__``, ``__all__``) for ``package``.

    Args:
      package: the package's ``__name__``.
      submodules: submodule names importable as attributes (``wmspec_jax.detect.metrics``).
      names: public name -> the submodule (relative to ``package``) that defines it.
    """
    submodules = set(submodules)
    names = dict(names)

    def __getattr__(name: str):
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")
        if name in names:
            value = getattr(importlib.import_module(f"{package}.{names[name]}"), name)
            globals_of_package = importlib.import_module(package).__dict__
            globals_of_package[name] = value  # later lookups skip __getattr__
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    everything = sorted(submodules | set(names))

    def __dir__():
        return everything

    # a name with a leading underscore is reachable (the package's tests use some) but not public
    return __getattr__, __dir__, [name for name in everything if not name.startswith("_")]


__all__ = ["attach"]
