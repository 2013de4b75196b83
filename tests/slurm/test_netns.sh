#!/usr/bin/env bash
# slurm/hybrid.sbatch across two hosts for real: the netns_cluster.sh
# fixture (two network namespaces joined by a veth pair, one slurmd each).
# usage: test_netns.sh CASE BUILD_DIR SOURCE_DIR CLUSTER_DIR
#   netns_2hosts      2 trainers, master, 2 PS spread over both hosts (srun -m
#                     cyclic): the job finishes, and every rank's "ember-net:"
#                     line names its own host's veth end (UCX over the veth)
#   netns_link_cut    the link cut mid-run: within DEADLINE seconds every rank
#                     on host 1 prints an error naming a peer on host 2 and
#                     every process on host 2 has ended; the link then comes
#                     back (so that srun hears from host 2), host 2's ranks'
#                     errors name peers on host 1, and the job ends non-zero
#   netns_link_cut_resume  the same job with --checkpoint-dir D
#                     --checkpoint-every 50 --max-restarts 2 --save OUT; the
#                     link comes back once the failure is seen; the job
#                     resumes from its latest checkpoint and ends with the
#                     same tensors (bytes) as an uninterrupted run with --save
# The cases skip (77) when the fixture did (no netns, veth or netem here).
set -uo pipefail
case_name=$1 build=$2 src=$3 cdir=$4
DEADLINE=${NETNS_CUT_DEADLINE:-20}
[ -s "$cdir/netns.env" ] || { echo "SKIP: no netns cluster in $cdir (its start was skipped)"; exit 77; }
# shellcheck source=/dev/null
. "$cdir/netns.env"
# The job picks UCX's interface itself; hung calls fail after 3 s.
unset UCX_NET_DEVICES
export EMBER_LOG_LEVEL=warn EMBER_RPC_TIMEOUT=3
work=$(mktemp -d /tmp/ember-netns-test.XXXXXX)
cleanup() {
    ip -n "$NS2" link set "$VETH2" up 2>/dev/null
    [ -z "${spid:-}" ] || kill "$spid" 2>/dev/null
    client scancel --quiet --name "ember-netns-$case_name" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
ln -s "$build/tools/ember-train" "$work/ember-train"
# Each rank's stderr is also kept in rank-R.err: when the link is cut, what
# node2's slurmstepd holds for srun can be dropped when the step is cancelled,
# so srun's copy alone would lose what a node2 rank said.
cat >"$work/rank.sh" <<'EOSH'
#!/usr/bin/env bash
dir=$(dirname "$0")
exec "$dir/ember-train" "$@" 2> >(tee -a "$dir/rank-${SLURM_PROCID:-x}.err" >&2)
EOSH
chmod +x "$work/rank.sh"
client() { bash "$src/tests/slurm/netns_cluster.sh" exec "$cdir" "$@"; }
fail() { echo "FAIL: $*"; echo "--- job output:"; tail -60 "$work/out" 2>/dev/null; exit 1; }
need() { grep -qE "$1" "$work/out" || fail "no line matching: $1"; }
free_port() { # free in host 1's namespace, where the store listens
    local p
    for _ in $(seq 50); do
        p=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768+)
        client ss -Htln "sport = :$p" | grep -q . || { echo $p; return; }
    done
    echo 0
}
# submit OUT SCRIPT-ARGS...: sbatch --wait in the background (pid $spid),
# 2 nodes, 5 tasks dealt round-robin: ranks 0, 2, 4 on node1, 1 and 3 on node2.
submit() {
    local out=$1
    shift
    timeout 600 bash "$src/tests/slurm/netns_cluster.sh" exec "$cdir" \
        sbatch --wait --quiet -D "$src" -o "$out" -J "ember-netns-$case_name" \
        -N 2 -n 5 --ntasks-per-node=3 -m cyclic "$src/slurm/hybrid.sbatch" \
        --program "$work/rank.sh" --port "$(free_port)" --ps 2 "$@" &
    spid=$!
}
finish() { wait "$spid"; rc=$?; spid=; echo "sbatch exited $rc"; }
# wait_for SECONDS COMMAND...: poll COMMAND every 0.2 s.
wait_for() {
    local end=$((SECONDS + $1))
    shift
    until "$@"; do ((SECONDS < end)) || return 1; sleep 0.2; done
}
has_line() { grep -qE "$1" "$work/out" 2>/dev/null; }
# host_of R: node1 or node2, from rank R's ember-net line.
host_of() { sed -nE "s/^$1: ember-net: rank $1 local [0-9]+ host (node[12]): .*/\1/p" "$work/out"; }
ranks_on() { local r; for r in 0 1 2 3 4; do [ "$(host_of $r)" = "$1" ] && echo $r; done; }
# names_peer R RANKS...: rank R printed an error naming one of RANKS (in
# srun's output or in its own rank-R.err).
names_peer() {
    local r=$1 p
    shift
    for p in "$@"; do
        grep -qE "^$r: .*(ERROR|failed).*\\(rank $p\\)" "$work/out" && return 0
        grep -qE "(ERROR|failed).*\\(rank $p\\)" "$work/rank-$r.err" 2>/dev/null && return 0
    done
    return 1
}
host2_procs() { ip netns pids "$NS2" | xargs -r ps -o args= -p 2>/dev/null | grep -c "^$work/ember-train"; }
no_leftovers() {
    wait_for 10 eval '! pgrep -f "$work/ember-train" >/dev/null' || fail "processes left behind"
}
# Every rank's UCX interface is its own host's veth end.
check_net_lines() {
    local r host n veth addr
    for r in 0 1 2 3 4; do
        host=$(host_of $r)
        [ -n "$host" ] || fail "rank $r printed no ember-net line"
        n=${host#node} veth=VETH$n addr=ADDR$n
        need "^$r: ember-net: rank $r local [0-9]+ host $host: UCX_NET_DEVICES=${!veth} \\(holds $host's NodeAddr ${!addr}\\)\$"
    done
    [ "$(ranks_on node1 | wc -l)" -eq 3 ] && [ "$(ranks_on node2 | wc -l)" -eq 2 ] ||
        fail "want ranks 0, 2, 4 on node1 and 1, 3 on node2: $(ranks_on node1 | tr '\n' ' ')/ $(ranks_on node2 | tr '\n' ' ')"
}

reported_host1() {
    local r
    for r in $(ranks_on node1); do names_peer "$r" $(ranks_on node2) || return 1; done
}

# Cut the link once training runs; check the reports; bring the link back.
cut_and_check() {
    wait_for 60 has_line '^2: epoch +5 ' || fail "training did not start"
    check_net_lines
    local start=$SECONDS r
    missing=
    ip -n "$NS2" link set "$VETH2" down || fail "cannot cut the link"
    echo "link cut (ip -n $NS2 link set $VETH2 down)"
    wait_for "$DEADLINE" eval 'reported_host1 && [ "$(host2_procs)" -eq 0 ]'
    for r in $(ranks_on node1); do
        names_peer "$r" $(ranks_on node2) || missing="$missing rank $r (node1) named no peer on node2;"
    done
    [ "$(host2_procs)" -eq 0 ] || missing="$missing $(host2_procs) process(es) on node2 still running;"
    echo "after $((SECONDS - start)) s:${missing:- every rank on node1 reported, none left on node2}"
    ip -n "$NS2" link set "$VETH2" up || fail "cannot bring the link back"
    echo "link back up"
}

case "$case_name" in
netns_2hosts)
    submit "$work/out" --epochs 5 --save "$work/a.safetensors"
    finish
    [ $rc -eq 0 ] || fail "exit $rc"
    need '5 ranks on 2 node\(s\) \(node\[1-2\]\)'
    need '^2: done: 100 steps'
    check_net_lines
    for r in 0 1 2 3 4; do
        need "^$r: ember-bind: rank $r local [0-9]+/[0-9]+ host $(host_of $r) "
    done
    [ -s "$work/a.safetensors" ] || fail "no saved weights"
    ;;
netns_link_cut)
    submit "$work/out" --epochs 100000 --step-grace 60
    cut_and_check
    [ -z "$missing" ] || { finish; fail "within ${DEADLINE} s of the cut:$missing"; }
    wait_for 120 eval '! kill -0 "$spid" 2>/dev/null' || fail "the job did not end (hangs)"
    finish
    [ $rc -ne 0 ] || fail "the job succeeded"
    for r in $(ranks_on node2); do
        names_peer "$r" $(ranks_on node1) || fail "rank $r (node2) named no peer on node1"
    done
    ;;
netns_link_cut_resume)
    # The help is read whole first: grep -q leaving early would give
    # ember-train a SIGPIPE, and pipefail would read that as a missing flag.
    help=$("$build/tools/ember-train" --help 2>&1)
    grep -q -- '--checkpoint-dir' <<<"$help" ||
        fail "this ember-train has no --checkpoint-dir (the checkpoint flags of issue 23 are not in this build)"
    job=(--epochs 1000 --save)
    submit "$work/ref.out" "${job[@]}" "$work/ref.safetensors"
    finish
    [ $rc -eq 0 ] || { cp "$work/ref.out" "$work/out"; fail "the uninterrupted run: exit $rc"; }
    submit "$work/out" "${job[@]}" "$work/out.safetensors" --checkpoint-dir "$work/ck" \
        --checkpoint-every 50 --max-restarts 2 --restart-delay 2 --step-grace 15
    wait_for 120 eval 'compgen -G "$work/ck/step-*/manifest" >/dev/null' || fail "no checkpoint written"
    ip -n "$NS2" link set "$VETH2" down || fail "cannot cut the link"
    echo "link cut (ip -n $NS2 link set $VETH2 down)"
    wait_for 60 has_line '^(srun: error: node1: task|[024]: .*ERROR.*\(rank [13]\))' ||
        fail "the cut was not seen on node1"
    ip -n "$NS2" link set "$VETH2" up || fail "cannot bring the link back"
    echo "link back up"
    finish
    [ $rc -eq 0 ] || fail "exit $rc"
    need "^hybrid.sbatch: .*; restart 1 of 2 from the latest checkpoint in $work/ck\$"
    need '^2: .*resuming from .* \(step [1-9][0-9]*\)'
    /usr/bin/python3 - "$work/ref.safetensors" "$work/out.safetensors" <<'EOPY' || fail "the resumed job's weights differ"
import json, struct, sys
def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    return {k: (v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items()}, meta
(a, meta_a), (b, meta_b) = load(sys.argv[1]), load(sys.argv[2])
bad = sorted(set(a) ^ set(b)) + [k for k in sorted(set(a) & set(b)) if a[k] != b[k]]
for key in ("losses", "losses_shape"):  # a resumed run may hold fewer losses
    meta_a.pop(key, None), meta_b.pop(key, None)
if meta_a != meta_b:
    bad.append("metadata %r != %r" % (meta_a, meta_b))
for k in bad:
    print("differs:", k)
print("%d tensors compared, %d differ" % (len(a), len(bad)))
sys.exit(1 if bad else 0)
EOPY
    ;;
*)
    echo "unknown case $case_name"; exit 2 ;;
esac
no_leftovers
echo "$case_name: ok"
