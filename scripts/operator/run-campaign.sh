#!/usr/bin/env bash
# Operator flow for one campaign: register -> preflight -> pilot -> aggregate.
# Fails closed: every step's exit code and the registration digest are checked; nothing
# runs on a registration whose sha256 does not match what `register` printed.
#
# usage: scripts/operator/run-campaign.sh CAMPAIGN(.toml|default|hard) OUT_DIR [--faux]
#   OUT_DIR must not exist; it receives registration/ and runs/<run-id>/.
#   Only --faux is accepted here: a paid run needs --real with an authorization and a
#   trusted key, which an operator passes to `efold-controller pilot` by hand.
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
reg_dir="$out/registration"

echo "== register"
reg_out=$(efold-controller register "$campaign" --output "$reg_dir")
echo "$reg_out"
reg_file=$(printf '%s\n' "$reg_out" | sed -n 's/^registration: //p')
sha=$(printf '%s\n' "$reg_out" | sed -n 's/^sha256: //p')
[ -n "$reg_file" ] && [ -f "$reg_file" ] || { echo "register printed no registration file" >&2; exit 1; }
[[ "$sha" =~ ^[0-9a-f]{64}$ ]] || { echo "register printed no sha256" >&2; exit 1; }
actual=$(sha256sum "$reg_file" | cut -d' ' -f1)
[ "$actual" = "$sha" ] || { echo "registration digest mismatch" >&2; exit 1; }

echo "== plan"
efold-controller plan --registration "$reg_file" --sha256 "$sha"

echo "== preflight"
efold-controller preflight --registration "$reg_file" --sha256 "$sha" > "$out/preflight.json"
echo "preflight report: $out/preflight.json"

echo "== pilot"
pilot_out=$(efold-controller pilot --faux --registration "$reg_file" --sha256 "$sha" --runs "$out/runs")
echo "$pilot_out"
run_dir=$(printf '%s\n' "$pilot_out" | sed -n 's/^run: //p' | head -n 1)
[ -n "$run_dir" ] && [ -d "$run_dir" ] || { echo "pilot printed no run directory" >&2; exit 1; }

echo "== aggregate"
efold-controller aggregate "$run_dir" > "$out/aggregate.md"

echo
echo "results: $run_dir/results.json"
echo "summary: $run_dir/summary.md"
echo "report:  $run_dir/report.html"
