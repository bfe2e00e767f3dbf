#!/usr/bin/env bash
# Acceptance 2 of the storage issue: reading block files through a node's GlusterFS FUSE mount on
# the testbed (`dualpath cluster up`, 400 Mbit/s storage links) reaches >= 90% of the link's
# goodput.
#
#   bench/storage/testbed_read.sh [--name N] [--files F] [--queue-depth Q] [--rounds R]
#                                 [--bin path/to/dualpath]
#
# Brings up cluster N (1P1D; reuses it if it is already up, and leaves it up then), then:
# 1. writes F block files of 1 MiB through the storage node's unshaped admin mount;
# 2. measures the link's goodput as the testbed's own tool sees it: `dualpath cluster read` (an
#    O_DIRECT reader run inside node p0) of one 256 MiB file through p0's mount;
# 3. R rounds, alternating the order: fio (--opendir, io_uring, O_DIRECT, same depth) and
#    `dualpath bench storage --read-only` (every block verified) read the whole set through
#    p0's mount, i.e. across p0's shaped storage link.
# Prints dualpath's mean read rate as a fraction of the goodput (acceptance: >= 0.9) and of fio.
# Needs root, fio, jq.
set -euo pipefail

name=stgbench
files=256
qd=16
rounds=3
bin=$(pwd)/build/release/bin/dualpath
while [[ $# -gt 0 ]]; do
  case "$1" in
    --name) name=$2; shift 2 ;;
    --files) files=$2; shift 2 ;;
    --queue-depth) qd=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --bin) bin=$(realpath "$2"); shift 2 ;;
    *) echo "testbed_read.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x $bin ]] || { echo "testbed_read.sh: $bin not built" >&2; exit 2; }

created=0
if ! "$bin" cluster status --name "$name" >/dev/null 2>&1; then
  "$bin" cluster up --pd 1P1D --name "$name" >/dev/null
  created=1
fi
admin=$("$bin" cluster get --name "$name" storage.admin_mount)
mnt=$("$bin" cluster get --name "$name" p0.mount)
rate_bps=$("$bin" cluster get --name "$name" stor_rate_bps)
work=storage_bench.$$
cleanup() {
  rm -rf "${admin:?}/$work"
  if ((created)); then "$bin" cluster down --name "$name" >/dev/null; fi
}
trap cleanup EXIT
mkdir -p "$admin/$work/set"

setup=$("$bin" bench storage --dir "$admin/$work/set" --files "$files" --queue-depth "$qd" \
  --sync data --keep --json --json-details)
fp=$(jq -r .fingerprint <<<"$setup")
dd if=/dev/urandom of="$admin/$work/big" bs=1M count=256 status=none

# Link goodput seen by the testbed's O_DIRECT reader inside the node.
line=$("$bin" cluster exec --name "$name" p0 -- "$bin" cluster read "$mnt/$work/big" | tail -n 1)
goodput_mbps=$(sed -E 's/.*file_mbps=([0-9.]+).*/\1/' <<<"$line")
goodput=$(jq -n "$goodput_mbps * 1e6 / 8 / 1e9")  # GB/s
printf 'link %s bit/s nominal (%.4f GB/s); goodput via `cluster read` %.4f GB/s\n' \
  "$rate_bps" "$(jq -n "$rate_bps / 8 / 1e9")" "$goodput"

run_fio() {
  local out
  out=$(fio --name=dp_tb --opendir="$mnt/$work/set/$fp" --rw=read --bs=1048576 \
    --iodepth="$qd" --ioengine=io_uring --direct=1 --numjobs=1 --thread --group_reporting \
    --output-format=json 2>/dev/null | sed -n '/^{/,$p')
  fio_gbps=$(jq '.jobs[0].read.bw_bytes / 1e9' <<<"$out")
}
run_dp() {
  dp_gbps=$("$bin" bench storage --dir "$mnt/$work/set" --files "$files" --queue-depth "$qd" \
    --fingerprint "$fp" --read-only --keep --json | jq .read_gbps)
}
printf '%-6s %-10s %10s %10s %12s %10s\n' round first dp_GBps fio_GBps dp/goodput dp/fio
sum_dp=0
sum_fio=0
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2 == 1)); then first=dualpath; run_dp; run_fio; else first=fio; run_fio; run_dp; fi
  printf '%-6s %-10s %10.4f %10.4f %12.3f %10.3f\n' "$r" "$first" "$dp_gbps" "$fio_gbps" \
    "$(jq -n "$dp_gbps / $goodput")" "$(jq -n "$dp_gbps / $fio_gbps")"
  sum_dp=$(jq -n "$sum_dp + $dp_gbps")
  sum_fio=$(jq -n "$sum_fio + $fio_gbps")
done
printf 'files=%s x 1 MiB, queue_depth=%s, rounds=%s, through %s\n' "$files" "$qd" "$rounds" "$mnt"
printf 'mean dualpath %.4f GB/s = %.3f of goodput (acceptance: >= 0.9), %.3f of fio\n' \
  "$(jq -n "$sum_dp / $rounds")" "$(jq -n "$sum_dp / $rounds / $goodput")" \
  "$(jq -n "$sum_dp / $sum_fio")"
