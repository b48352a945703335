#!/usr/bin/env bash
# What `oomgate bisect` costs over the runs it makes: a git repository made
# here with COMMITS commits of a small workload (python3 holding 20 MiB,
# 90 MiB from commit GROW_AT on), bisected by `oomgate bisect` (each
# candidate in a worktree, run by `oomgate run`, judged against the good
# end's lock) and, paired, by `git bisect run` with a hand-written check
# in the checkout (the workload run, and its size file read: no
# measurement at all). Both find the same commit in the same number of
# steps; the difference is what oomgate adds a step. Prints the two
# commands; times them with hyperfine where it is installed. See
# docs/performance.md.
#
#   scripts/bench-bisect-cost.sh [COMMITS] [GROW_AT]   # default 64 and 41
set -euo pipefail
cd "$(dirname "$0")/.."
commits="${1:-64}"
grow_at="${2:-41}"
cargo build --release --quiet
oomgate="$PWD/target/release/oomgate"
work="${BENCH_DIR:-$(mktemp -d)}"
repo="$work/repo"
rm -rf "$repo"
mkdir -p "$repo"
cd "$repo"
git init -q -b main .
git config user.email bench@oomgate.invalid
git config user.name bench
cat > suite.toml <<'TOML'
[suite]
name = "bisect-cost"
gpu = "off"
[[case]]
name = "train"
command = ["python3", "work.py"]
TOML
cat > work.py <<'PY'
mib = int(open("size.txt").read())
buf = bytearray(mib * 1024 * 1024)
for i in range(0, len(buf), 4096):
    buf[i] = 1
PY
for i in $(seq 0 "$commits"); do
    if [ "$i" -ge "$grow_at" ]; then echo 90 > size.txt; else echo 20 > size.txt; fi
    echo "change $i" > NOTES.txt
    git add -A
    git commit -qm "commit $i"
done
good=$(git rev-list --max-parents=0 HEAD)
# The two bisects, as scripts: each starts from the same checkout and
# leaves it as it was.
cat > "$work/oomgate-bisect.sh" <<SH
cd "$repo" && "$oomgate" bisect suite.toml --case train --good $good --bad main \\
    --out "\$(mktemp -u "$work/b.XXXXXX")" > "$work/oomgate-bisect.txt" 2>&1
SH
cat > "$work/git-bisect.sh" <<SH
cd "$repo" && git bisect start main $good > /dev/null &&
    git bisect run sh -c 'python3 work.py && test \$(cat size.txt) -lt 50' > "$work/git-bisect.txt" 2>&1
git bisect reset > /dev/null 2>&1
SH
bash "$work/oomgate-bisect.sh" || true
bash "$work/git-bisect.sh"
grep '^first bad:' "$work/oomgate-bisect.txt"
grep 'is the first bad commit' "$work/git-bisect.txt"
echo "A: bash $work/oomgate-bisect.sh"
echo "B: bash $work/git-bisect.sh"
if command -v hyperfine > /dev/null; then
    hyperfine --warmup 1 "bash $work/oomgate-bisect.sh" "bash $work/git-bisect.sh"
fi
