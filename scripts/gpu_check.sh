#!/usr/bin/env bash
# The one command for a GPU machine; scripts/GPU_CHECK.md says how to prepare
# it here, carry it and run it in a 15-minute lease. Prints the GPU, driver and
# library versions, builds with CUDA (or uses a carried build), then runs the
# stages of scripts/gpu_stages.sh in this order (most information per device
# second first, so the budget drops what is proven already or rarely breaks):
#   cuda_suite           the [cuda] suite: every CUDA op against the CPU op
#   train_compare, train_bf16, train_fp16, train_fp8
#                        configs/tiny-gpt2.yaml 50 steps on the GPU against the
#                        CPU in the same precision, loss curves compared
#   train_fp16_overflow  a static loss scale of 1e9: every GPU step skipped
#   bench_gpt2-124m_bf16, bench_llama-1b_bf16, bench_gpt2-124m_fp8, bench_llama-1b_fp8
#                        whole training steps (`trainer bench`): tokens/s, TFLOP/s, MFU
#   bench_llama-1b_bf16_unfused  the same with run.attention unfused: the fused kernels' worth
#   hf_load              `trainer export --format hf` loads in transformers (and
#                        vLLM) with the trainer's logits, where Python has them
#   nccl_smoke, nccl_streams  the [nccl] tests on a world of one NCCL rank
#   multi_gpu            with >= 2 GPUs: dp2 and tp2 (launch.sh) against one GPU
#   train_moe, train_moe_fp8, train_qwen_bf16, train_moe_qwen2_bf16, train_recompute_full
#                        more GPU-vs-CPU pairs
#   sanitizer            compute-sanitizer memcheck on small ops
#   op_bench             cuda_ops_test "[.bench]" at GPT-2 124M shapes
#   bench_gpt2-124m_fp32, bench_llama-1b_fp32
# Each stage prints PASS, FAIL or SKIPPED (with the reason) and has its own
# timeout, cut to what the budget has left; a stage that cannot start in time
# is SKIPPED. The summary (gpu_check.md) ends with the STAGES= that reruns what
# failed or ran out of time. Exit 1 if any stage failed, 2 for a bad STAGES.
#
# Environment:
#   STAGES      comma-separated stages to run (default: all); the environment,
#               build and CPU-reference checks always run
#   CPU_REFS    a folder from scripts/gpu_refs.sh: when its stamp matches the
#               trainer run here, the pairs take its CPU losses instead of
#               training on this machine's CPU (each pair's detail says which)
#   BUILD_DIR   build directory to use or create (default: build-gpu-check; a
#               carried directory holding test/cuda/cuda_ops_test is used as is
#               when this machine has no nvcc)
#   OUT         where the summary goes (default: build/gpu_check)
#   BUILD       auto (default: build when nvcc, cmake and ninja exist) or never
#               (use BUILD_DIR as carried)
#   BUDGET_S    total seconds (default 420: with the machine's start that leaves
#               a 15-minute lease a few minutes for a second, shorter call)
#   GPU_CHECK_STEPS  caps every pair's steps (tests; CPU_REFS must match it)
#   LOSS_TOL    largest allowed |loss_gpu - loss_cpu| at any step in fp32 (default 0.02)
#   LOSS_RTOL_MP  largest allowed |loss_gpu - loss_cpu| / loss_cpu at any step in bf16
#               and fp16, each against the CPU in the same dtype (default 5e-3; why:
#               the bf16 stage)
#   LOSS_RTOL_FP8 the same for fp8 (default 2e-2, ~30x the 6.3e-4 by which CPU fp8
#               and CPU fp32 differ over those 50 steps: the GPU and CPU quantise the
#               same way and differ in the forward GEMMs' fast fp8 accumulation, far
#               below fp8's own rounding, and in what bf16 differs by)
#   BENCH_STEPS timed steps per benchmark (default 4: GPT-2 124M in fp32 takes ~11 s
#               a step)
#   MGPU_RTOL   largest relative loss difference, 2 GPUs vs 1 (default 1e-4: the
#               ranks sum partial GEMMs and reduce in orders one GPU never forms)
#   MOE_RTOL    the same for configs/moe-tiny.yaml on the GPU vs the CPU (default 1e-3)
# The pairs need data/brown (scripts/get_data.sh; git-ignored, so carry it).
set -uo pipefail
# CPU_REFS and OUT are the caller's paths; everything else is the root's.
[[ -n ${CPU_REFS:-} && $CPU_REFS != /* ]] && CPU_REFS=$PWD/$CPU_REFS
[[ -n ${OUT:-} && $OUT != /* ]] && OUT=$PWD/$OUT
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
# shellcheck source=scripts/gpu_stages.sh
. scripts/gpu_stages.sh || exit 1
declare -A WANT=()
IFS=, read -ra requested <<<"${STAGES:-}"
for s in "${requested[@]}"; do
  s=${s// /}
  [[ -z $s ]] && continue
  if ! gpu_is_stage "$s"; then
    echo "gpu_check: unknown stage '$s' in STAGES; valid: $(IFS=,; echo "${GPU_STAGES[*]}")" >&2
    exit 2
  fi
  WANT[$s]=1
done
selected() { (( ${#WANT[@]} == 0 )) || [[ -n ${WANT[$1]:-} ]]; }

START=$(date +%s)
BUDGET_S=${BUDGET_S:-420}
LOSS_TOL=${LOSS_TOL:-0.02}
LOSS_RTOL_MP=${LOSS_RTOL_MP:-5e-3}
LOSS_RTOL_FP8=${LOSS_RTOL_FP8:-2e-2}
BENCH_STEPS=${BENCH_STEPS:-4}
MGPU_RTOL=${MGPU_RTOL:-1e-4}
MOE_RTOL=${MOE_RTOL:-1e-3}
BUILD_DIR=${BUILD_DIR:-build-gpu-check}
SUMMARY_DIR=${OUT:-$ROOT/build/gpu_check}
mkdir -p "$SUMMARY_DIR"
SUMMARY="$SUMMARY_DIR/gpu_check.md"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
FAILED=0
STAGE=""             # the stage whose rows record() writes ("" before the stages)
declare -A RERUN=()  # stages that failed or ran out of time
declare -a ROWS=()

remaining() { echo $(( BUDGET_S - ($(date +%s) - START) )); }
# stage_timeout WANT: seconds a stage may use, never past the overall budget.
stage_timeout() {
  local left; left=$(remaining)
  (( left > $1 )) && echo "$1" || echo $(( left > 5 ? left - 5 : 1 ))
}
# limit SECONDS COMMAND...: a KILL 5 s after the TERM, so a hung GPU call cannot
# hold the lease past the budget.
limit() { timeout -k 5 "$@"; }
record() {  # record NAME STATUS DETAIL
  printf '== %-14s %-7s %s\n' "$1" "$2" "$3"
  ROWS+=("| $1 | $2 | $3 |")
  [[ $2 == FAIL ]] && FAILED=1
  [[ -n $STAGE && ( $2 == FAIL || $3 == *"time budget"* ) ]] && RERUN[$STAGE]=1
  return 0
}
# need SECONDS: true when that many remain, else the stage is SKIPPED.
need() {
  local left; left=$(remaining)
  (( left >= $1 )) && return 0
  record "$STAGE" SKIPPED "out of time budget (${left}s left, it needs ${1}s to start)"
  return 1
}
# budget_cut RC T WANT: a timeout that was the budget's, not the stage's own.
budget_cut() { [[ $1 == 124 || $1 == 137 ]] && (( $2 < $3 )); }
section() { printf '\n---- %s (%ss left) ----\n' "$1" "$(remaining)"; }
# ---------------------------------------------------------------- environment
section "environment"
# pip nvidia-* wheels put the CUDA libraries in site-packages/nvidia/<lib>/lib.
LIBDIRS=""
for sp in $(python3 -c 'import site, sys; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null) \
          /usr/local/lib/python3*/dist-packages /usr/lib/python3/dist-packages; do
  for d in "$sp"/nvidia/*/lib; do
    [[ -d $d ]] && LIBDIRS="$LIBDIRS:$d"
  done
done
if [[ -n $LIBDIRS ]]; then
  export LD_LIBRARY_PATH="${LIBDIRS#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "LD_LIBRARY_PATH from pip wheels: $LD_LIBRARY_PATH"
fi
[[ -d /usr/local/cuda/bin ]] && export PATH="$PATH:/usr/local/cuda/bin"
GPU_NAME="none"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi || true
  GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
  record environment PASS "GPU ${GPU_NAME:-?}, driver ${DRIVER:-?}"
else
  record environment FAIL "nvidia-smi not found: no NVIDIA driver on this machine"
fi
command -v nvcc >/dev/null && nvcc --version | tail -2
pip list 2>/dev/null | grep -i '^nvidia-' || true
for lib in cudart cublasLt cudnn nccl; do
  found=$( { ldconfig -p 2>/dev/null | awk '{print $NF}'; \
             for d in ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }}; do ls "$d"/lib${lib}.so* 2>/dev/null; done; } \
           | grep -m1 "lib${lib}\.so" || true)
  echo "lib${lib}: ${found:-not found}"
done

# ---------------------------------------------------------------------- build
section "build"
TEST_BIN="$BUILD_DIR/test/cuda/cuda_ops_test"
TRAINER_BIN="$BUILD_DIR/trainer"
if [[ ${BUILD:-auto} != never ]] && command -v nvcc >/dev/null && command -v cmake >/dev/null &&
   command -v ninja >/dev/null; then
  jobs=$(nproc 2>/dev/null || echo 4)
  # A carried cache from another checkout path would be refused: configure fresh.
  if [[ -f $BUILD_DIR/CMakeCache.txt ]] && ! grep -q "CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT\$" "$BUILD_DIR/CMakeCache.txt"; then
    BUILD_DIR="$WORK/build"; TEST_BIN="$BUILD_DIR/test/cuda/cuda_ops_test"; TRAINER_BIN="$BUILD_DIR/trainer"
  fi
  t=$(stage_timeout 150)
  if timeout "$t" cmake -S . -B "$BUILD_DIR" -G Ninja -DTRAINER_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
        >"$WORK/cmake.log" 2>&1 &&
     timeout "$t" ninja -C "$BUILD_DIR" -j "$jobs" cuda_ops_test >"$WORK/build.log" 2>&1; then
    record build PASS "built cuda_ops_test in $BUILD_DIR with -DTRAINER_CUDA=ON ($jobs jobs)"
  else
    tail -40 "$WORK/cmake.log" "$WORK/build.log" 2>/dev/null
    record build FAIL "cmake/ninja of cuda_ops_test failed or timed out (${t}s); log above"
  fi
  # The trainer separately: a break elsewhere must not hide the op results.
  t=$(stage_timeout 150)
  if timeout "$t" ninja -C "$BUILD_DIR" -j "$jobs" trainer >"$WORK/build_trainer.log" 2>&1; then
    record build_trainer PASS "built $TRAINER_BIN"
  else
    tail -20 "$WORK/build_trainer.log"
    record build_trainer FAIL "ninja trainer failed or timed out (${t}s); log above"
  fi
  # The NCCL tests exist only in a build that found NCCL.
  nccl_targets=$(ninja -C "$BUILD_DIR" -t targets all 2>/dev/null |
                 awk -F: '$1 == "parallel_nccl_smoke" || $1 == "parallel_nccl_streams" { print $1 }')
  if [[ -n $nccl_targets ]]; then
    t=$(stage_timeout 120)
    # shellcheck disable=SC2086
    if timeout "$t" ninja -C "$BUILD_DIR" -j "$jobs" $nccl_targets >"$WORK/build_nccl.log" 2>&1; then
      record build_nccl PASS "built ${nccl_targets//$'\n'/ }"
    else
      tail -20 "$WORK/build_nccl.log"
      record build_nccl FAIL "ninja of the NCCL tests failed or timed out (${t}s); log above"
    fi
  else
    record build_nccl SKIPPED "this build found no NCCL (no parallel_nccl_* targets)"
  fi
elif [[ -x $TEST_BIN ]]; then
  record build SKIPPED "not building (BUILD=${BUILD:-auto}, nvcc/cmake/ninja: $(command -v nvcc >/dev/null && echo yes || echo no)): using the carried $BUILD_DIR"
else
  record build FAIL "not building here and no carried build at $BUILD_DIR"
fi

# -------------------------------------------------------------- CPU references
# The pairs' CPU losses from CPU_REFS when its stamp is this trainer's, data's
# and table's (gpu_refs.sh made them), else from training here.
REFS_OK=0 REFS_WHY="CPU_REFS unset"
pairs_selected=0
for s in "${GPU_STAGES[@]}"; do gpu_pair "$s" && selected "$s" && pairs_selected=1; done
if (( pairs_selected )) && [[ -n ${CPU_REFS:-} ]]; then
  section "CPU references"
  if [[ ! -f $CPU_REFS/stamp ]]; then
    REFS_WHY="no stamp in CPU_REFS=$CPU_REFS"
  elif ! gpu_refs_stamp "$TRAINER_BIN" >"$WORK/stamp"; then
    REFS_WHY="'$TRAINER_BIN --version' failed"
  else
    stale=$(awk -F': ' 'NR == FNR { here[$1] = $0; next } { seen[$1] = 1; if (here[$1] != $0) print $1 }
                        END { for (k in here) if (!(k in seen)) print k }' "$WORK/stamp" "$CPU_REFS/stamp" |
            sort -u | paste -sd, -)
    if [[ -z $stale ]]; then
      REFS_OK=1
      cp "$CPU_REFS"/*_cpu.txt "$WORK/"
    else
      REFS_WHY="CPU_REFS stale (its stamp differs in: ${stale//,/, })"
      diff "$CPU_REFS/stamp" "$WORK/stamp"
    fi
  fi
  if (( REFS_OK )); then record cpu_refs PASS "stamp matches $TRAINER_BIN: CPU losses from $CPU_REFS"
  else record cpu_refs SKIPPED "$REFS_WHY: the pairs train on this machine's CPU"; fi
fi

# ------------------------------------------------------------------ the stages
stage_cuda_suite() {
  section "cuda_suite: every CUDA op against the CPU op"
  if [[ ! -x $TEST_BIN ]]; then record cuda_suite FAIL "no test binary at $TEST_BIN"; return; fi
  if ldd "$TEST_BIN" | grep -q "not found"; then
    ldd "$TEST_BIN" | grep "not found"
    record cuda_suite FAIL "shared libraries missing (above)"
    return
  fi
  need 30 || return
  local t rc summary
  t=$(stage_timeout 180)
  limit "$t" "$TEST_BIN" 2>&1 | tee "$WORK/suite.log"
  rc=${PIPESTATUS[0]}
  cp "$WORK/suite.log" "$SUMMARY_DIR/cuda_suite.log"
  summary=$(grep -E "^(All tests passed|test cases:)" "$WORK/suite.log" | tail -1)
  case $rc in
    0) record cuda_suite PASS "${summary:-all passed}" ;;
    77) record cuda_suite FAIL "the suite saw no GPU (exit 77) on a GPU check machine" ;;
    124|137) record cuda_suite FAIL "timed out after ${t}s" ;;
    *) record cuda_suite FAIL "exit $rc: ${summary:-see log}" ;;
  esac
}

# loss_gap A B STEPS: "n worst_abs worst_rel at" over the steps both loss files hold
# (rel = |a - b| / |a|); fewer than STEPS steps or a NaN/inf loss give "inf" for both.
loss_gap() {
  awk -v want="$3" 'NR == FNR { a[$1] = $2; next } ($1 in a) {
      n++
      if ($2 ~ /nan|inf/ || a[$1] ~ /nan|inf/) { bad = 1; next }
      d = a[$1] - $2; if (d < 0) d = -d
      r = a[$1] != 0 ? d / (a[$1] < 0 ? -a[$1] : a[$1]) : d
      if (d > wa) wa = d
      if (r > wr) { wr = r; at = $1 } }
    END { if (bad || n < want) printf "%d inf inf %s\n", n, at
          else printf "%d %g %g %s\n", n, wa, wr, at }' "$1" "$2"
}
within() { awk -v w="$1" -v t="$2" 'BEGIN { exit !(w <= t) }'; }
# train_pair NAME: NAME's job on the GPU and, unless CPU_REFS holds its losses,
# on the CPU; loss files in $WORK/NAME_{cpu,cuda}.txt, CPU_SIDE says where the
# CPU's came from. Fails the stage when a run fails.
train_pair() {
  local name=$1 dev t devs=(cuda)
  if (( REFS_OK )) && [[ -s $WORK/${name}_cpu.txt ]]; then
    CPU_SIDE="CPU losses from CPU_REFS"
  else
    devs=(cpu cuda)
    CPU_SIDE="CPU trained here: $REFS_WHY"
    (( REFS_OK )) && CPU_SIDE="CPU trained here: CPU_REFS has no ${name}_cpu.txt"
  fi
  for dev in "${devs[@]}"; do
    gpu_pair "$name" "$dev" "$WORK/${name}_$dev"
    t=$(stage_timeout 120)
    if ! limit "$t" "$TRAINER_BIN" "${PAIR_ARGS[@]}" >"$WORK/${name}_$dev.log" 2>&1; then
      tail -5 "$WORK/${name}_$dev.log"
      record "$name" FAIL "trainer train on $dev in $PAIR_PREC failed or timed out (${t}s); log above; $CPU_SIDE"
      return 1
    fi
    gpu_losses "$WORK/${name}_$dev/metrics.jsonl" >"$WORK/${name}_$dev.txt"
  done
  cp "$WORK/${name}_cpu.txt" "$WORK/${name}_cuda.txt" "$SUMMARY_DIR/"
}
# fp32: the GPU does the CPU's arithmetic up to summation order (measured 1.1e-7);
# full recomputation runs the same kernels again, so the same bound.
# bf16 / fp16 against the CPU in the same dtype. Both store every activation,
# gradient and weight copy rounded at the same points; they differ only in fp32
# summation order, in expf/tanhf against the CPU's approximations, and in the GPU
# attention's 16-bit copies of P and dS (the CPU keeps them fp32): a subset of what
# separates bf16 from fp32. On the CPU, bf16 vs fp32 over these 50 steps differs
# by at most 1.3e-4 relative, fp16 vs fp32 by 6.7e-6; LOSS_RTOL_MP (5e-3) is ~40x
# the bf16 gap, while a wrong kernel moves the loss by far more (or to NaN).
# fp8: the same codes and scales on both (the scaling state is the CPU's code,
# mirrored to the device), but the GPU's forward GEMM accumulates with Hopper's
# fast fp8 accumulation where the CPU sums dequantised values in fp32; its bound
# is LOSS_RTOL_FP8 (why: the header). MoE: the CUDA routing kernels pick the
# CPU's experts barring near-ties, so the losses agree to summation order and
# MOE_RTOL leaves room for a rare flip; in fp8 the router stays fp32 on the
# bf16 activations and every expert GEMM is an FP8 GEMM on its ragged row block.
# fp16 overflow: a static loss scale of 1e9 overflows fp16 in every backward,
# so every step must be skipped (found on device, agreed, logged), the weights
# never move and each step's loss is the initial model's, as on the CPU.
stage_pair() {
  local name=$1 n wa wr at worst tol ref="" detail skipped
  gpu_pair "$name"
  section "$name: $PAIR_CFG in $PAIR_PREC, $PAIR_STEPS steps, GPU vs CPU"
  if [[ ! -x $TRAINER_BIN ]]; then record "$name" SKIPPED "no trainer binary at $TRAINER_BIN"; return; fi
  if [[ ! -f $PAIR_CFG ]]; then record "$name" SKIPPED "$PAIR_CFG missing"; return; fi
  if ! ls data/brown/train_*.bin >/dev/null 2>&1; then
    record "$name" SKIPPED "data/brown missing (run scripts/get_data.sh and carry data/brown)"
    return
  fi
  need $(( REFS_OK ? 20 : 40 )) || return
  train_pair "$name" || return
  read -r n wa wr at <<<"$(loss_gap "$WORK/${name}_cpu.txt" "$WORK/${name}_cuda.txt" "$PAIR_STEPS")"
  case $name in
    train_compare|train_recompute_full)
      worst=$wa tol=$LOSS_TOL
      detail="$n steps; worst |diff| $wa at step ${at:-?} (tol $tol)" ;;
    train_fp16_overflow)
      worst=$wr tol=$LOSS_RTOL_MP
      skipped=$(grep -c '"skipped": true' "$WORK/${name}_cuda/metrics.jsonl")
      (( skipped == PAIR_STEPS )) || worst=inf
      detail="$skipped of $PAIR_STEPS GPU steps skipped; losses vs CPU: worst relative |diff| $wr (tol $tol)" ;;
    *)
      worst=$wr tol=$LOSS_RTOL_MP
      [[ $PAIR_PREC == fp8 ]] && tol=$LOSS_RTOL_FP8
      [[ $name == train_moe ]] && tol=$MOE_RTOL
      [[ $PAIR_CFG == configs/tiny-gpt2.yaml && -f $WORK/train_compare_cpu.txt ]] &&
        ref=$(loss_gap "$WORK/train_compare_cpu.txt" "$WORK/${name}_cpu.txt" "$PAIR_STEPS" | awk '{print $3}')
      detail="$n steps; worst relative |diff| $wr at step ${at:-?} (tol $tol)${ref:+; CPU $PAIR_PREC vs CPU fp32: $ref}" ;;
  esac
  if within "$worst" "$tol"; then record "$name" PASS "$detail; $CPU_SIDE"
  else record "$name" FAIL "$detail; $CPU_SIDE"; fi
}

# Dense bf16 tensor-core peak from the datasheets (H100/H200 SXM: 989.4 TFLOP/s).
case "$GPU_NAME" in
  *H200*|*H100*SXM*|*H100\ 80GB\ HBM3*) PEAK_BF16=989.4e12 ;;
  *H100*) PEAK_BF16=756e12 ;;
  *A100*) PEAK_BF16=312e12 ;;
  *) PEAK_BF16="" ;;
esac
stage_bench() {  # stage_bench bench_CONFIG_PRECISION[_unfused]
  local name=$1 cfg prec extra t rc tps gflops mfu tf mem attention=auto
  cfg=${name#bench_}
  # _unfused: the same bench with run.attention unfused, the fused kernels' A/B.
  if [[ $cfg == *_unfused ]]; then attention=unfused; cfg=${cfg%_unfused}; fi
  prec=${cfg##*_}
  cfg=configs/${cfg%_*}.yaml
  section "$name: trainer bench $cfg in $prec, $BENCH_STEPS steps"
  # Llama 1B at the size whose fp32 step fits the stage (the first run's figures).
  case $cfg in
    *llama*) extra="--set train.seq_len=2048 --set train.micro_batch=4 --set train.global_batch=16" ;;
    *) extra="--set train.seq_len=1024" ;;
  esac
  if [[ ! -x $TRAINER_BIN ]] || ! "$TRAINER_BIN" --help 2>&1 | grep -qw bench; then
    record "$name" SKIPPED "no trainer binary with a bench subcommand"; return
  fi
  if [[ ! -f $cfg ]]; then record "$name" SKIPPED "$cfg missing"; return; fi
  need 40 || return
  t=$(stage_timeout 120)
  # shellcheck disable=SC2086
  limit "$t" "$TRAINER_BIN" bench "$cfg" --steps "$BENCH_STEPS" --set run.device=cuda \
    --set precision.compute="$prec" --set run.attention="$attention" $extra >"$WORK/$name.log" 2>&1
  rc=$?
  if (( rc == 2 )); then  # refused by this build (bad input or a feature not built): say why
    record "$name" SKIPPED "refused: $(grep -m1 'error' "$WORK/$name.log" | cut -c1-200)"
  elif (( rc == 0 )); then
    cat "$WORK/$name.log"
    tps=$(awk '/throughput/ {print $2}' "$WORK/$name.log")
    gflops=$(awk '/achieved/ {print $2}' "$WORK/$name.log")
    mfu=""
    [[ -n $PEAK_BF16 && -n $gflops && $prec != fp32 ]] &&
      mfu=$(awk -v g="$gflops" -v p="$PEAK_BF16" 'BEGIN { printf "%.1f%%", 100 * g * 1e9 / p }')
    tf=$(awk -v g="${gflops:-0}" 'BEGIN { printf "%.1f", g / 1000 }')
    mem=$(awk '/memory in use/ {print $4, $5}' "$WORK/$name.log")
    record "$name" PASS "${tps:-?} tokens/s, $tf TFLOP/s${mfu:+, MFU $mfu of dense bf16 peak}${mem:+, $mem in use}"
  elif budget_cut "$rc" "$t" 120; then
    record "$name" SKIPPED "stopped by the time budget after ${t}s"
  else
    tail -5 "$WORK/$name.log"
    record "$name" FAIL "trainer bench failed or timed out (${t}s)"
  fi
}

stage_hf_load() {
  section "hf_load: HF export in transformers / vLLM"
  local t rc detail
  if [[ ! -x $TRAINER_BIN ]] || ! ls data/brown/train_*.bin >/dev/null 2>&1; then
    record hf_load SKIPPED "needs the trainer binary and data/brown"; return
  fi
  if ! python3 -c 'import torch, transformers' 2>/dev/null; then
    record hf_load SKIPPED "python3 cannot import torch and transformers here"; return
  fi
  need 60 || return
  t=$(stage_timeout 120)
  limit "$t" scripts/hf_check.sh "$TRAINER_BIN" "$WORK/hf" >"$WORK/hf.log" 2>&1
  rc=$?
  cat "$WORK/hf.log"; cp "$WORK/hf.log" "$SUMMARY_DIR/hf_check.log"
  detail=$(grep -E 'PASS|FAIL|not installed' "$WORK/hf.log" | cut -c1-120 | paste -sd';' -)
  if (( rc == 0 )); then record hf_load PASS "$detail"
  elif budget_cut "$rc" "$t" 120; then record hf_load SKIPPED "stopped by the time budget after ${t}s: $detail"
  else record hf_load FAIL "rc $rc (${t}s limit): $detail"; fi
}

stage_nccl() {  # stage_nccl nccl_smoke|nccl_streams: a world of one NCCL rank
  local stage=$1 name=parallel_$1 bin t rc fails
  bin="$BUILD_DIR/test/parallel/$name"
  section "$stage: $name on one GPU"
  if [[ ! -x $bin ]]; then
    record "$stage" SKIPPED "no $name in $BUILD_DIR/test/parallel (a build without NCCL)"; return
  fi
  need 30 || return
  t=$(stage_timeout 90)
  limit "$t" "$bin" >"$WORK/$name.log" 2>&1
  rc=$?
  cat "$WORK/$name.log"
  cp "$WORK/$name.log" "$SUMMARY_DIR/$name.log"
  fails=$(grep -c '^FAIL' "$WORK/$name.log")
  case $rc in
    0) record "$stage" PASS "$(tail -1 "$WORK/$name.log")" ;;
    77) record "$stage" FAIL "saw no GPU (exit 77) on a GPU check machine" ;;
    124|137) record "$stage" FAIL "timed out after ${t}s" ;;
    *) record "$stage" FAIL "exit $rc, $fails failed checks: $(grep -m1 '^FAIL' "$WORK/$name.log" | cut -c1-160)" ;;
  esac
}

stage_multi_gpu() {
  section "multi_gpu: tiny-gpt2 on 2 GPUs (dp2, tp2, dp2 zero3) vs one GPU"
  local ngpu launch mg_args t layout name extra rc cmp_out n verdict at worst detail
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  launch="$BUILD_DIR/launch.sh"  # a bundle's bin/launch.sh, else the repository's
  [[ -x $launch ]] || launch="$ROOT/scripts/bundle_launch.sh"
  if (( ngpu < 2 )); then
    record multi_gpu SKIPPED "$ngpu GPU(s) visible: NCCL runs one rank per GPU, so dp2, tp2 and dp2 zero3 need 2 (nccl_* cover a world of one)"
    return
  elif [[ ! -x $TRAINER_BIN ]] || ! ls data/brown/train_*.bin >/dev/null 2>&1; then
    record multi_gpu SKIPPED "no trainer binary at $TRAINER_BIN or no data/brown"; return
  fi
  need 60 || return
  mg_args=(train configs/tiny-gpt2.yaml --set train.steps=20 --set train.eval_every=0
           --set run.device=cuda --set parallel.timeout_s=60)
  t=$(stage_timeout 90)
  if ! limit "$t" "$TRAINER_BIN" "${mg_args[@]}" --set run.dir="$WORK/mg_1gpu" >"$WORK/mg_1gpu.log" 2>&1; then
    tail -10 "$WORK/mg_1gpu.log"
    record multi_gpu FAIL "the one-GPU reference run failed or timed out (${t}s)"
    return
  fi
  gpu_losses "$WORK/mg_1gpu/metrics.jsonl" >"$WORK/mg_loss_1gpu.txt"
  cp "$WORK/mg_loss_1gpu.txt" "$SUMMARY_DIR/loss_1gpu.txt"
  # dp2 zero3: ZeRO-3's gathers and reduce-scatters on the communication
  # stream (two block regions, README "ZeRO-2/3: collectives overlapped").
  for layout in "dp2|" "tp2|--set parallel.tp=2" "dp2_zero3|--set parallel.zero=3"; do
    IFS='|' read -r name extra <<<"$layout"
    if (( $(remaining) < 60 )); then record "multi_gpu_$name" SKIPPED "out of time budget"; continue; fi
    t=$(stage_timeout 120)
    # shellcheck disable=SC2086
    limit "$t" bash "$launch" -n 2 --grace 10 --port $((29500 + RANDOM % 2000)) "$TRAINER_BIN" \
      "${mg_args[@]}" --set run.dir="$WORK/mg_$name" $extra >"$WORK/mg_$name.log" 2>&1
    rc=$?
    if (( rc != 0 )); then
      tail -15 "$WORK/mg_$name.log"
      record "multi_gpu_$name" FAIL "launch.sh -n 2 exited $rc (log above)"
      continue
    fi
    gpu_losses "$WORK/mg_$name/metrics.jsonl" >"$WORK/mg_loss_$name.txt"
    cp "$WORK/mg_loss_$name.txt" "$SUMMARY_DIR/loss_2gpu_$name.txt"
    cmp_out=$(awk -v tol="$MGPU_RTOL" 'NR == FNR { one[$1] = $2; next } ($1 in one) {
        d = one[$1] - $2; if (d < 0) d = -d; r = d / (one[$1] < 0 ? -one[$1] : one[$1]);
        if (r > worst) { worst = r; at = $1 } n++ }
      END { printf "%d %s %s %g\n", n, (n >= 20 && worst <= tol) ? "ok" : "bad", at, worst }' \
      "$WORK/mg_loss_1gpu.txt" "$WORK/mg_loss_$name.txt")
    read -r n verdict at worst <<<"$cmp_out"
    detail="$n steps; worst relative difference $worst at step ${at:-?} (tol $MGPU_RTOL)"
    if [[ $verdict == ok ]]; then record "multi_gpu_$name" PASS "$detail"
    else record "multi_gpu_$name" FAIL "$detail"; fi
  done
}

# A small-shape pass under compute-sanitizer catches races and out-of-bounds
# writes; its cases run every dtype (layernorm five pairings), plus the fp8
# cast-transpose tiles, the MoE plan and the GELU epilogues with their fallback.
stage_sanitizer() {
  section "sanitizer: compute-sanitizer memcheck on small shapes"
  local t rc
  if [[ ! -x $TEST_BIN ]]; then record sanitizer SKIPPED "no test binary at $TEST_BIN"; return; fi
  if ! command -v compute-sanitizer >/dev/null; then
    record sanitizer SKIPPED "compute-sanitizer not installed"; return
  fi
  need 60 || return
  t=$(stage_timeout 150)
  limit "$t" compute-sanitizer --error-exitcode 9 --tool memcheck "$TEST_BIN" \
    "[gelu],[layernorm],[cross_entropy],[embedding],[state],cast_transpose*,moe_plan*,linear + GELU fp32*" \
    >"$WORK/sanitizer.log" 2>&1
  rc=$?
  if (( rc == 0 )); then
    record sanitizer PASS "memcheck clean on gelu, layernorm, cross_entropy, embedding, state, cast_transpose, moe_plan, linear + GELU"
  elif budget_cut "$rc" "$t" 150; then
    record sanitizer SKIPPED "stopped by the time budget after ${t}s"
  else
    tail -30 "$WORK/sanitizer.log"
    record sanitizer FAIL "compute-sanitizer memcheck reported errors or timed out (exit $rc, ${t}s)"
  fi
}

stage_op_bench() {
  section "op_bench: op benchmarks at GPT-2 124M shapes"
  local t rc
  if [[ ! -x $TEST_BIN ]]; then record op_bench SKIPPED "no test binary at $TEST_BIN"; return; fi
  need 40 || return
  t=$(stage_timeout 90)
  limit "$t" "$TEST_BIN" "[.bench]" >"$WORK/op_bench.log" 2>&1
  rc=$?
  if (( rc == 0 )); then
    grep '^bench ' "$WORK/op_bench.log" | tee "$SUMMARY_DIR/op_bench.txt"
    record op_bench PASS "$(grep -c '^bench ' "$WORK/op_bench.log") ops timed; table in op_bench.txt"
  elif budget_cut "$rc" "$t" 90; then
    record op_bench SKIPPED "stopped by the time budget after ${t}s"
  else
    tail -20 "$WORK/op_bench.log"
    record op_bench FAIL "op benchmarks failed or timed out (${t}s)"
  fi
}

for STAGE in "${GPU_STAGES[@]}"; do
  selected "$STAGE" || continue
  case $STAGE in
    cuda_suite) stage_cuda_suite ;;
    train_*) stage_pair "$STAGE" ;;
    bench_*) stage_bench "$STAGE" ;;
    hf_load) stage_hf_load ;;
    nccl_*) stage_nccl "$STAGE" ;;
    multi_gpu) stage_multi_gpu ;;
    sanitizer) stage_sanitizer ;;
    op_bench) stage_op_bench ;;
  esac
done
STAGE=""

# -------------------------------------------------------------------- summary
rerun=""
for s in "${GPU_STAGES[@]}"; do [[ -n ${RERUN[$s]:-} ]] && rerun+=${rerun:+,}$s; done
{
  echo "# gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) on ${GPU_NAME}"
  echo
  echo "commit $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown), $(( $(date +%s) - START )) s" \
       "of a ${BUDGET_S} s budget${STAGES:+, STAGES=$STAGES}"
  echo
  echo "| stage | result | detail |"
  echo "|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
  if [[ -n $rerun ]]; then
    echo
    echo "Failed or out of time: rerun with \`STAGES=$rerun\`."
  fi
} >"$SUMMARY"
echo
cat "$SUMMARY"
echo "summary written to $SUMMARY"
rm -rf "$WORK"
exit $FAILED
