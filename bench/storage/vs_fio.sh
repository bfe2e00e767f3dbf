#!/usr/bin/env bash
# Acceptance 1 of the storage issue: read bandwidth of `dualpath bench storage` against fio
# (io_uring, O_DIRECT) on the SAME file set, block size and queue depth, in the same script.
#
#   bench/storage/vs_fio.sh [--dir D] [--queue-depth Q] [--files N] [--block-bytes B]
#                           [--rounds R] [--bin path/to/dualpath]
#
# Each round: `dualpath bench storage --keep` writes N block files of B bytes (header included)
# and reads them back verified; then fio reads exactly those files (--opendir on the model
# directory) with --ioengine=io_uring --direct=1 --bs=B --iodepth=Q; then the files are removed.
# Prints each round and the ratio of the mean read bandwidths (dualpath / fio). Timings on a
# shared machine are noisy: compare the ratio, not the absolute figures.
# Needs: fio, jq. D must be on a file system that accepts O_DIRECT (not tmpfs).
set -euo pipefail

dir=/var/tmp/dp_vs_fio
qd=16
files=2048
block=1048576
rounds=3
bin=build/release/bin/dualpath
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) dir=$2; shift 2 ;;
    --queue-depth) qd=$2; shift 2 ;;
    --files) files=$2; shift 2 ;;
    --block-bytes) block=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    *) echo "vs_fio.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for tool in fio jq; do
  command -v "$tool" >/dev/null || { echo "vs_fio.sh: $tool not installed" >&2; exit 2; }
done
[[ -x $bin ]] || { echo "vs_fio.sh: $bin not built (cmake --build --preset release)" >&2; exit 2; }

# Only ever remove what this script created.
mkdir -p "$dir"
work=$(mktemp -d "$dir/run.XXXXXX")
trap 'rm -rf "$work"' EXIT

printf '%-6s %12s %12s %12s %8s\n' round dp_write dp_read fio_read ratio
sum_dp=0
sum_fio=0
for ((r = 1; r <= rounds; r++)); do
  ours=$("$bin" bench storage --dir "$work" --queue-depth "$qd" --files "$files" \
    --block-bytes "$block" --sync none --keep --json)
  dp_read=$(jq -r .read_gbps <<<"$ours")
  dp_write=$(jq -r .write_gbps <<<"$ours")
  mdir=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -n 1)
  nfiles=$(find "$mdir" -name '*.kvb' | wc -l)
  [[ $nfiles -eq $files ]] || { echo "vs_fio.sh: expected $files files, found $nfiles" >&2; exit 1; }
  fio_json=$(fio --name=dp_vs_fio --opendir="$mdir" --rw=read --bs="$block" --iodepth="$qd" \
    --ioengine=io_uring --direct=1 --numjobs=1 --thread --group_reporting \
    --output-format=json 2>/dev/null | sed -n '/^{/,$p')  # fio prints "opendir added" first
  fio_bytes=$(jq '.jobs[0].read.io_bytes' <<<"$fio_json")
  expect=$((files * block))
  [[ $fio_bytes -eq $expect ]] || { echo "vs_fio.sh: fio read $fio_bytes bytes, want $expect" >&2; exit 1; }
  fio_read=$(jq '.jobs[0].read.bw_bytes / 1e9' <<<"$fio_json")
  ratio=$(jq -n "$dp_read / $fio_read")
  printf '%-6s %12.3f %12.3f %12.3f %8.3f\n' "$r" "$dp_write" "$dp_read" "$fio_read" "$ratio"
  sum_dp=$(jq -n "$sum_dp + $dp_read")
  sum_fio=$(jq -n "$sum_fio + $fio_read")
  rm -rf "$mdir"
done
ratio=$(jq -n "$sum_dp / $sum_fio")
printf 'block_bytes=%s queue_depth=%s files=%s rounds=%s\n' "$block" "$qd" "$files" "$rounds"
printf 'mean read GB/s: dualpath %.3f, fio %.3f; ratio dualpath/fio = %.3f (acceptance: >= 0.9)\n' \
  "$(jq -n "$sum_dp / $rounds")" "$(jq -n "$sum_fio / $rounds")" "$ratio"
