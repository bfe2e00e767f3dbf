#!/usr/bin/env bash
# The dualpath command given hostile or careless input (issue 19, defects 6 and 8):
#  - every subcommand that reads a file, given a directory, a character device (/dev/zero) or a
#    FIFO with no writer, exits 2 at once with one line naming the path (never hangs or throws);
#  - no exception reaches the user raw: a number no double holds, a buffer size beyond RAM;
#  - output that cannot be written (missing directory, /dev/full, a directory, stdout on a full
#    device) is one line naming the output and a non-zero status, and leaves no partial file;
#  - (issue 25 item 3) an output is never written through a symlink, a FIFO or block device target
#    is refused (exit 2), a 255-byte name works.
# Each run is bounded by `timeout 20`: a hang fails the test instead of hanging it.
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# expect WANT_RC WANT_TEXT ARGS... [< stdin via $stdin]: exit status WANT_RC, exactly one line on
# stderr containing WANT_TEXT, and no library exception text.
stdin=/dev/null
expect() {
  local want_rc=$1 want=$2
  shift 2
  timeout 20 "$bin" "$@" <"$stdin" >"$tmp/out.txt" 2>"$tmp/err.txt"
  local rc=$?
  [[ $rc -ne 124 ]] || fail "'$*' hung (killed after 20 s)"
  [[ $rc -eq $want_rc ]] || fail "'$*' exited $rc, want $want_rc: $(cat "$tmp/err.txt")"
  local lines
  lines=$(wc -l <"$tmp/err.txt")
  [[ $lines -eq 1 ]] || fail "'$*' wrote $lines lines on stderr, want 1: $(cat "$tmp/err.txt")"
  grep -qF -- "$want" "$tmp/err.txt" || fail "'$*' error lacks '$want': $(cat "$tmp/err.txt")"
  if grep -qE 'json\.exception|std::|terminate called|what\(\)' "$tmp/err.txt"; then
    fail "'$*' printed a raw library message: $(cat "$tmp/err.txt")"
  fi
}

# Non-regular inputs. The .json/.jsonl names make each command take the file path it would take
# for a real file of that kind (model JSON, WEKA session, Mooncake trace).
mkdir "$tmp/dir.json" "$tmp/dir.jsonl" "$tmp/empty"
mkfifo "$tmp/fifo.json" "$tmp/fifo.jsonl" "$tmp/fifo.blk"
ln -s /dev/zero "$tmp/zero.json"
ln -s /dev/zero "$tmp/zero.jsonl"
for kind in dir fifo zero; do
  json=$tmp/$kind.json
  jsonl=$tmp/$kind.jsonl
  expect 2 "$json" sim --config "$json"
  expect 2 "$json" sim --model "$json" --agents 4 --max-len 16K
  expect 2 "$json" kv models "$json"
  expect 2 "$json" kv inspect /nonexistent --model "$json"
  expect 2 "$jsonl" sim --trace "$jsonl" --agents 4
  expect 2 "$jsonl" trace stats "$jsonl"
  expect 2 "$json" trace stats "$json" --format weka
  expect 2 "$jsonl" trace stats "$jsonl" --format mooncake
  expect 2 "$json" kv inspect "$json"
done
# A WEKA session path that is no file (the directory case is a WEKA directory: here an empty one).
expect 2 "$tmp/fifo.json" sim --trace "$tmp/fifo.json" --agents 4
expect 2 "$tmp/empty" sim --trace "$tmp/empty" --agents 4
expect 2 "$tmp/empty" trace stats "$tmp/empty"
expect 2 "/dev/zero" kv inspect /dev/zero
for p in /dev/zero "$tmp/fifo.blk" "$tmp/empty"; do
  expect 2 "$p is not a regular file" cluster read "$p"
done
expect 2 "$tmp/fifo.blk" kv inspect "$tmp/fifo.blk"
# Token ids on stdin: /dev/zero never ends; its first byte is not text.
stdin=/dev/zero expect 2 "not text" kv hash --seed 0 --block-size 16

# A missing input the user named is bad input in every command (docs/cli.md), not a runtime error.
for p in "$tmp/missing.json" "$tmp/missing.jsonl" "$tmp/missing_dir"; do
  expect 2 "$p" sim --trace "$p" --agents 4
  expect 2 "$p" trace stats "$p"
done
expect 2 "$tmp/missing.json does not exist" sim --config "$tmp/missing.json"
expect 2 "$tmp/missing.json does not exist" sim --model "$tmp/missing.json" --agents 4
expect 2 "$tmp/missing.json" kv models "$tmp/missing.json"
expect 2 "$tmp/missing.kvb" kv inspect "$tmp/missing.kvb"
expect 2 "$tmp/missing.json" trace stats "$tmp/missing.json" --format weka

# A file where a directory is expected.
expect 2 "/dev/null" bench storage --dir /dev/null --files 2
echo x >"$tmp/plain"
expect 2 "$tmp/plain" bench storage --dir "$tmp/plain" --files 2

# Exceptions that used to escape raw.
echo '{"hardware": {"snic_gbps": 1e999}}' >"$tmp/huge.json"
expect 2 "number out of range" sim --config "$tmp/huge.json"
echo '{"block_size": 64, "requests": [{"t": 1e999, "in": 64, "out": 1, "hash_ids": [1]}]}' \
  >"$tmp/trace_0001.json"
expect 2 "$tmp/trace_0001.json" sim --trace "$tmp/trace_0001.json" --agents 4
expect 2 "--mib" bench pool --mib 100000 --dir "$tmp"
expect 2 "--mib" bench pool --mib 18446744073709551615 --dir "$tmp"
[[ -z $(ls "$tmp" | grep dpbench) ]] || fail "bench pool left a temporary directory"

# Outputs that cannot be written: one line naming the output, nothing partial left behind.
small=(sim --agents 4 --max-len 16K --system basic)
expect 1 "$tmp/no/such/dir/out.json" "${small[@]}" --json "$tmp/no/such/dir/out.json"
[[ ! -e $tmp/no ]] || fail "--json into a missing directory created it"
expect 1 "--json /dev/full" "${small[@]}" --json /dev/full
expect 2 "--json $tmp/empty is a directory" "${small[@]}" --json "$tmp/empty"
[[ -z $(ls "$tmp/empty") ]] || fail "--json into a directory left files: $(ls "$tmp/empty")"
expect 2 "--plot" "${small[@]}" --plot "$tmp/zero.json"
expect 2 "--plot" "${small[@]}" --plot "$tmp/it's"
[[ ! -e "$tmp/it's" ]] || fail "--plot with a quote created the directory"
# A good --json still works and leaves only the file.
timeout 60 "$bin" "${small[@]}" --json "$tmp/ok.json" >/dev/null || fail "--json ok.json failed"
[[ -s $tmp/ok.json ]] || fail "--json ok.json is empty"
[[ -z $(ls -A "$tmp" | grep -e 'ok.json.tmp' -e '.dualpath-out') ]] || fail "--json left a temporary file"

# Output files in a shared directory (issue 25 item 3). A symlink planted at the name of the old
# temporary (<target>.tmp.<pid>: the pid is known here because the shell execs the command) must
# not make the output land on the link's target.
echo precious >"$tmp/victim"
timeout 60 bash -c 'ln -s "$1" "$2.tmp.$$" && exec "$3" sim --agents 4 --max-len 16K --system basic --json "$2"' \
  _ "$tmp/victim" "$tmp/planted.json" "$bin" >/dev/null 2>"$tmp/err.txt" ||
  fail "--json beside a planted temporary name failed: $(cat "$tmp/err.txt")"
[[ $(cat "$tmp/victim") == precious ]] || fail "--json wrote through a planted symlink"
grep -q '"system"' "$tmp/planted.json" || fail "--json planted.json lacks the results"
# A target that is a symlink is refused, whatever it points to; FIFOs and block devices too.
ln -s "$tmp/victim" "$tmp/link.json"
expect 2 "--json $tmp/link.json is a symbolic link" "${small[@]}" --json "$tmp/link.json"
[[ $(cat "$tmp/victim") == precious ]] || fail "--json wrote through a symlink target"
mkfifo "$tmp/out.fifo"
expect 2 "--json $tmp/out.fifo is not a regular file (a FIFO)" "${small[@]}" --json "$tmp/out.fifo"
if mknod "$tmp/blockdev" b 7 250 2>/dev/null; then
  expect 2 "is not a regular file (a block device)" "${small[@]}" --json "$tmp/blockdev"
else
  echo "cli_errors: block device target not checked (mknod needs root)"
fi
# A name of 255 bytes works (the old temporary's name was longer than the file system allows).
long=$tmp/$(printf 'n%.0s' {1..250}).json
timeout 60 "$bin" "${small[@]}" --json "$long" >/dev/null 2>"$tmp/err.txt" ||
  fail "--json with a 255-byte name failed: $(cat "$tmp/err.txt")"
[[ -s $long ]] || fail "--json with a 255-byte name wrote nothing"
# gnuplot writes the plots itself: a symlink planted at a plot's name in --plot DIR is replaced,
# never written through.
if command -v gnuplot >/dev/null; then
  mkdir "$tmp/plots"
  ln -s "$tmp/victim" "$tmp/plots/jct.png"
  ln -s "$tmp/victim" "$tmp/plots/gnuplot.log"
  expect 2 "gnuplot.log is a symbolic link" "${small[@]}" --plot "$tmp/plots"
  rm "$tmp/plots/gnuplot.log"
  timeout 60 "$bin" "${small[@]}" --plot "$tmp/plots" >/dev/null 2>"$tmp/err.txt" ||
    fail "--plot beside a planted symlink failed: $(cat "$tmp/err.txt")"
  [[ $(cat "$tmp/victim") == precious ]] || fail "--plot wrote through a symlink at jct.png"
  [[ -f $tmp/plots/jct.png && ! -L $tmp/plots/jct.png ]] || fail "--plot did not write jct.png"
  [[ -z $(ls -A "$tmp/plots" | grep dualpath-plot) ]] || fail "--plot left its private directory"
fi

# The store's processes (issue 16): bad flags are refused before anything connects or binds.
etcd=(--etcd 127.0.0.1:1 --etcd-insecure)
expect 2 "cluster 'bad/name'" store master --cluster bad/name "${etcd[@]}" --listen 127.0.0.1:0 --insecure
expect 2 "needs --tls-cert" store master --cluster c "${etcd[@]}" --listen 127.0.0.1:0
expect 2 "--election-ttl" store master --cluster c "${etcd[@]}" --listen 127.0.0.1:0 --insecure --election-ttl -1
expect 2 "--id = 0 is outside [1, 4294967295]" store node --cluster c "${etcd[@]}" --id 0 --insecure
expect 2 "--dram-mib" store node --cluster c "${etcd[@]}" --id 1 --dram-mib 0 --insecure
expect 2 "--ttl" store node --cluster c "${etcd[@]}" --id 1 --insecure --ttl 0.5
expect 2 "--transfer-poll-us = 100001 is outside" store node --cluster c "${etcd[@]}" --id 1 --insecure --transfer-poll-us 100001
expect 2 "needs --tls-cert" store node --cluster c "${etcd[@]}" --id 1
expect 2 "--size" store bench --cluster c "${etcd[@]}" --master-insecure --size 0
expect 2 "--phase" store bench --cluster c "${etcd[@]}" --master-insecure --phase x
expect 2 "--batch" store bench --cluster c "${etcd[@]}" --master-insecure --count 2 --batch 3

# Issue 25 item 8. Every numeric flag of every command refuses, naming it, a negative value where
# it takes none (CLI11 turned `--count -1` into 2^64-1: a bench that put forever), a number beyond
# 64 bits, nan, inf and numbers no double holds (one validator: src/cli/number_flags.h); and the
# store's flags have stated ranges (docs/store.md "Input ranges"), checked before anything starts.
bench=(store bench --cluster c "${etcd[@]}" --master-insecure)
expect 2 "--count: -1 is negative" "${bench[@]}" --count -1
expect 2 "--count: 18446744073709551616 is beyond 2^64-1" "${bench[@]}" --count 18446744073709551616
expect 2 "--count = 4294967297 is outside [1, 4294967296]" "${bench[@]}" --count 4294967297
expect 2 "--retry = 1e+300 is outside [0, 86400] s" "${bench[@]}" --retry 1e300
expect 2 "--retry: nan is not a finite number" "${bench[@]}" --retry nan
expect 2 "--retry: 1e999 is not a finite number" "${bench[@]}" --retry 1e999
expect 2 "--size: -5 is negative" "${bench[@]}" --size -5
expect 2 "--replicas = 4 is outside [1, 3]" "${bench[@]}" --replicas 4
expect 2 "--local-node = 4294967296 is outside" "${bench[@]}" --local-node 4294967296
expect 2 "--etcd-timeout = 0 is outside" "${bench[@]}" --etcd-timeout 0
expect 2 "--etcd-timeout = 1e+20 is outside" "${bench[@]}" --etcd-timeout 1e20
expect 2 "--min-nodes: -1 is negative" store stats --cluster c "${etcd[@]}" --master-insecure \
  --min-nodes -1
expect 2 "--retry = -1 is outside" store stats --cluster c "${etcd[@]}" --master-insecure --retry -1
node=(store node --cluster c "${etcd[@]}" --insecure)
expect 2 "--id: -1 is negative" "${node[@]}" --id -1
expect 2 "--id = 4294967296 is outside [1, 4294967295]" "${node[@]}" --id 4294967296
expect 2 "--dram-mib: -1 is negative" "${node[@]}" --id 1 --dram-mib -1
expect 2 "--ttl = 1e+300 is outside [1, 3600] s" "${node[@]}" --id 1 --ttl 1e300
expect 2 "--high-watermark = 2 is outside [0, 1]" "${node[@]}" --id 1 --high-watermark 2
expect 2 "--low-watermark: inf is not a finite number" "${node[@]}" --id 1 --low-watermark inf
master=(store master --cluster c "${etcd[@]}" --listen 127.0.0.1:0 --insecure)
expect 2 "--election-ttl = 0.5 is outside [1, 3600] s" "${master[@]}" --election-ttl 0.5
expect 2 "--join-grace = 1e+300 is outside" "${master[@]}" --join-grace 1e300
expect 2 "--put-timeout = 0 is outside" "${master[@]}" --put-timeout 0
expect 2 "--pin-ttl: nan is not a finite number" "${master[@]}" --pin-ttl nan
# The same class in other commands' flags: the one validator covers them too.
expect 2 "--lease-ms: -1 is negative" pool create "$tmp/pool" --size 4M --lease-ms -1
expect 2 "--mib: -1 is negative" bench pool --mib -1 --dir "$tmp"
expect 2 "--seed: -1 is negative" sim --agents 4 --seed -1
expect 2 "--aps: inf is not a finite number" sim --agents 4 --aps inf
expect 2 "--timeout-ms: 99999999999999999999 is beyond the 64-bit range" \
  bench transfer --connect 127.0.0.1:1 --timeout-ms 99999999999999999999
expect 2 "--result-wait-blocks: Value 2000000 not in range 0 to 1048576" \
  engine --role decode --result-wait-blocks 2000000
expect 2 "--max-decode-batch: Value 70000 not in range 0 to 65536" \
  engine --role decode --max-decode-batch 70000

# Issue 25 item 1: a store node without the cluster's transfer token is refused unless
# --insecure (as an engine is), before it creates its tier file or listens.
expect 2 "the transfer engine needs the cluster's token (--transfer-token-file), or --insecure" \
  store node --cluster c "${etcd[@]}" --id 1 --shm-dir "$tmp" --rpc-listen "unix:$tmp/node.sock"
[[ -e $tmp/dualpath-store-c-1 || -e $tmp/node.sock ]] && fail "the refused store node left files"
# Certificate and key that do not belong together, a CA file without a certificate: exit 2 naming
# the flag (not a server that fails to start with a raw gRPC line, or a handshake that fails).
for k in a b; do
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj "/CN=$k" \
    -keyout "$tmp/$k.key" -out "$tmp/$k.crt" >/dev/null 2>&1 || fail "openssl req"
  chmod 600 "$tmp/$k.key"
done
mismatch="$tmp/b.key is not the private key of the certificate in"
expect 2 "--tls-key $mismatch --tls-cert $tmp/a.crt" store master --cluster c "${etcd[@]}" \
  --listen 127.0.0.1:0 --tls-cert "$tmp/a.crt" --tls-key "$tmp/b.key"
expect 2 "--etcd-tls-key $mismatch --etcd-tls-cert $tmp/a.crt" store stats --cluster c \
  --etcd 127.0.0.1:1 --etcd-tls-cert "$tmp/a.crt" --etcd-tls-key "$tmp/b.key" --insecure
expect 2 "--master-tls-key $mismatch --master-tls-cert $tmp/a.crt" store bench --cluster c \
  "${etcd[@]}" --master-tls-cert "$tmp/a.crt" --master-tls-key "$tmp/b.key"
expect 2 "--node-tls-key $mismatch" store master --cluster c "${etcd[@]}" --listen 127.0.0.1:0 \
  --tls-cert "$tmp/a.crt" --tls-key "$tmp/a.key" --node-tls-cert "$tmp/a.crt" \
  --node-tls-key "$tmp/b.key"
expect 2 "--tls-ca $tmp/a.key holds no X.509 certificate" store stats --cluster c \
  "${etcd[@]}" --tls-ca "$tmp/a.key"
expect 2 "--tls-key $mismatch --tls-cert $tmp/a.crt" control serve --listen 127.0.0.1:0 \
  --tls-cert "$tmp/a.crt" --tls-key "$tmp/b.key" --expect-prefill 1 --expect-decode 1

# Standard output on a full device: a failure, not a silent success.
timeout 20 "$bin" kv models >/dev/full 2>"$tmp/err.txt"
rc=$?
[[ $rc -eq 1 ]] || fail "kv models >/dev/full exited $rc, want 1"
grep -q "write stdout" "$tmp/err.txt" || fail "kv models >/dev/full: $(cat "$tmp/err.txt")"

echo "cli_errors: ok"
