"""Cryptographic and arithmetic primitives of SecAgg+ (Bonawitz et al., CCS 2017, §4; Bell et al.,
CCS 2020, §3), on ``cryptography`` and ``pycryptodome`` only (no Flower internals):

* key agreement: ECDH on NIST P-384 (the curve Flower's own SecAgg+ uses), keys as raw bytes
  (the X9.62 uncompressed point, 97 bytes; the private scalar, 48 bytes), shared secrets through
  HKDF-SHA256 with a label per use (pairwise mask seed, share encryption);
* authenticated encryption of the shares: AES-256-GCM with the (run, round, phase, sender,
  receiver) binding as associated data, so a ciphertext cannot be replayed to another node, round
  or run;
* Shamir secret sharing over GF(2^128) per 16-byte chunk (``Crypto.Protocol.SecretSharing``);
* the mask generator: a ChaCha20 keystream keyed with SHA-256 of the seed, read as uniform
  32-bit words (Flower's own ``pseudo_rand_gen`` folds the seed into 32 bits of Mersenne
  Twister state, which a server could search);
* stochastic quantisation of ``clip(x, -c, c)`` to ``[0, 2^bits]``.

Every decoder here raises :class:`SecAggError` with a message that names what was wrong and never
carries a secret or a data value.
"""
from __future__ import annotations

import hashlib
import os
import struct

import numpy as np
from Crypto.Protocol.SecretSharing import Shamir
from Crypto.Util.Padding import pad, unpad
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

MOD_BITS = 32
MOD = 1 << MOD_BITS
CURVE = ec.SECP384R1()
PUBLIC_KEY_BYTES = 97          # X9.62 uncompressed point of P-384
PRIVATE_KEY_BYTES = 48
SEED_BYTES = 32
CHUNK = 16                     # Shamir works on 16-byte blocks


class SecAggError(RuntimeError):
    """The protocol cannot complete correctly (too few shares or nodes, a bad or out-of-order
    message). Its text names ids and counts, never a secret or a data value."""


def encode_fields(*parts: bytes | str | int) -> bytes:
    """An unambiguous byte string of ``parts`` (each length-prefixed): what is hashed, signed or
    bound as associated data."""
    out = bytearray()
    for p in parts:
        b = p.encode() if isinstance(p, str) else p.to_bytes(8, "big", signed=True) if isinstance(p, int) else bytes(p)
        out += struct.pack(">I", len(b)) + b
    return bytes(out)


# ------------------------------------------------------------------------------------ keys
def key_pair() -> tuple[bytes, bytes]:
    """A fresh P-384 key pair as ``(private scalar, public point)`` bytes."""
    sk = ec.generate_private_key(CURVE)
    return (sk.private_numbers().private_value.to_bytes(PRIVATE_KEY_BYTES, "big"),
            sk.public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint))


def public_of(private: bytes) -> bytes:
    """The public point of a private scalar (how a reconstructed key is checked)."""
    return _private(private).public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)


def check_public(public: object, what: str) -> bytes:
    """``public`` as a valid P-384 point, else :class:`SecAggError` naming ``what``."""
    if not isinstance(public, (bytes, bytearray)) or len(public) != PUBLIC_KEY_BYTES:
        raise SecAggError(f"{what}: expected a {PUBLIC_KEY_BYTES}-byte P-384 public key")
    try:
        ec.EllipticCurvePublicKey.from_encoded_point(CURVE, bytes(public))
    except ValueError:
        raise SecAggError(f"{what}: not a point of P-384") from None
    return bytes(public)


def shared_key(private: bytes, public: bytes, label: bytes) -> bytes:
    """32 bytes both ends derive: HKDF-SHA256 of ECDH(private, public), ``label`` as info."""
    secret = _private(private).exchange(ec.ECDH(), ec.EllipticCurvePublicKey.from_encoded_point(CURVE, public))
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=label).derive(secret)


def _private(private: bytes) -> ec.EllipticCurvePrivateKey:
    if not isinstance(private, (bytes, bytearray)) or len(private) != PRIVATE_KEY_BYTES:
        raise SecAggError(f"private key: expected {PRIVATE_KEY_BYTES} bytes")
    value = int.from_bytes(private, "big")
    try:
        return ec.derive_private_key(value, CURVE)
    except ValueError:
        raise SecAggError("private key: not a scalar of P-384") from None


# ------------------------------------------------------------------------ encryption
def seal(key: bytes, plaintext: bytes, binding: bytes) -> bytes:
    """AES-256-GCM of ``plaintext`` with a random 12-byte nonce (prepended); ``binding`` is
    authenticated, not sent."""
    nonce = os.urandom(12)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, binding)


def open_sealed(key: bytes, ciphertext: bytes, binding: bytes, what: str) -> bytes:
    if not isinstance(ciphertext, (bytes, bytearray)) or len(ciphertext) < 12 + 16:
        raise SecAggError(f"{what}: a ciphertext too short to be one")
    try:
        return AESGCM(key).decrypt(bytes(ciphertext[:12]), bytes(ciphertext[12:]), binding)
    except InvalidTag:
        raise SecAggError(f"{what}: the ciphertext does not authenticate (wrong key, sender, receiver or "
                          f"round)") from None


# ------------------------------------------------------------------------- Shamir
def share_secret(secret: bytes, threshold: int, holders: int) -> list[bytes]:
    """``holders`` Shamir shares of ``secret`` (any ``threshold`` of them reconstruct it): each
    ``index (4 bytes) || one 16-byte share per 16-byte chunk of the padded secret``."""
    padded = pad(bytes(secret), CHUNK)
    shares = [bytearray(i.to_bytes(4, "big")) for i in range(1, holders + 1)]
    for a in range(0, len(padded), CHUNK):
        for idx, part in Shamir.split(threshold, holders, padded[a:a + CHUNK], ssss=False):
            shares[idx - 1] += part
    return [bytes(s) for s in shares]


def share_index(share: object, size: int) -> int:
    """The holder index of a share of ``size`` bytes; :class:`SecAggError` when malformed."""
    if not isinstance(share, (bytes, bytearray)) or len(share) != size or size < 4 + CHUNK \
            or (size - 4) % CHUNK:
        raise SecAggError(f"a share: expected {size} bytes")
    idx = int.from_bytes(share[:4], "big")
    if idx < 1:
        raise SecAggError("a share: its index is not positive")
    return idx


def combine_shares(shares: list[bytes]) -> bytes:
    """The secret of ``shares`` (all of one size, distinct indices; at least the threshold)."""
    size = len(shares[0])
    idx = [share_index(s, size) for s in shares]
    if len(set(idx)) != len(idx):
        raise SecAggError("shares: two have the same index")
    out = bytearray()
    for a in range(4, size, CHUNK):
        out += Shamir.combine([(i, bytes(s[a:a + CHUNK])) for i, s in zip(idx, shares)], ssss=False)
    try:
        return unpad(bytes(out), CHUNK)
    except ValueError:
        raise SecAggError("shares: they do not combine to a padded secret") from None


def share_size(secret_bytes: int) -> int:
    """Bytes of one share of a ``secret_bytes``-byte secret."""
    return 4 + (secret_bytes // CHUNK + 1) * CHUNK


# --------------------------------------------------------------------- masks and numbers
def prg(seed: bytes, size: int) -> np.ndarray:
    """``size`` uniform values in [0, 2^32) from ``seed`` (ChaCha20 keystream keyed with
    SHA-256(seed)), as int64."""
    key = hashlib.sha256(seed).digest()
    enc = Cipher(algorithms.ChaCha20(key, b"\0" * 16), mode=None).encryptor()
    return np.frombuffer(enc.update(b"\0" * (4 * size)), dtype="<u4").astype(np.int64)


def commitment(seed: bytes) -> bytes:
    """What a node publishes of its self-mask seed: SHA-256 of it (the server checks a
    reconstructed seed against it)."""
    return hashlib.sha256(b"corolla-secagg seed\0" + seed).digest()


def quantise(x: np.ndarray, clip: float, bits: int) -> np.ndarray:
    """Stochastic rounding of ``(clip(x, -c, c) + c)·2^bits/(2c)`` to integers in ``[0, 2^bits]``
    (int64): unbiased, each value off by less than one step ``2c/2^bits``."""
    levels = 1 << bits
    v = (np.clip(np.asarray(x, np.float64).ravel(), -clip, clip) + clip) * (levels / (2 * clip))
    low = np.floor(v)
    up = np.random.default_rng(int.from_bytes(os.urandom(8), "little")).random(v.shape) < (v - low)
    return np.clip(low + up, 0, levels).astype(np.int64)


def dequantise_sum(q_sum: np.ndarray, n: int, clip: float, bits: int) -> np.ndarray:
    """The float sum of ``n`` nodes' vectors from the sum of their quantised vectors."""
    return q_sum.astype(np.float64) * (2 * clip / (1 << bits)) - n * clip

