#!/bin/bash
# Scaling run on the lent machine: each workload at 1,2,4,8,16 threads, JSON into $OUT.
B=./target/release/aspace
mkdir -p "$OUT"
{ date -u; uname -a; nproc; lscpu | head -20; free -g; } > "$OUT/machine.txt" 2>&1
run() { # name timeout args...
  local n=$1 t=$2; shift 2
  echo "== $n $(date -u +%T)"
  timeout "$t" $B bench "$@" --threads 1,2,4,8,16 --duration-ms 300 --repeat 3 --json > "$OUT/$n.jsonl" 2> "$OUT/$n.err"
  echo "rc=$? $(wc -l < "$OUT/$n.jsonl") points"
}
D=linux,coarse,interval,radix
run local 60 local --designs $D
run alloc-fault-modify 60 alloc-fault-modify --designs $D
run alloc 60 alloc --designs $D
run pipeline 60 pipeline --designs $D
run fault-load 100 fault-load --designs coarse,interval,bonsai,radix
run metis 90 metis --designs $D
run global 40 global --designs $D
echo "== done $(date -u +%T)"
