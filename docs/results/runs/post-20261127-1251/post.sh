#!/bin/bash
set -u
NEW=/work/main/target/release/aspace
OLD=/work/bench/aspace-preseam
O=/work/bench/s3/post; mkdir -p $O; cd $O
for r in 1 2 3 4 5 6 7; do
  for bin in old new; do
    B=$OLD; [ $bin = new ] && B=$NEW
    for w in local alloc-fault-modify; do
      $B bench $w --designs coarse,interval --threads 1,2 --repeat 1 --json >> seam-$bin-$w.json 2>/dev/null
    done
  done
done
$NEW bench mutex --threads 1,2 --repeat 5 > mutex.txt 2>&1
perf record -o hybrid-fl100.data $NEW bench fault-load-100pct --designs hybrid --threads 2 --duration-ms 2000 --repeat 1 > hybrid-fl100.txt 2>&1
perf report -i hybrid-fl100.data --no-children --sort comm,sym --percent-limit 1.5 --stdio 2>/dev/null | grep -E "^ +[0-9]|^# Samples" > hybrid-fl100-profile.txt
perf record -o mutex-up.data $NEW bench mutex --designs upgradable,parking_lot --threads 1 --duration-ms 2000 --repeat 1 > mutex-perf.txt 2>&1
perf report -i mutex-up.data --no-children --percent-limit 2 --stdio 2>/dev/null | grep -E "^ +[0-9]|^# Samples" > mutex-profile.txt
rm -f *.data
