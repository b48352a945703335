#!/usr/bin/env bash
# Example: submit a GPU memory gate as a Slurm job array of shards
# (oomgate-shards.sbatch) and the merge of their results as a job that
# starts once every shard has ended, failed or not (afterany): the merge
# lists the cases of a shard that wrote nothing as not run. Its exit
# status is the gate; its reports are in $OOMGATE_RESULTS/merged.
#
#   examples/slurm/submit.sh [SUITE]     # from the project's root
#   SHARDS=8 OOMGATE_RESULTS=/shared/ci/oomgate examples/slurm/submit.sh
#
# OOMGATE_RESULTS must be on a file system every node mounts. See
# docs/scale-out.md.
set -euo pipefail

suite=${1:-suites/gpu-gate.toml}
shards=${SHARDS:-4}
results=${OOMGATE_RESULTS:-$PWD/oomgate-results}
here=$(dirname "$0")

# This run's shards only: an earlier run's (with more shards, say) must
# not be merged with them.
rm -rf "$results/shards"
mkdir -p "$results"

# --parsable prints "JOBID" or "JOBID;CLUSTER".
array=$(sbatch --parsable --array="1-$shards" \
    --export="ALL,SUITE=$suite,OOMGATE_RESULTS=$results" \
    "$here/oomgate-shards.sbatch")
array=${array%%;*}
echo "shards: job array $array ($shards tasks)"

# Quoted for the shell the merge job runs in; the glob is expanded there,
# once the shards have written their folders.
merge="oomgate merge $(printf '%q' "$results")/shards/* --out $(printf '%q' "$results/merged") --suite $(printf '%q' "$suite")"
job=$(sbatch --parsable --dependency="afterany:$array" --job-name=oomgate-merge \
    --output=oomgate-merge.out --time=00:15:00 --wrap="$merge")
job=${job%%;*}
echo "merge: job $job, after every task of $array; its exit status is the gate"
echo "  reports: $results/merged/summary.md, report.html, junit.xml"
