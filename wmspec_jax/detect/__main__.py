"""``python -m wmspec_jax.detect``: the ``wmspec-detect`` command-line tool (:mod:`wmspec_jax.cli.detect`)."""

from wmspec_jax.cli.detect import main

if __name__ == "__main__":
    main()
