# bench/stages.sh: times the stages of a script (sourced, not run). `stage NAME CMD...`
# runs CMD and records how long it took; when the script exits, however it exits, the
# time of every stage is printed (a failed or unfinished stage marked so), so a slow
# or broken run says where its time went.

STAGES=()
STAGE_NOW=""
STAGE_T0=0

stage() {
    local name=$1
    shift
    echo "=== $name: $*"
    STAGE_NOW=$name
    STAGE_T0=$SECONDS
    "$@"
    STAGES+=("$(printf '%-24s %6ds' "$name" $((SECONDS - STAGE_T0)))")
    STAGE_NOW=""
}

stages_report() {
    local rc=$?
    if [ -n "$STAGE_NOW" ]; then
        STAGES+=("$(printf '%-24s %6ds  (failed)' "$STAGE_NOW" $((SECONDS - STAGE_T0)))")
    fi
    echo "=== time per stage (total ${SECONDS}s)"
    printf '  %s\n' "${STAGES[@]}"
    return $rc
}
trap stages_report EXIT
