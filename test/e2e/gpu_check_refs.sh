#!/usr/bin/env bash
# gpu_check_refs.sh SOURCE_DIR TRAINER SHARD WORK: scripts/gpu_refs.sh and
# gpu_check.sh's CPU_REFS and STAGES without a GPU. A copy of the scripts and
# configs (as in a bundle) over SHARD as data/brown, every pair capped at 2
# steps, and a stand-in trainer that turns run.device=cuda into cpu and logs its
# calls: its "GPU" losses are the CPU's, so a pair passes exactly when the CPU
# losses it compares with are right, and the log shows which side was trained.
set -uo pipefail
src=$1 trainer=$2 shard=$3 work=$4
fail() { echo "FAIL: $*"; exit 1; }
for f in gpu_check gpu_stages gpu_refs; do bash -n "$src/scripts/$f.sh" || fail "bash -n $f.sh"; done
rm -rf "$work" && mkdir -p "$work/tree/scripts" "$work/tree/data/brown" "$work/bin" || exit 1
cp "$src"/scripts/gpu_check.sh "$src"/scripts/gpu_stages.sh "$src"/scripts/gpu_refs.sh "$work/tree/scripts/"
cp -r "$src/configs" "$work/tree/"
cp "$shard" "$work/tree/data/brown/train_000000.bin"
cp "$shard" "$work/tree/data/brown/val_000000.bin"
calls=$work/calls.log
cat >"$work/bin/trainer" <<EOF
#!/usr/bin/env bash
echo "\$*" >>"$calls"
exec "$trainer" "\${@/run.device=cuda/run.device=cpu}"
EOF
chmod +x "$work/bin/trainer"
export GPU_CHECK_STEPS=2 OMP_NUM_THREADS=1
check=$work/tree/scripts/gpu_check.sh
# gpu_check NAME [VAR=VALUE...]: one run with its summary in $work/NAME; its rc in rc.
gpu_check() {
  local name=$1
  shift
  : >"$calls"
  env "$@" BUILD=never BUILD_DIR="$work/bin" OUT="$work/$name" "$check" >"$work/$name.log" 2>&1
  rc=$?
}
row() { grep "^| $2 |" "$work/$1/gpu_check.md"; }  # row RUN STAGE: its summary row
expect_row() {  # expect_row RUN STAGE PATTERN
  row "$1" "$2" | grep -q -- "$3" || { cat "$work/$1.log"; fail "$1: row $2 does not match '$3'"; }
}
expect_rerun() {  # expect_rerun RUN STAGES: the summary's last line names exactly STAGES
  [[ $(tail -1 "$work/$1/gpu_check.md") == "Failed or out of time: rerun with \`STAGES=$2\`." ]] ||
    fail "$1: last summary line $(tail -1 "$work/$1/gpu_check.md")"
}

echo "== (a) gpu_refs.sh writes every pair's CPU losses and the stamp"
"$work/tree/scripts/gpu_refs.sh" "$work/refs" "$work/bin/trainer" || fail "gpu_refs.sh exited $?"
# shellcheck source=scripts/gpu_stages.sh
. "$work/tree/scripts/gpu_stages.sh"
for pair in "${GPU_PAIRS[@]}"; do
  name=${pair%%|*}
  f=$work/refs/${name}_cpu.txt
  awk 'NF != 2 || $1 != NR || $2 !~ /^[0-9]+\.[0-9]+$/ { bad = 1 } END { exit bad || NR != 2 }' "$f" ||
    fail "$f is not two 'step loss' lines: $(head -3 "$f" 2>&1)"
done
[[ $(cut -d: -f1 "$work/refs/stamp" | paste -sd' ' -) == "trainer stages data" ]] ||
  fail "stamp keys: $(cat "$work/refs/stamp")"
grep -qF "trainer: $("$trainer" --version | head -1)" "$work/refs/stamp" || fail "stamp lacks the trainer's version"
grep -q 'run.device=cuda' "$calls" && fail "gpu_refs ran a GPU job"

echo "== (b) with matching refs the selected pairs train only on the 'GPU' and pass"
gpu_check good CPU_REFS="$work/refs" STAGES=train_compare,train_fp8,train_fp16_overflow
(( rc == 1 )) || fail "good: exit $rc, want 1 (no GPU, no cuda_ops_test: environment/build FAIL)"
expect_row good build FAIL
expect_row good cpu_refs "PASS | stamp matches"
for s in train_compare train_fp8 train_fp16_overflow; do
  expect_row good "$s" "PASS | .*CPU losses from CPU_REFS"
done
expect_row good train_fp16_overflow "2 of 2 GPU steps skipped"
rows=$(grep -E '^\| [^ ]+ \| (PASS|FAIL|SKIPPED) \|' "$work/good/gpu_check.md" | cut -d' ' -f2 | paste -sd' ' -)
[[ $rows == "environment build cpu_refs train_compare train_fp8 train_fp16_overflow" ]] ||
  fail "good: rows $rows"
grep -q 'run.device=cpu' "$calls" && fail "good: trained on the CPU despite matching refs"
[[ $(grep -c 'run.device=cuda' "$calls") == 3 ]] || fail "good: $(wc -l <"$calls") trainer calls, want 3"

echo "== (c) the refs' losses are what is compared: a shifted one fails its pair"
cp -r "$work/refs" "$work/refs_shifted"
awk '{ print $1, $2 + 0.5 }' "$work/refs/train_compare_cpu.txt" >"$work/refs_shifted/train_compare_cpu.txt"
gpu_check shifted CPU_REFS="$work/refs_shifted" STAGES=train_compare
expect_row shifted train_compare "FAIL | 2 steps; worst |diff| 0.5"
expect_rerun shifted train_compare

echo "== (d) a stale stamp is reported and the CPU side trained here"
cp -r "$work/refs" "$work/refs_stale"
sed -i 's/^trainer: .*/trainer: another build/' "$work/refs_stale/stamp"
gpu_check stale CPU_REFS="$work/refs_stale" STAGES=train_bf16
expect_row stale cpu_refs "SKIPPED | CPU_REFS stale (its stamp differs in: trainer)"
expect_row stale train_bf16 "PASS | .*CPU trained here: CPU_REFS stale (its stamp differs in: trainer)"
grep -q 'run.device=cpu' "$calls" || fail "stale: the CPU side did not train"
gpu_check steps CPU_REFS="$work/refs" GPU_CHECK_STEPS=3 STAGES=train_fp16
expect_row steps train_fp16 "PASS | 3 steps; .*CPU_REFS stale (its stamp differs in: stages)"
gpu_check unset STAGES=train_fp16
expect_row unset train_fp16 "PASS | .*CPU trained here: CPU_REFS unset"

echo "== (e) a stage past the budget is skipped and named for the rerun"
gpu_check budget CPU_REFS="$work/refs" BUDGET_S=0 STAGES=train_moe,op_bench
expect_row budget train_moe "SKIPPED | out of time budget"
expect_rerun budget train_moe

echo "== (f) an unknown stage: exit 2, one line naming it and the valid ones"
STAGES=train_compare,nosuch "$check" >"$work/bad.out" 2>"$work/bad.err"
rc=$?
(( rc == 2 )) || fail "unknown stage: exit $rc, want 2"
[[ $(wc -l <"$work/bad.err") == 1 && ! -s $work/bad.out ]] || fail "unknown stage: output $(cat "$work/bad.err")"
grep -q "'nosuch'.*valid: cuda_suite,.*bench_llama-1b_fp32" "$work/bad.err" || fail "unknown stage: $(cat "$work/bad.err")"
echo "PASS"
