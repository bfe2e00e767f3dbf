#!/usr/bin/env bash
# Acceptance 1 of the storage issue: read bandwidth of `dualpath bench storage` against fio
# (io_uring, O_DIRECT) on the SAME file set, block size and queue depth, in the same script.
#
#   bench/storage/vs_fio.sh [--dir D] [--queue-depth Q] [--files N] [--block-bytes B]
#                           [--rounds R] [--bin path/to/dualpath]
#
# 1. `dualpath bench storage --keep` writes N block files of B bytes (4 KiB header included, so
#    B = 1 MiB means one 1 MiB read per file for both tools) with fdatasync, and reads them once.
# 2. R rounds, each reading the whole set once with fio (--opendir on the model directory,
#    --ioengine=io_uring --direct=1 --bs=B --iodepth=Q) and once with
#    `dualpath bench storage --read-only` (same files, same depth, every block verified). The
#    order alternates per round so neither tool always reads right after the other.
# 3. Prints each round and the ratio of the mean read bandwidths (dualpath / fio).
# Timings on a shared machine are noisy: compare the ratio, not the absolute figures.
# Needs fio and jq. D must be on a file system that accepts O_DIRECT (not tmpfs).
set -euo pipefail

dir=/var/tmp/dp_vs_fio
qd=16
files=2048
block=1048576
rounds=5
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

setup=$("$bin" bench storage --dir "$work" --queue-depth "$qd" --files "$files" \
  --block-bytes "$block" --sync data --keep --json --json-details)
fp=$(jq -r .fingerprint <<<"$setup")
mdir=$(jq -r .model_dir <<<"$setup")
nfiles=$(find "$mdir" -name '*.kvb' | wc -l)
[[ $nfiles -eq $files ]] || { echo "vs_fio.sh: expected $files files, found $nfiles" >&2; exit 1; }
printf 'set: %s files x %s bytes in %s; dualpath write %.3f GB/s (fdatasync each)\n' \
  "$files" "$block" "$mdir" "$(jq .write_gbps <<<"$setup")"

run_fio() {
  local out bytes
  out=$(fio --name=dp_vs_fio --opendir="$mdir" --rw=read --bs="$block" --iodepth="$qd" \
    --ioengine=io_uring --direct=1 --numjobs=1 --thread --group_reporting \
    --output-format=json 2>/dev/null | sed -n '/^{/,$p')  # fio prints "opendir added" first
  bytes=$(jq '.jobs[0].read.io_bytes' <<<"$out")
  [[ $bytes -eq $((files * block)) ]] || { echo "vs_fio.sh: fio read $bytes bytes" >&2; exit 1; }
  fio_gbps=$(jq '.jobs[0].read.bw_bytes / 1e9' <<<"$out")
  fio_cpu=$(jq '(.jobs[0].usr_cpu + .jobs[0].sys_cpu) / 100 * .jobs[0].read.runtime / 1000' \
    <<<"$out")
}
run_dp() {
  local out
  out=$("$bin" bench storage --dir "$work" --queue-depth "$qd" --files "$files" \
    --block-bytes "$block" --fingerprint "$fp" --read-only --keep --json --json-details)
  dp_gbps=$(jq .read_gbps <<<"$out")
  dp_cpu=$(jq .read_cpu_seconds <<<"$out")
}

printf '%-6s %-10s %12s %12s %8s %10s %10s\n' round first dp_read fio_read ratio dp_cpu_s fio_cpu_s
sum_dp=0
sum_fio=0
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2 == 1)); then
    first=dualpath; run_dp; run_fio
  else
    first=fio; run_fio; run_dp
  fi
  printf '%-6s %-10s %12.3f %12.3f %8.3f %10.3f %10.3f\n' "$r" "$first" "$dp_gbps" "$fio_gbps" \
    "$(jq -n "$dp_gbps / $fio_gbps")" "$dp_cpu" "$fio_cpu"
  sum_dp=$(jq -n "$sum_dp + $dp_gbps")
  sum_fio=$(jq -n "$sum_fio + $fio_gbps")
done
printf 'block_bytes=%s queue_depth=%s files=%s rounds=%s\n' "$block" "$qd" "$files" "$rounds"
printf 'mean read GB/s: dualpath %.3f, fio %.3f; ratio dualpath/fio = %.3f (acceptance: >= 0.9)\n' \
  "$(jq -n "$sum_dp / $rounds")" "$(jq -n "$sum_fio / $rounds")" "$(jq -n "$sum_dp / $sum_fio")"
