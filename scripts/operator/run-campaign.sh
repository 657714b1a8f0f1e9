#!/usr/bin/env bash
# Operator flow for one campaign, offline (--faux). The steps, in order:
#   1. register    validate CAMPAIGN, write OUT_DIR/registration/registration.json and
#                  check its sha256 against the digest `register` printed
#   2. plan        print the slots, the workload and the cost estimate
#   3. preflight   prepare every checkpoint in a private temporary root; the JSON report
#                  goes to OUT_DIR/preflight.json
#   4. pilot       run the campaign into OUT_DIR/runs/<run-id>/, its output streamed as it
#                  runs and kept in OUT_DIR/pilot.log
#   5. aggregate   rebuild the reports from the run, read-only, into OUT_DIR/aggregate.md
# Fails closed: every step's exit status and the registration digest are checked; nothing
# runs on a registration whose sha256 does not match what `register` printed. A step that
# fails stops the flow with its exit status; what the earlier steps wrote is kept, and an
# OUT_DIR left empty is removed.
#
# usage: scripts/operator/run-campaign.sh CAMPAIGN(.toml|directory|default|hard) OUT_DIR --faux
#   OUT_DIR must not exist. Only --faux is accepted here: a paid run needs --real with an
#   authorization and a trusted key, which an operator passes to `efold-controller pilot`
#   by hand (docs/campaign.md).
set -euo pipefail

if [ "$#" -ne 3 ] || [ "$3" != "--faux" ]; then
  echo "usage: $0 CAMPAIGN OUT_DIR --faux" >&2
  exit 2
fi
campaign=$1
out=$2
if [ -e "$out" ]; then
  echo "refused: $out already exists (runs are never reused)" >&2
  exit 2
fi
command -v efold-controller >/dev/null || { echo "efold-controller is not installed" >&2; exit 2; }

mkdir -p -m 700 "$out"
# On any failure: remove the empty directories this script made (never a file), so a
# typo leaves nothing behind and a failed run keeps all its evidence.
on_exit() {
  local status=$?
  if [ "$status" -ne 0 ] && [ -d "$out" ]; then
    find "$out" -depth -type d -empty -delete 2>/dev/null || true
    if [ -d "$out" ]; then
      echo "failed (exit $status); what the finished steps wrote is in $out" >&2
    fi
  fi
  exit "$status"
}
trap on_exit EXIT
reg_dir="$out/registration"

echo "== 1/5 register"
reg_out=$(efold-controller register "$campaign" --output "$reg_dir")
echo "$reg_out"
reg_file=$(printf '%s\n' "$reg_out" | sed -n 's/^registration: //p')
sha=$(printf '%s\n' "$reg_out" | sed -n 's/^sha256: //p')
[ -n "$reg_file" ] && [ -f "$reg_file" ] || { echo "register printed no registration file" >&2; exit 1; }
[[ "$sha" =~ ^[0-9a-f]{64}$ ]] || { echo "register printed no sha256" >&2; exit 1; }
actual=$(sha256sum "$reg_file" | cut -d' ' -f1)
[ "$actual" = "$sha" ] || { echo "registration digest mismatch" >&2; exit 1; }

echo "== 2/5 plan"
efold-controller plan --registration "$reg_file" --sha256 "$sha"

echo "== 3/5 preflight"
efold-controller preflight --registration "$reg_file" --sha256 "$sha" --json \
  > "$out/preflight.json"
echo "preflight report: $out/preflight.json"

echo "== 4/5 pilot"
# Streamed as it runs (and kept); its first line names the run directory.
efold-controller pilot --faux --registration "$reg_file" --sha256 "$sha" --runs "$out/runs" \
  | tee "$out/pilot.log"
run_dir=$(sed -n 's/^run: //p' "$out/pilot.log" | head -n 1)
[ -n "$run_dir" ] && [ -d "$run_dir" ] || { echo "pilot printed no run directory" >&2; exit 1; }

echo "== 5/5 aggregate"
efold-controller aggregate "$run_dir" > "$out/aggregate.md"

echo
echo "results: $run_dir/results.json"
echo "summary: $run_dir/summary.md"
echo "report:  $run_dir/report.html"
