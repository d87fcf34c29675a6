#!/bin/bash
# issue 56 coordinator runs, 2026-12-07 (second session)
set -u
B=/work/bench-bins
pgdb() { su postgres -s /bin/sh -c "createdb -h 127.0.0.1 -p 55432 -U postgres $1" ; echo "postgres://postgres@127.0.0.1:55432/$1"; }
run() { # label lab hetch args...
  local label=$1 lab=$2 hetch=$3; shift 3
  echo "### $label: $lab bench coordinator --hetch $hetch $*"
  timeout 900 $lab bench coordinator --hetch $hetch "$@" 2>&1 | grep -E "^\| [0-9]|claims,|PostgreSQL|SQLite|loaders"
}
for c in 1 16; do
  run "before pg c$c" $B/i56/hetch-lab $B/i56b/hetch --units 10000 --loaders 16 --capacity $c --probe-api --db-url $(pgdb g0b$c)
  run "after pg c$c" $B/i56f/hetch-lab $B/i56f/hetch --units 10000 --loaders 16 --capacity $c --probe-api --db-url $(pgdb g0a$c)
  run "before sqlite c$c" $B/i56/hetch-lab $B/i56b/hetch --units 10000 --loaders 16 --capacity $c --probe-api
  run "after sqlite c$c" $B/i56f/hetch-lab $B/i56f/hetch --units 10000 --loaders 16 --capacity $c --probe-api
done
for l in 8 32 64; do
  run "after pg c16 l$l" $B/i56f/hetch-lab $B/i56f/hetch --units 10000 --loaders $l --capacity 16 --probe-api --db-url $(pgdb g0l$l)
done
run "after pg c16 100k" $B/i56f/hetch-lab $B/i56f/hetch --units 100000 --loaders 16 --capacity 16 --probe-api --db-url $(pgdb g0h)
run "after sqlite c16 100k" $B/i56f/hetch-lab $B/i56f/hetch --units 100000 --loaders 16 --capacity 16 --probe-api
