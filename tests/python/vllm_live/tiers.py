"""Corrupting stored blocks in dualpath's tiers from outside the process that stored them."""

from __future__ import annotations

import mmap
import os


def flip_pattern(path: str | os.PathLike, pattern: bytes, at: int = 11) -> bool:
    """Flips bits of byte ``at`` of the first occurrence of ``pattern`` in the file, in place.
    Returns whether the pattern was found."""
    with open(path, "r+b") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return False
        with mmap.mmap(f.fileno(), 0) as m:
            where = m.find(pattern)
            if where < 0:
                return False
            m[where + at] ^= 0x5A
            return True


def corrupt_block(block: bytes, pool_path: str | None, store_path: str | None,
                  span: int = 512) -> int:
    """Flips one byte of the block whose stored bytes are ``block`` (as a get returned them) in
    the pool file and in every file under the persistent tier's directory that holds it, so that
    dualpath's checksum fails on either tier. ``span`` bytes from the middle of the block locate
    it. Returns the number of copies corrupted."""
    mid = len(block) // 2
    pattern = bytes(block[mid:mid + span])
    if len(set(pattern)) < 2:
        raise ValueError("corrupt_block: the block's middle is constant; it cannot be located")
    paths = [pool_path] if pool_path else []
    if store_path:
        paths += [os.path.join(d, f) for d, _, fs in os.walk(store_path) for f in fs]
    return sum(flip_pattern(p, pattern) for p in paths)
