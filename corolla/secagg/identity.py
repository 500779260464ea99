"""Node identities for SecAgg+ against a malicious server (Bonawitz et al., CCS 2017, §4.2 and
§6.3: "the server ... could lie about which users dropped out"; keys must be authenticated by a
PKI): each node signs what binds its round keys and the set of survivors it was told, with the
key the deployment registered for it, and checks its neighbours' signatures against the public
keys the operator gave it.

The signing key is the SuperNode's own authentication key (an OpenSSH ECDSA key, the kind
``flwr supernode register`` takes; ``corolla supernode --auth-supernode-private-key K`` hands its
path to the ClientApp as node config ``auth-key-file``). The trusted keys are a file of OpenSSH
public keys, one per line (``authorized_keys`` form), or a folder of ``*.pub`` files: node config
``trusted-keys``. They come from the operator (as ``flwr supernode register`` does on the
SuperLink), never from the server.
"""
from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from corolla.secagg.primitives import SecAggError, encode_fields

MAX_KEY_LINE = 1024      # an OpenSSH public key line of a NIST or Ed25519 key is far shorter
MAX_SIGNATURE = 160


def _hash_for(key) -> hashes.HashAlgorithm:
    """The hash OpenSSH pairs with an ECDSA curve."""
    return {256: hashes.SHA256(), 384: hashes.SHA384(), 521: hashes.SHA512()}[key.curve.key_size]


def public_line(key) -> str:
    """``"<type> <base64>"`` of a public key (no comment)."""
    return key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


def parse_public_line(line: object, what: str):
    """The public key of an OpenSSH line ``"<type> <base64> [comment]"``."""
    if not isinstance(line, str) or not 0 < len(line) <= MAX_KEY_LINE:
        raise SecAggError(f"{what}: expected an OpenSSH public key line")
    parts = line.split()
    if len(parts) < 2:
        raise SecAggError(f"{what}: expected '<type> <base64>'")
    try:
        key = serialization.load_ssh_public_key(f"{parts[0]} {parts[1]}".encode())
    except (ValueError, TypeError, base64.binascii.Error):
        raise SecAggError(f"{what}: not an OpenSSH public key") from None
    if not isinstance(key, (ec.EllipticCurvePublicKey, ed25519.Ed25519PublicKey)) or \
            isinstance(key, ec.EllipticCurvePublicKey) and key.curve.key_size not in (256, 384, 521):
        raise SecAggError(f"{what}: expected an ECDSA (NIST curve) or Ed25519 key")
    return key


def fingerprint(line: str) -> str:
    """``SHA256:...`` of a public key line, as ``ssh-keygen -lf`` prints it."""
    blob = base64.b64decode(line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


class Signer:
    """A node's signing key (its SuperNode authentication key)."""

    def __init__(self, path: str | Path):
        try:
            data = Path(path).expanduser().read_bytes()
        except OSError as e:
            raise SecAggError(f"node config 'auth-key-file': cannot read {path} ({e.strerror})") from None
        try:
            key = serialization.load_ssh_private_key(data, password=None)
        except (ValueError, TypeError):
            try:
                key = serialization.load_pem_private_key(data, password=None)
            except (ValueError, TypeError):
                raise SecAggError(f"node config 'auth-key-file': {path} is not an unencrypted OpenSSH or PEM "
                                  "private key") from None
        if not isinstance(key, (ec.EllipticCurvePrivateKey, ed25519.Ed25519PrivateKey)):
            raise SecAggError(f"node config 'auth-key-file': {path}: expected an ECDSA or Ed25519 key")
        self.key = key
        self.public = public_line(key.public_key())
        self.fingerprint = fingerprint(self.public)

    def sign(self, message: bytes) -> bytes:
        if isinstance(self.key, ec.EllipticCurvePrivateKey):
            return self.key.sign(message, ec.ECDSA(_hash_for(self.key)))
        return self.key.sign(message)


def verify(line: str, message: bytes, signature: object, what: str) -> None:
    """Raise :class:`SecAggError` unless ``signature`` is ``line``'s key's signature of ``message``."""
    key = parse_public_line(line, what)
    if not isinstance(signature, (bytes, bytearray)) or not 0 < len(signature) <= MAX_SIGNATURE:
        raise SecAggError(f"{what}: expected a signature")
    try:
        if isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(bytes(signature), message, ec.ECDSA(_hash_for(key)))
        else:
            key.verify(bytes(signature), message)
    except InvalidSignature:
        raise SecAggError(f"{what}: the signature does not verify") from None


def load_trusted(path: str | Path) -> dict[str, str]:
    """The trusted public keys at ``path`` (a file of OpenSSH lines, or a folder of ``*.pub``
    files) as ``{fingerprint: line}``; a line that is not a key is an error naming it."""
    p = Path(path).expanduser()
    files = sorted(p.glob("*.pub")) if p.is_dir() else [p]
    if not p.exists():
        raise SecAggError(f"node config 'trusted-keys': {p} does not exist")
    out: dict[str, str] = {}
    for f in files:
        for i, raw in enumerate(f.read_text(errors="replace").splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            key = parse_public_line(line, f"node config 'trusted-keys': {f.name} line {i}")
            norm = public_line(key)
            out[fingerprint(norm)] = norm
    return out


# ----------------------------------------------------------------- what is signed
def keys_statement(run: str, rnd: int, phase: str, sid: int, pk1: bytes, pk2: bytes) -> bytes:
    """Round keys of SecAgg id ``sid``: bound to the run, round and phase (Bonawitz et al. Fig. 4,
    AdvertiseKeys: the signature over ``c_u^PK || s_u^PK``)."""
    return encode_fields(b"corolla-secagg/keys/1", run, rnd, phase, sid, pk1, pk2)


def survivors_statement(run: str, rnd: int, phase: str, active: list[int]) -> bytes:
    """The set of nodes whose masked vector the server says it holds (Fig. 4, ConsistencyCheck:
    the signature over ``U_3``)."""
    return encode_fields(b"corolla-secagg/survivors/1", run, rnd, phase, ",".join(map(str, sorted(active))))


def handshake_statement(run: str, nonce: str) -> bytes:
    """A node's proof that it holds the key it reports in its handshake."""
    return encode_fields(b"corolla/handshake/1", run, nonce)
