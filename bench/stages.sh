# bench/stages.sh: times the stages of a script (sourced, not run). `stage NAME CMD...`
# runs CMD and records how long it took, returning CMD's status; when the script
# exits, however it exits, the time of every stage is printed (a failed or unfinished
# stage marked so), so a slow or broken run says where its time went.

STAGES=()
STAGE_NOW=""
STAGE_T0=0

stage() {
    local name=$1
    shift
    echo "=== $name: $*"
    STAGE_NOW=$name
    STAGE_T0=$SECONDS
    local rc=0
    "$@" || rc=$?
    local mark=""
    [ "$rc" = 0 ] || mark="  (failed: exit $rc)"
    STAGES+=("$(printf '%-24s %6ds%s' "$name" $((SECONDS - STAGE_T0)) "$mark")")
    STAGE_NOW=""
    return "$rc"
}

stages_report() {
    local rc=$?
    if [ -n "$STAGE_NOW" ]; then
        STAGES+=("$(printf '%-24s %6ds  (unfinished)' "$STAGE_NOW" $((SECONDS - STAGE_T0)))")
    fi
    echo "=== time per stage (total ${SECONDS}s)"
    printf '  %s\n' "${STAGES[@]}"
    return $rc
}
trap stages_report EXIT
