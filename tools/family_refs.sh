#!/usr/bin/env bash
# Which code files name each model_type (at most 2, the family table and the
# family's config reader): a string literal of it ("gemma2", or the strncmp prefix of
# "olmo2" / "olmoe", "olmo"), or its family's GCKPT_FAMILY_ value outside the enum's
# declaration. The model types and their families are read from core/families.c.
#
#   tools/family_refs.sh [SOURCE_DIR]            # one line per model_type: count and files
#   tools/family_refs.sh --check N [SOURCE_DIR]  # exit 1 when one is named in more than N files
set -euo pipefail
max=""
if [ "${1:-}" = "--check" ]; then max=$2; shift 2; fi
cd "${1:-$(dirname "$0")/..}"
dirs="core planner executor include util"
pairs=$(awk '/\[GCKPT_FAMILY_[A-Z0-9_]+\] = \{/ { match($0, /GCKPT_FAMILY_[A-Z0-9_]+/); fam = substr($0, RSTART + 13, RLENGTH - 13) }
             fam != "" { s = $0; while (match(s, /\{"[a-z0-9_]+", (NO_PAD|PAD)/)) {
                 t = substr(s, RSTART + 2); sub(/".*/, "", t); print t, fam; s = substr(s, RSTART + RLENGTH) } }' core/families.c)
[ -n "$pairs" ] || { echo "family_refs.sh: no model types found in core/families.c" >&2; exit 2; }
bad=0
while read -r t fam; do
    pre=""
    case $t in olmo*) pre='|"olmo"' ;; esac
    files=$( { grep -rlE "\"$t\"$pre" $dirs --include=*.c --include=*.h --include=*.cu || true
               grep -rnE "GCKPT_FAMILY_$fam\b" $dirs --include=*.c --include=*.h --include=*.cu |
                   grep -vE '^include/gckpt/core/model.h:[0-9]+:[[:space:]]*GCKPT_FAMILY_[A-Z0-9_]+,' | cut -d: -f1 || true
             } | sort -u)
    n=$(echo "$files" | grep -c . || true)
    printf '%-12s %d  %s\n' "$t" "$n" "$(echo $files)"
    if [ -n "$max" ] && [ "$n" -gt "$max" ]; then bad=1; fi
done <<< "$pairs"
exit $bad
