"""Install wmspec_jax: watermarking inside speculative sampling (JAX/Flax)."""

import pathlib

from setuptools import find_packages, setup

HERE = pathlib.Path(__file__).parent

setup(
    name="wmspec_jax",
    version="0.1.0",
    description=(
        "Watermark strength vs speculative sampling efficiency: pseudorandom "
        "acceptance (Alg. 1), trade-off curves and detectors in JAX."
    ),
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["wmspec_jax", "wmspec_jax.*"]),
    package_data={"wmspec_jax": ["assets/*", "assets/**/*", "models/cpu_kernels/*.cc", "models/cpu_kernels/*.h"]},
    include_package_data=True,
    entry_points={
        "console_scripts": [
            "wmspec-generate=wmspec_jax.cli.generate:main",
            "wmspec-detect=wmspec_jax.cli.detect:main",
            "wmspec-deployment=wmspec_jax.cli.deployment:main",
        ],
    },
    install_requires=[
        "jax>=0.4.35",
        "flax>=0.10",
        "optax>=0.2.3",
        "transformers>=4.45",
        "numpy>=1.26",
        "scipy>=1.11",
        "datasets>=2.20",
        "matplotlib>=3.8",
        "absl-py>=2.1",
        # Built-in model pair and prompts (see README, "Dependencies").
        "gguf>=0.10",
        "tokenizers>=0.20",
        "safetensors>=0.4",
        "pyyaml>=6.0",
        "chatterbot-corpus==1.3.3",
    ],
    extras_require={
        "test": [
            "pytest>=8",
            # the suite runs on both CPU cores (scripts/run_tests.sh: -n 2)
            "pytest-xdist>=3.5",
            # a test that hangs fails after pytest.ini's limit with every thread's stack printed, instead
            # of holding the run until the CI's own limit ends it without a word
            "pytest-timeout>=2.3",
            # parity tests against transformers' PyTorch models (CPU wheel)
            "torch==2.13.0",
            # execute the colab/ notebooks headless in the test suite
            "nbclient>=0.10",
            "nbformat>=5.10",
            "ipykernel>=6.29",
        ],
    },
)
