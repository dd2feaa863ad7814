"""Public randomness: noise that depends only on (seed, position, stream, token id).

Speculative sampling with a shared random source (Daliri, Musco, Suresh 2024,
"Coupling without Communication and Drafter-Invariant Speculative Decoding",
arXiv 2408.07978) needs, at every absolute position of the sequence, a Gumbel
vector that the draft and the target can both compute without talking to each
other and that does not depend on how many draws happened before. A
sequential RNG cannot give that: its state depends on the number of earlier
draws, which under speculation depends on k and on timings. So every value
here is a pure function of its coordinates — a counter-based generator, the
SplitMix64 finaliser (Steele, Lea, Flood 2014) applied to a key mixed from the
seed, the stream and the position, plus the token id — and only the values
for the candidate ids are ever computed (40 for top-k 40, not the whole
vocabulary).

Streams keep independent uses apart at one position: ``TARGET`` (the token a
plain step samples; the coupled sampler's shared noise), ``DRAFT`` (a
rejection-sampling draft's own draw), ``ACCEPT`` (its acceptance uniform),
``RESIDUAL`` (its correction draw).
"""

from __future__ import annotations

import numpy as np

TARGET, DRAFT, ACCEPT, RESIDUAL = 0, 1, 2, 3

_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_C1, _C2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_U_C1, _U_C2, _U_GOLDEN = np.uint64(_C1), np.uint64(_C2), np.uint64(_GOLDEN)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_TO_UNIT = 1.0 / (1 << 53)


def _mix(z: int) -> int:
    """SplitMix64's finaliser on a Python int (64-bit wrap-around)."""
    z = ((z ^ (z >> 30)) * _C1) & _M64
    z = ((z ^ (z >> 27)) * _C2) & _M64
    return z ^ (z >> 31)


def _mix_array(z: np.ndarray) -> np.ndarray:
    # uint64 array arithmetic wraps modulo 2**64, as the finaliser needs
    z = (z ^ (z >> _S30)) * _U_C1
    z = (z ^ (z >> _S27)) * _U_C2
    return z ^ (z >> _S31)


def key(seed: int, position: int, stream: int = TARGET) -> int:
    """The 64-bit key of one (seed, position, stream) coordinate."""
    return _mix((_mix(seed & _M64) + _GOLDEN * (1 + stream) + _mix(position & _M64)) & _M64)


def uniforms(seed: int, position: int, ids: np.ndarray, stream: int = TARGET) -> np.ndarray:
    """Uniforms in the open interval (0, 1), one per token id, float64, shape of ``ids``."""
    k = np.uint64(key(seed, position, stream))
    z = _mix_array(k + ids.astype(np.uint64) * _U_GOLDEN)
    return ((z >> _S11).astype(np.float64) + 0.5) * _TO_UNIT


def uniform(seed: int, position: int, stream: int) -> float:
    """One uniform in (0, 1) for a (seed, position, stream) coordinate."""
    return ((_mix(key(seed, position, stream)) >> 11) + 0.5) * _TO_UNIT


def gumbel(seed: int, position: int, ids: np.ndarray, stream: int = TARGET) -> np.ndarray:
    """Standard Gumbel noise ``-log(-log(u))``, one value per token id (float64).

    ``argmax(log p + gumbel)`` over a distribution's support is a draw from
    ``p`` (the Gumbel-max trick); two distributions argmaxed with the same
    noise agree with probability ``sum_j 1 / sum_i max(p_i/p_j, q_i/q_j)``,
    at least ``(1 - TV) / (1 + TV)``.
    """
    return -np.log(-np.log(uniforms(seed, position, ids, stream)))
