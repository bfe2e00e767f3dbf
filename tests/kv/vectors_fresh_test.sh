#!/usr/bin/env bash
# Regenerates the vLLM sha256_cbor vectors and checks the committed file is identical, so the
# C++ tests can never drift from the Python reference. Exit 77 (skip) without python3-cbor2.
set -euo pipefail
dir="$1"
if ! /usr/bin/python3 -c 'import cbor2' 2>/dev/null; then
  echo "python3-cbor2 not installed: skipping"
  exit 77
fi
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
/usr/bin/python3 "$dir/gen_vectors.py" >"$tmp"
if ! cmp -s "$tmp" "$dir/data/vllm_sha256_cbor_vectors.json"; then
  echo "tests/kv/data/vllm_sha256_cbor_vectors.json differs from gen_vectors.py output" >&2
  exit 1
fi
echo "vectors match gen_vectors.py"
