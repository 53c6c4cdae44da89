"""The experiment scripts: each a module, ``python -m experiments.<name>`` (absl flags; ``--helpfull``)."""
