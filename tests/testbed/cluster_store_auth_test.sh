#!/usr/bin/env bash
# System test of `dualpath cluster up --store` with authentication (issue 25 item 1, acceptance 2;
# docs/store.md "Security"). A 1P1D cluster with its store (etcd, two masters, a store node per
# node: the same RunStore start as `cluster run --store`). Checks
#  - the store's credentials are in <state dir>/store-auth: directory 0700, keys and token 0600,
#    no CA key; `cluster up` printed the client flags a user needs;
#  - no store process runs with an --insecure flag, and etcd runs with --client-cert-auth;
#  - from a node's namespace (the compute network, where an attacker on it would be), every
#    plaintext, certificate-less or foreign-certificate gRPC call to etcd, the leader master and
#    each store node (the forged JoinNode and Record among them) is refused at the TLS handshake,
#    while the store's client certificate is served (store_auth_probe, tests/store/auth_probe.h);
#  - the printed client flags work: `store stats` lists both nodes, and `store bench` with the
#    store's token writes and reads every byte through the nodes' transfer engines (0 wrong);
#  - `cluster down` leaves no store process, tier file or state directory.
# On the code before issue 25 the store ran plaintext: the probe's refusals fail there.
#
# usage: cluster_store_auth_test.sh DUALPATH_BINARY STORE_AUTH_PROBE
# Exit 77 (CTest: skipped) without root, GlusterFS or etcd.
set -uo pipefail
bin=$(realpath "$1")
probe=$(realpath "$2")
NAME=authst

source "$(dirname "$0")/../lib/testbed_run.sh"
testbed_require etcd
testbed_begin

start=$(date +%s)
timeout -k 10 150 "$bin" cluster up --name "$NAME" --pd 1P1D --store --store-dram-mib 32 \
  >"$tmp/up.txt" 2>&1
rc=$?
echo "--- cluster up --store exit $rc in $(($(date +%s) - start)) s:"
cat "$tmp/up.txt"
if [[ $rc != 0 ]]; then
  fail "cluster up --store exited $rc"
  exit 1
fi
state=$("$bin" cluster get --name "$NAME" state_dir)
auth=$state/store-auth
etcd=$(sed -n "s/^store $NAME: etcd \([^,]*\), mutual TLS.*/\1/p" "$tmp/up.txt")
[[ -n $etcd ]] || fail "cluster up did not print the store's etcd address"
grep -qF -- "--tls-cert $auth/client.crt --tls-key $auth/client.key --tls-ca $auth/ca.crt" \
  "$tmp/up.txt" || fail "cluster up did not print the client flags"
grep -qF -- "--transfer-token-file $auth/transfer.token --ucx-net-devices comp0" "$tmp/up.txt" ||
  fail "cluster up did not print the token flag"

# Credentials: owner-only, and no CA key anyone could issue certificates with.
[[ $(stat -c %a "$auth") == 700 ]] || fail "$auth has mode $(stat -c %a "$auth"), want 700"
for f in "$auth"/*.key "$auth/transfer.token"; do
  [[ $(stat -c %a "$f") == 600 ]] || fail "$f has mode $(stat -c %a "$f"), want 600"
done
[[ -e $auth/ca.key ]] && fail "the CA's private key was written"

# The processes: none with an --insecure flag; etcd requires client certificates.
pgrep -af -- "--cluster $NAME( |$)" >"$tmp/procs.txt"
echo "--- store processes:"
cat "$tmp/procs.txt"
[[ $(grep -c "store master" "$tmp/procs.txt") == 2 ]] || fail "want 2 store masters"
[[ $(grep -c "store node" "$tmp/procs.txt") == 2 ]] || fail "want 2 store nodes"
grep -E -- "--(etcd-|master-|node-)?insecure" "$tmp/procs.txt" && fail "a store process runs --insecure"
pgrep -af -- "--data-dir=$state/" >"$tmp/etcd.txt"
grep -q -- "--client-cert-auth" "$tmp/etcd.txt" || fail "etcd without --client-cert-auth: $(cat "$tmp/etcd.txt")"
grep -q -- "--peer-client-cert-auth" "$tmp/etcd.txt" || fail "etcd's peer listener without client certificates"

# A certificate of another CA (self-signed), as an outsider with certificates of its own holds.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=foreign \
  -addext extendedKeyUsage=clientAuth -keyout "$tmp/foreign.key" -out "$tmp/foreign.crt" \
  >/dev/null 2>&1 || fail "openssl could not make the foreign certificate"
chmod 600 "$tmp/foreign.key"

echo "--- store_auth_probe from d0's namespace:"
"$bin" cluster exec --name "$NAME" d0 -- "$probe" --etcd "$etcd" --cluster "$NAME" \
  --cert "$auth/client.crt" --key "$auth/client.key" --ca "$auth/ca.crt" \
  --foreign-cert "$tmp/foreign.crt" --foreign-key "$tmp/foreign.key" >"$tmp/probe.txt" 2>"$tmp/probe.err"
rc=$?
cat "$tmp/probe.txt"
[[ $rc == 0 ]] || fail "store_auth_probe exited $rc: $(tail -5 "$tmp/probe.err")"
# etcd, the master (Stats, JoinNode) and two nodes (Record), each as 3 callers: 15 refusals.
refused=$(grep -c "^PASS .*want refused" "$tmp/probe.txt")
[[ $refused == 15 ]] || fail "$refused refused calls checked, want 15"

# The client flags cluster up printed.
client=(--cluster "$NAME" --etcd "$etcd" --tls-cert "$auth/client.crt" --tls-key "$auth/client.key"
  --tls-ca "$auth/ca.crt")
"$bin" cluster exec --name "$NAME" p0 -- "$bin" store stats "${client[@]}" --min-nodes 2 \
  >"$tmp/stats.txt" 2>&1 || fail "store stats: $(cat "$tmp/stats.txt")"
echo "--- store stats: $(cat "$tmp/stats.txt")"
timeout 120 "$bin" cluster exec --name "$NAME" d0 -- "$bin" store bench "${client[@]}" \
  --transfer-token-file "$auth/transfer.token" --ucx-net-devices comp0 --host d0 --no-local-shm \
  --size 65536 --count 16 --batch 4 --replicas 2 --expect-all >"$tmp/bench.txt" 2>&1
rc=$?
echo "--- store bench:"
cat "$tmp/bench.txt"
[[ $rc == 0 ]] || fail "store bench exited $rc"
# --no-local-shm: every byte crossed a node's transfer engine, which checked the token.
grep -q "hits 16 (local 0, remote 16), misses 0, wrong 0" "$tmp/bench.txt" ||
  fail "store bench did not read every object back over the transfer engines"

"$bin" cluster down --name "$NAME" >/dev/null 2>&1 || fail "cluster down failed"
if pgrep -af -- "--cluster $NAME( |$)" >"$tmp/left.txt"; then
  fail "processes left: $(cat "$tmp/left.txt")"
fi
left_tiers=$(compgen -G "/dev/shm/dualpath-store-$NAME-*")
[[ -n $left_tiers ]] && fail "store tier files left: $left_tiers"
[[ -e $state ]] && fail "state dir $state left"

if ((failures > 0)); then
  echo "FAILED ($failures)"
  exit 1
fi
echo "PASS"
