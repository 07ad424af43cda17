# Sourced by the test scripts that build large environments.
# need_free_gb N WHAT: stop with a message naming WHAT when the repository's disk has under N GB free.
# discard_when_done PATH: with RPB_DISCARD_TEST_ENVS=1 (CI), remove PATH when the script exits,
# so that a machine with a small disk holds one large environment at a time.
need_free_gb() {
    local free_gb
    free_gb=$(df -Pk . | awk 'NR == 2 { print int($4 / 1048576) }')
    if [ "$free_gb" -lt "$1" ]; then
        echo "$0: $2 needs about $1 GB of free disk; $(pwd) has $free_gb GB" >&2
        exit 1
    fi
}
discard_when_done() {
    if [ "${RPB_DISCARD_TEST_ENVS:-0}" = 1 ]; then
        trap "rm -rf '$1'" EXIT
    fi
}
