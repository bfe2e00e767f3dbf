#!/usr/bin/python3
"""Generates vLLM sha256_cbor block-hash test vectors for dualpath's kv hasher.

Reimplements vLLM's prefix-caching hash (vllm/v1/core/kv_cache_utils.py: init_none_hash,
hash_block_tokens, hash_request_tokens; vllm/utils/hashing.py: sha256_cbor) with Debian's
python3-cbor2 and hashlib:

    sha256_cbor(x)  = sha256(cbor2.dumps(x, canonical=True))
    NONE_HASH       = sha256_cbor(PYTHONHASHSEED string)
    block hash      = sha256_cbor((parent_hash_bytes or NONE_HASH, tuple(block_tokens), extra_keys))

Only full blocks are hashed. Token sequences come from splitmix64 so the C++ test regenerates
them (tokens.h in the tests mirrors Tokens() below) and the vector file stays small.

Usage: /usr/bin/python3 tests/kv/gen_vectors.py > tests/kv/data/vllm_sha256_cbor_vectors.json
       /usr/bin/python3 tests/kv/gen_vectors.py --tokens PRNG_SEED COUNT MODE  (print tokens)
"""

import hashlib
import json
import sys

try:
    import cbor2  # Debian: python3-cbor2 (only needed to generate vectors, not for --tokens)
except ImportError:  # pragma: no cover
    cbor2 = None

MASK64 = (1 << 64) - 1
MAX_TOKEN_ID = (1 << 31) - 1
# Token ids at every CBOR width boundary (1-byte inline, +1, +2, +4 byte heads).
EDGE_IDS = [0, 1, 23, 24, 255, 256, 65535, 65536, 16777215, 16777216, MAX_TOKEN_ID]


def sha256_cbor(obj) -> bytes:
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


def init_none_hash(seed: str) -> bytes:
    return sha256_cbor(seed)


def hash_block_tokens(none_hash, parent, block_tokens, extra_keys=None) -> bytes:
    if not parent:
        parent = none_hash
    return sha256_cbor((parent, tuple(block_tokens), extra_keys))


def hash_request_tokens(none_hash, block_size, tokens):
    out = []
    parent = None
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash_block_tokens(none_hash, parent, tokens[start:start + block_size])
        out.append(parent)
    return out


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)


def tokens(prng_seed, count, mode):
    """mode 'full': uniform in [0, 2^31-1]; 'mixed': every CBOR width plus edge ids;
    'vocab': uniform in [0, 151935] (a real vocabulary)."""
    rng = SplitMix64(prng_seed)
    out = []
    for _ in range(count):
        if mode == "full":
            out.append(rng.next() % (MAX_TOKEN_ID + 1))
        elif mode == "vocab":
            out.append(rng.next() % 151936)
        else:
            cls = rng.next() % 5
            v = rng.next()
            if cls == 0:
                out.append(v % 24)
            elif cls == 1:
                out.append(24 + v % (256 - 24))
            elif cls == 2:
                out.append(256 + v % (65536 - 256))
            elif cls == 3:
                out.append(65536 + v % (MAX_TOKEN_ID + 1 - 65536))
            else:
                out.append(EDGE_IDS[v % len(EDGE_IDS)])
    return out


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--tokens":
        print(" ".join(map(str, tokens(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]))))
        return
    cases = []
    case_id = 0
    for seed in ["0", "42"]:
        none_hash = init_none_hash(seed)
        for block_size in [16, 64, 256, 512]:
            # (count, mode): the full 10,000-token sequence, a random-length mixed-width one, and
            # one with a partial tail block.
            for count, mode in [(10000, "full"), (1000 + case_id * 97, "mixed"),
                                (block_size * 3 + block_size // 2, "vocab")]:
                prng_seed = 1000 + case_id
                case_id += 1
                toks = tokens(prng_seed, count, mode)
                cases.append({
                    "seed": seed,
                    "block_size": block_size,
                    "prng_seed": prng_seed,
                    "num_tokens": count,
                    "mode": mode,
                    "none_hash": none_hash.hex(),
                    "hashes": [h.hex() for h in hash_request_tokens(none_hash, block_size, toks)],
                })
    # Single blocks with extra keys (vLLM: LoRA name / cache_salt as text strings) and the exact
    # CBOR bytes cbor2 writes, to pin the encoder itself.
    messages = []
    none0 = init_none_hash("0")
    for toks, extra in [([1, 2, 3], None), (EDGE_IDS, None), ([7] * 30, ("salt",)),
                        (list(range(300)), ("lora-a", "x" * 40))]:
        msg = (none0, tuple(toks), extra)
        messages.append({
            "parent": none0.hex(),
            "tokens": toks,
            "extra_keys": list(extra) if extra else [],
            "cbor": cbor2.dumps(msg, canonical=True).hex(),
            "hash": hash_block_tokens(none0, none0, toks, extra).hex(),
        })
    json.dump({
        "generator": "tests/kv/gen_vectors.py",
        "seed_none_hash": {s: init_none_hash(s).hex() for s in ["0", "42", ""]},
        "cases": cases,
        "messages": messages,
    }, sys.stdout, indent=0)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
