#!/usr/bin/env bash
# `oomgate bisect` on a real PyTorch (CPU) workload. A git repository made
# here holds a training script (an MLP trained for a few steps); at commit
# GROW_AT of COMMITS a change keeps every step's activations for "logging"
# (about 200 MiB more), and a commit after it does not compile (the
# build, a syntax check, fails there; the next commit fixes it). Every
# other commit changes an unrelated file or refactors without changing
# memory. The script checks that `oomgate bisect` names commit GROW_AT,
# that `git bisect run oomgate bisect --check` agrees, and prints the runs
# and wall time of each. Not run by CI: torch (the package index's build,
# about 5.5 GB installed) goes into a venv of its own,
# $OOMGATE_TORCH_VENV (default ~/.cache/oomgate-bench-torch), the first
# time. See docs/performance.md.
#
#   scripts/bench-bisect.sh [COMMITS] [GROW_AT]   # default 32 and 21
#   REPEAT=3 scripts/bench-bisect.sh              # each end and step 3 times
set -euo pipefail
cd "$(dirname "$0")/.."
commits="${1:-32}"
grow_at="${2:-21}"
broken_at=$((grow_at + 3))
venv="${OOMGATE_TORCH_VENV:-$HOME/.cache/oomgate-bench-torch}"
if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet torch
fi
cargo build --release --quiet
oomgate="$PWD/target/release/oomgate"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
repo="$work/repo"
mkdir -p "$repo"
cd "$repo"
git init -q -b main .
git config user.email bench@oomgate.invalid
git config user.name bench
# The team's environment: untracked, as a .venv is (the whole folder: an
# interpreter finds its venv by the folder it is called from).
ln -s "$venv" .venv
echo ".venv/" > .gitignore
cat > suite.toml <<'TOML'
[suite]
name = "bisect-bench"
gpu = "off"
[environment]
python = ".venv/bin/python"
packages = ["torch"]
[[case]]
name = "train"
command = [".venv/bin/python", "train.py"]
timeout = "5m"
TOML
write_train() { # $1: keep activations (0/1), $2: a refactor marker
    cat > train.py <<PY
import torch

torch.manual_seed(0)
KEEP = $1  # refactor $2
model = torch.nn.Sequential(
    torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10)
)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
kept = []
for step in range(50):
    x = torch.randn(512, 1024)
    hidden = model[1](model[0](x))
    loss = model[2](hidden).logsumexp(1).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if KEEP:
        kept.append(hidden.detach().clone())
print("loss", float(loss))
PY
}
for i in $(seq 0 "$commits"); do
    keep=0
    [ "$i" -ge "$grow_at" ] && keep=1
    write_train "$keep" "$((i % 3))"
    if [ "$i" -eq "$broken_at" ]; then
        echo "this line is not python (" >> train.py
    fi
    echo "change $i" > NOTES.txt
    git add -A
    git commit -qm "commit $i"
done
good=$(git rev-list --max-parents=0 HEAD)
expected=$(git rev-list --reverse HEAD | sed -n "$((grow_at + 1))p")
build='.venv/bin/python -c "import ast; ast.parse(open(\"train.py\").read())"'
repeat=()
[ -n "${REPEAT:-}" ] && repeat=(--repeat "$REPEAT")

echo "== oomgate bisect: $commits commits, the growth at $grow_at, no build at $broken_at"
start=$(date +%s.%N)
"$oomgate" bisect suite.toml --case train --good "$good" --bad main --build "$build" \
    --out "$work/bisect" "${repeat[@]}" --json "$work/bisect.json" > "$work/answer.txt" 2> "$work/progress.txt" || true
end=$(date +%s.%N)
cat "$work/answer.txt"
if [ ! -f "$work/bisect.json" ]; then
    cat "$work/progress.txt" >&2
    exit 1
fi
found=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['first_bad'])" "$work/bisect.json")
runs=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['runs'])" "$work/bisect.json")
printf 'oomgate bisect: %s in %s runs, %.1f s\n' "${found:0:12}" "$runs" "$(echo "$end - $start" | bc)"

echo "== git bisect run oomgate bisect --check (the good end locked first)"
git checkout -q "$good"
"$oomgate" lock suite.toml --filter =train --output "$work/good.lock" --out "$work/lock-out" \
    "${repeat[@]}" --progress none > /dev/null 2>&1
git checkout -q main
start=$(date +%s.%N)
git bisect start main "$good" > /dev/null
git bisect run "$oomgate" bisect suite.toml --case train --check --against "$work/good.lock" \
    --build "$build" "${repeat[@]}" > "$work/git-bisect.txt" 2>&1 || true
git_found=$(sed -n 's/^\([0-9a-f]\{40\}\) is the first bad commit$/\1/p' "$work/git-bisect.txt")
git_runs=$(grep -c '^running ' "$work/git-bisect.txt" || true)
git bisect reset > /dev/null 2>&1
end=$(date +%s.%N)
printf 'git bisect run: %s in %s checks (+1 lock), %.1f s\n' "${git_found:0:12}" "$git_runs" "$(echo "$end - $start" | bc)"

status=0
for answer in "$found" "$git_found"; do
    if [ "$answer" != "$expected" ]; then
        echo "WRONG: expected ${expected:0:12}, got ${answer:0:12}" >&2
        status=1
    fi
done
[ "$status" -eq 0 ] && echo "both found ${expected:0:12} (commit $grow_at)"
exit "$status"
