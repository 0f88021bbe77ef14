#!/usr/bin/env bash
# Record the natural failures' evidence (tests/fixtures/natural/NAME/, beside its truth.json):
# each script runs as `lab run` runs a user's script, 1 node x 2 ranks on loopback hosts, and
# what lab run kept of the failed job replaces the folder's events/ and nodes/.
#   scripts/record-natural.sh [NAME...]        (default: every folder with a truth.json)
set -euo pipefail
cd "$(dirname "$0")/.."
lab=.venv/bin/lab
if [ "$#" -gt 0 ]; then names=("$@"); else names=(); for t in tests/fixtures/natural/*/truth.json; do names+=("$(basename "$(dirname "$t")")"); done; fi
for name in "${names[@]}"; do
  folder=tests/fixtures/natural/$name
  [ -f "$folder/truth.json" ] || { echo "record-natural: $folder/truth.json not found: write the truth first" >&2; exit 2; }
  script=$(.venv/bin/python -c 'import json,sys; print(json.load(open(sys.argv[1]))["script"])' "$folder/truth.json")
  run=$(mktemp -d /tmp/lab-natural-XXXXXX)
  echo "== $name ($script)"
  "$lab" run --run-dir "$run/run" --hosts loopback --nodes 1 --nproc-per-node 2 "$script" > "$run/out.log" 2>&1 || true
  kept=$(find "$run/run/reports" -maxdepth 1 -type d -name 'why-*' | head -1)
  if [ -z "$kept" ]; then echo "record-natural: $name: the job kept no evidence (did it fail?); see $run/out.log" >&2; exit 1; fi
  rm -rf "$folder/events" "$folder/nodes"
  cp -r "$kept/events" "$kept/nodes" "$folder/"
  head -3 "$run/out.log" | sed 's/^/   /'
  rm -rf "$run"
done
