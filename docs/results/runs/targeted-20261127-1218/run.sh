#!/bin/bash
# Idle-machine measurements of 2026-11-27 (third session): issue 19 targets, the seam's cost,
# the new components. Tables to *.txt, JSON lines to *.json.
set -u
NEW=/work/main/target/release/aspace
OLD=/work/bench/aspace-preseam
O=/work/bench/s3/out; mkdir -p $O; cd $O
VM=coarse,faultlock,hybrid,bonsai,pervma,interval
b() { local name=$1; shift; echo "== $(date +%T) $name"; $NEW bench "$@" > $name.txt 2>&1; tail -n +1 $name.txt | grep -E "^[a-z]" | head -40; }
# 1. the seam: old and new binaries interleaved, one repeat each, 7 rounds
for r in 1 2 3 4 5 6 7; do
  for bin in old new; do
    B=$OLD; [ $bin = new ] && B=$NEW
    for w in local alloc-fault-modify; do
      $B bench $w --designs coarse,interval --threads 1,2 --repeat 1 --json >> seam-$bin-$w.json 2>/dev/null
    done
  done
done
echo "== $(date +%T) seam done"
b soft-fault soft-fault --designs $VM,linux --threads 1,2 --repeat 5
b fault-load fault-load --designs $VM --threads 2 --repeat 5
b local local --designs $VM --threads 1,2 --repeat 3
b alloc alloc --designs $VM --threads 1,2 --repeat 3
b afm alloc-fault-modify --designs $VM --threads 1,2 --repeat 3
b mutex mutex --threads 1,2 --repeat 5
b refcount refcount --threads 1,2 --repeat 5
b readers-writers readers-writers --threads 2 --repeat 5
b ds-query ds-query --threads 1,2 --repeat 3
b cht cht --threads 1,2 --repeat 3
b cht-update10 cht-update10 --threads 1,2 --repeat 3
echo "== $(date +%T) all done"
