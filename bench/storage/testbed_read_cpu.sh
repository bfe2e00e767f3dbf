#!/usr/bin/env bash
# The machine's CPU per byte read through a node's GlusterFS mount on the testbed, with the
# testbed's settings (MTU 9000, GlusterFS threads sized for a small machine, the brick serving
# from its page cache: scripts/testbed/testbed.sh) against the settings before them (MTU 1500 and
# GlusterFS's defaults), in the same script, alternating. On the 2-core machine that runs a whole
# emulated cluster this CPU is shared with the engines, so it bounds how many storage links can
# run full at once (docs/testbed.md "CPU per byte read").
#
#   bench/storage/testbed_read_cpu.sh [--rounds R] [--files F] [--bin path/to/dualpath]
#
# Each round brings up a 1P1D cluster with a 10 Gbit/s storage link (the link is not the limit
# here: the CPU is), writes F block files of 516 KiB (a 64-token block of the reference model
# with its header) through p0's mount, reads them back 3 times with `dualpath bench storage
# --read-only` (O_DIRECT, every block verified) inside p0, and counts the busy CPU seconds of the
# whole machine (/proc/stat: user, system, irq, softirq) and the virtual disk's reads during the
# reads. Prints CPU seconds per GB read, per configuration (median over rounds x reads), and
# their ratio. Needs root; takes about 1 minute per round.
set -euo pipefail

rounds=2
files=800
bin=$(pwd)/build/release/bin/dualpath
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --files) files=$2; shift 2 ;;
    --bin) bin=$(realpath "$2"); shift 2 ;;
    *) echo "testbed_read_cpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x $bin ]] || { echo "testbed_read_cpu.sh: $bin not built" >&2; exit 2; }
name=rdcpu$$
block=528384
trap '"$bin" cluster down --name "$name" >/dev/null 2>&1' EXIT

busy() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
disk_sectors() { awk '$3 ~ /^(vd|sd|nvme)[a-z0-9]*$/ && $3 !~ /[0-9]p?[0-9]+$/ { s += $6 } END { print s + 0 }' /proc/diskstats; }
hz=$(getconf CLK_TCK)
out=$(mktemp)

before_opts="performance.client-io-threads on performance.io-thread-count 16"
before_opts+=" client.event-threads 2 server.event-threads 2 network.remote-dio disable"

one() { # before|now: one bring-up, F files written, 3 timed reads
  local label=$1 mnt fp
  local settings=(-u DUALPATH_TESTBED_MTU -u DUALPATH_TESTBED_VOLUME_OPTS)
  [[ $label == before ]] &&
    settings=(DUALPATH_TESTBED_MTU=1500 DUALPATH_TESTBED_VOLUME_OPTS="$before_opts")
  env "${settings[@]}" "$bin" cluster up --name "$name" --pd 1P1D --stor-rate 10gbit >/dev/null
  mnt=$("$bin" cluster get --name "$name" p0.mount)
  fp=$("$bin" cluster exec --name "$name" p0 -- "$bin" bench storage --dir "$mnt/bench" \
    --block-bytes "$block" --files "$files" --keep --json --json-details 2>/dev/null |
    tail -1 | jq -r .fingerprint)
  for _ in 1 2 3; do
    local c0 d0 c1 d1
    c0=$(busy) d0=$(disk_sectors)
    "$bin" cluster exec --name "$name" p0 -- "$bin" bench storage --dir "$mnt/bench" \
      --block-bytes "$block" --files "$files" --read-only --fingerprint "$fp" --json >/dev/null
    c1=$(busy) d1=$(disk_sectors)
    echo "$label $(((c1 - c0))) $(((d1 - d0) * 512))" >>"$out"
  done
  "$bin" cluster down --name "$name" >/dev/null
}

for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then order="before now"; else order="now before"; fi
  for cfg in $order; do one "$cfg"; done
done
uptime
python3 - "$out" "$hz" "$files" "$block" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
hz, files, block = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
gb = files * block / 1e9
per = {}
for label, ticks, disk in rows:
    per.setdefault(label, []).append((int(ticks) / hz / gb, int(disk) / 1e9 / gb))
print(f"CPU seconds of the whole machine per GB read through p0's mount ({files} x {block} B, "
      f"O_DIRECT, verified)")
for label, title in (("before", "MTU 1500, GlusterFS defaults"), ("now", "testbed defaults")):
    v = per[label]
    print(f"  {title:30s} median {statistics.median(c for c, _ in v):5.2f} CPU-s/GB "
          f"(min {min(c for c, _ in v):.2f}, max {max(c for c, _ in v):.2f}, n {len(v)}); "
          f"virtual disk read {statistics.median(d for _, d in v):.2f} GB per GB")
ratio = statistics.median(c for c, _ in per["now"]) / statistics.median(c for c, _ in per["before"])
print(f"  ratio now / before: {ratio:.2f}")
PY
rm -f "$out"
