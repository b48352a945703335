# Sourced by the benchmarks that measure beside other load
# (bench-torch-host.sh, bench-verdicts.sh): a work folder ($work), and
# BUSY processes spinning on a core each; any pid added to $busy is
# killed, and the folder removed, when the benchmark exits.
work="$(mktemp -d)"
busy=()
cleanup() {
    for pid in "${busy[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 1 "${BUSY:-0}"); do
    sh -c 'while :; do :; done' &
    busy+=("$!")
done
