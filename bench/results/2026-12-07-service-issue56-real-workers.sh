#!/bin/bash
# issue 56, real workers (third session of 2026-12-07): before (i56i = 479d754) and
# after (i56k = 891ba69) in alternating pairs, then worker counts and sizes with the
# after build. PostgreSQL 15 on 127.0.0.1:55432, an empty database per run.
set -u
B=/work/bench-bins
pgdb() { su postgres -s /bin/sh -c "createdb -h 127.0.0.1 -p 55432 -U postgres $1" ; echo "postgres://postgres@127.0.0.1:55432/$1"; }
run() { # label build files workers [db-url]
  local label=$1 v=$2 files=$3 workers=$4; shift 4
  local db=()
  [ $# -gt 0 ] && db=(--db-url "$1")
  echo "### $label: $v --files $files --workers $workers ${db[*]}"
  timeout 5400 $B/$v/hetch-lab bench service --files $files --file-size 1K --workers $workers \
    --units 2 --batch-files 1 --split-size off --probe-api "${db[@]}" 2>&1 | grep -E "^\| (1|service)"
}
tag=$(date +%H%M%S)
for pair in 1 2; do
  run "before pg 10k" i56i 10000 16 $(pgdb rb$pair$tag)
  run "after pg 10k" i56k 10000 16 $(pgdb ra$pair$tag)
done
for w in 8 32 64; do run "after pg 10k" i56k 10000 $w $(pgdb rw$w$tag); done
for w in 8 16 32 64; do run "after sqlite 10k" i56k 10000 $w; done
run "after pg 100k" i56k 100000 32 $(pgdb rh32$tag)
run "after sqlite 100k" i56k 100000 16
