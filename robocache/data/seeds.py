"""Numbers fixed by text: the seeds of a step's random draws, from (seed,
step, rank, ...), the same in every process and on every run."""

import hashlib


def hashed(text, bits):
    """A ``bits``-bit number fixed by ``text`` (SHA-256)."""
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:8], "little") >> (64 - bits)
