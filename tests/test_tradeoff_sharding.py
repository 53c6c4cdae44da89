"""Monte Carlo samples sharded over 8 forced CPU devices give the 1-device result.

XLA_FLAGS must be set before jax is imported, so the 8-device run is a subprocess
(tests/multidevice.py).
"""

import textwrap

import numpy as np

from tests.multidevice import run_on_devices
from wmspec_jax import tradeoff as to
from wmspec_jax.tradeoff import kernels

Q = [0.4, 0.10, 0.12, 0.11, 0.08, 0.06, 0.05, 0.035, 0.025, 0.02]
P = [0.1, 0.13, 0.155, 0.115, 0.235, 0.065, 0.055, 0.05, 0.06, 0.035]
N = 30_011  # not a multiple of any chunk: the last chunk is partial
GAMMAS = [0.0, 0.5, 1.0]

SCRIPT = textwrap.dedent(
    f"""
    import json, jax, jax.numpy as jnp, numpy as np
    from wmspec_jax import tradeoff as to
    from wmspec_jax.tradeoff import kernels, montecarlo, coupling
    q, p = np.array({Q}, np.float32), np.array({P}, np.float32)
    pi = to.estimate_coupling(q, p, to.gumbel(), 7, {N}, blocks_per_chunk=5)
    c = to.kernel_curve_mc(q, p, to.synthid(4), kernels.GOOGLE, {GAMMAS}, 7, {N}, blocks_per_chunk=5)
    # Where does a chunk's output live? (the block axis should span every device)
    mesh = montecarlo._mesh(None)
    fn = montecarlo._moments_chunk_fn(kernels._kernel_stats, (to.synthid(4), "google", False), 256, 8, mesh)
    out = fn((jnp.asarray(q), jnp.asarray(p), jnp.asarray({GAMMAS}, jnp.float32)),
             jnp.asarray(to.zeta.run_keys(7)), jnp.int32(0), jnp.int32({N}))
    print(json.dumps({{"devices": jax.device_count(), "chunk_devices": len(out[1].sharding.device_set),
                      "joint": pi.joint.tolist(), "se": c.se.tolist(), "ws": c.ws.tolist(),
                      "se_stderr": c.se_stderr.tolist(), "ws_stderr": c.ws_stderr.tolist()}}))
    """
)


def test_eight_devices_match_one():
    multi = run_on_devices(SCRIPT, 8, timeout=300)
    assert multi["devices"] == 8 and multi["chunk_devices"] == 8

    q, p = np.array(Q, np.float32), np.array(P, np.float32)
    pi = to.estimate_coupling(q, p, to.gumbel(), 7, N, blocks_per_chunk=5)
    c = to.kernel_curve_mc(q, p, to.synthid(4), kernels.GOOGLE, GAMMAS, 7, N, blocks_per_chunk=5)
    # Counts are integers: identical. Moments: per-block float32 reductions are the same
    # computations; only the float64 host combination order differs with the chunking.
    np.testing.assert_array_equal(np.asarray(multi["joint"]), pi.joint)
    for k in ("se", "ws", "se_stderr", "ws_stderr"):
        np.testing.assert_allclose(np.asarray(multi[k]), getattr(c, k), rtol=1e-6, atol=0)
