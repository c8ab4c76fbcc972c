"""A cryptographic random stream for the privacy mechanisms: AES-256 in counter mode.

:class:`AesCtrGenerator` stands in for a ``torch.Generator`` wherever raptor's mechanisms draw
(:func:`raptor.mechanisms.poisson_sample`, :func:`raptor.mechanisms.gaussian_noise`):

* the key (256 bits) and the initial counter block (128 bits) come from the OS CSPRNG
  (:func:`secrets.token_bytes`) and are never printed or logged. :meth:`AesCtrGenerator.get_state`
  (key, counter block, bytes used) goes into a run's mid-run checkpoints only, so that a resumed
  run continues the same stream exactly; the final checkpoint of a secure run drops it.
  Why that is safe: the state lets one recompute this run's samples and noise, so a checkpoint
  that holds it is exactly as confidential as the training data it sits next to (keep it where
  the data is kept, never publish it); what is released (the final model, results.json) never
  holds it, and a run that finished has nothing left to resume;
* the stream is AES-256-CTR encryption of zeros, from the ``cryptography`` package (OpenSSL; AES-NI
  where the CPU has it). Its output is computationally indistinguishable from uniform bytes, unlike
  torch's Mersenne Twister / Philox, whose state can be recovered from enough output;
* uniforms take 53 bits per float64 draw: ``u = (w mod 2^53) * 2^-53`` for a 64-bit word ``w``;
* Gaussians are formed in float64 by Box-Muller (both the cosine and the sine draw are used);
* **floating-point mitigation** (Mironov, "On significance of the least significant bits for
  differential privacy", CCS 2012): a textbook float Gaussian sampler reaches only a sparse, uneven
  set of doubles, and the low bits of a noisy output can then reveal the unnoised value. As in
  Opacus's ``secure_mode`` (``opacus.optimizers.optimizer._generate_noise``), each released draw is
  the sum of four independent N(0, std^2) draws divided by 2: still exactly N(0, std^2) in
  distribution, with the holes of one draw's support filled by the others. This is a mitigation,
  not a proof: an exact discrete Gaussian (Canonne, Kamath & Steinke, NeurIPS 2020) would be one.
  The float64 draw is cast to the parameter's dtype only when it is added (float32 parameters
  keep float32 rounding of the released update).

Cost: 4 Gaussians, i.e. 32 bytes of AES output and a float64 Box-Muller, per noised coordinate;
``benchmarks/secure_rng_cost.py`` measures it per update against the engine.

Privacy: the generator's key is the secret that the guarantee rests on. Nothing here can
reproduce a stream, which is the point; seeded (reproducible) runs use a ``torch.Generator``
instead and are labelled NOT secure.
"""

from __future__ import annotations

import math
import secrets

import torch

from raptor.errors import ConfigError

#: Opacus's secure-mode rule: sum of this many N(0, std^2) draws, divided by sqrt(of it) = 2.
MIRONOV_SUMMANDS = 4
_MASK53 = (1 << 53) - 1
_TWO_PI = 2.0 * math.pi
_CHUNK = 1 << 22  # Gaussians per pass: bounds the peak memory of one call
_ZEROS = bytes(1 << 23)  # plaintext of one AES call (8 MiB of keystream)


_KEY_BYTES, _BLOCK_BYTES = 32, 16
_STATE_BYTES = _KEY_BYTES + _BLOCK_BYTES + 8


def _cipher(key: bytes, counter: bytes):
    try:
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    except ImportError as err:  # pragma: no cover - the package is a pinned dependency
        raise ConfigError("secure randomness needs the 'cryptography' package (pip install 'cryptography==46.0.3'), "
                          "or run a seeded, NOT secure, experiment with --seed") from err
    return Cipher(algorithms.AES(key), modes.CTR(counter)).encryptor()


class AesCtrGenerator:
    """A cryptographically secure random stream with the draws raptor's mechanisms need.

    ``device`` is where the draws are returned (the stream itself runs on the CPU).
    """

    secure = True
    kind = "aes-256-ctr"

    def __init__(self, device: str | torch.device = "cpu"):
        self.device = torch.device(device)
        self._key, self._counter, self._used = secrets.token_bytes(_KEY_BYTES), secrets.token_bytes(_BLOCK_BYTES), 0
        self._enc = _cipher(self._key, self._counter)

    def get_state(self) -> torch.Tensor:
        """The stream's position as a uint8 tensor (key, initial counter block, bytes used): SECRET,
        for a run's own mid-run checkpoints only (see the module docstring)."""
        raw = self._key + self._counter + self._used.to_bytes(8, "little")
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8).clone()

    def set_state(self, state: torch.Tensor) -> None:
        """Continue the stream of :meth:`get_state` exactly where it was."""
        if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8 or state.numel() != _STATE_BYTES:
            raise ConfigError(f"an AES-CTR generator state is {_STATE_BYTES} bytes (uint8), got "
                              f"{getattr(state, 'dtype', type(state).__name__)} of {getattr(state, 'numel', lambda: '?')()}")
        raw = bytes(state.tolist())
        key, counter = raw[:_KEY_BYTES], raw[_KEY_BYTES:_KEY_BYTES + _BLOCK_BYTES]
        used = int.from_bytes(raw[_KEY_BYTES + _BLOCK_BYTES:], "little")
        start = (int.from_bytes(counter, "big") + used // _BLOCK_BYTES) % (1 << 128)
        self._key, self._counter, self._used = key, counter, used
        self._enc = _cipher(key, start.to_bytes(_BLOCK_BYTES, "big"))
        self._enc.update(bytes(used % _BLOCK_BYTES))  # the rest of a block already used

    def __repr__(self) -> str:
        return f"AesCtrGenerator(device={self.device})"  # never the key

    def random_words(self, count: int) -> torch.Tensor:
        """``count`` 64-bit words (int64, CPU) of keystream."""
        if count < 0:
            raise ConfigError(f"count must be >= 0, got {count}")
        out = torch.empty(count, dtype=torch.int64)
        out_u8 = out.numpy().view("u1")
        step = len(_ZEROS)
        buf = bytearray(step + 15)  # update_into needs room for one more block
        for start in range(0, 8 * count, step):
            size = min(step, 8 * count - start)
            written = self._enc.update_into(_ZEROS if size == step else _ZEROS[:size], buf)
            out_u8[start:start + written] = memoryview(buf)[:written]
            self._used += written
        return out

    def uniform(self, count: int) -> torch.Tensor:
        """``count`` float64 uniforms on [0, 1), 53 random bits each, on the CPU."""
        return (self.random_words(count) & _MASK53).to(torch.float64).mul_(2.0 ** -53)

    def standard_normal(self, count: int) -> torch.Tensor:
        """``count`` float64 N(0, 1) draws on the CPU (Box-Muller, both outputs used)."""
        pairs = (count + 1) // 2
        u = self.uniform(2 * pairs).view(2, pairs)
        radius = torch.log1p(u[0].neg_()).mul_(-2.0).sqrt_()  # log(1 - u), 1 - u in (0, 1]: finite
        angle = u[1].mul_(_TWO_PI)
        # (r cos a, r sin a) interleaved: two independent N(0, 1) draws per pair of uniforms
        return torch.view_as_real(torch.polar(radius, angle)).reshape(-1)[:count]

    def gaussian(self, shape, std: float, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """N(0, std^2) draws of ``shape`` on ``self.device`` in ``dtype``: formed in float64 as the sum of
        :data:`MIRONOV_SUMMANDS` draws over 2 (the floating-point mitigation), then cast."""
        n = math.prod(tuple(shape))
        acc = torch.zeros(n, dtype=torch.float64)
        for start in range(0, n, _CHUNK):
            stop = min(n, start + _CHUNK)
            part = acc[start:stop]
            for _ in range(MIRONOV_SUMMANDS):
                part.add_(self.standard_normal(stop - start))
        acc.mul_(float(std) / math.sqrt(MIRONOV_SUMMANDS))
        return acc.view(tuple(shape)).to(device=self.device, dtype=dtype)


def is_crypto_generator(generator) -> bool:
    return isinstance(generator, AesCtrGenerator)
