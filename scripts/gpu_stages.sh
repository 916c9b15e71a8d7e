# Sourced by gpu_check.sh and gpu_refs.sh (from the repository or bundle root):
# the GPU check's stages and the training pairs both scripts must run alike,
# so that CPU losses computed ahead of time stand in for the ones the GPU
# machine would otherwise compute. See scripts/GPU_CHECK.md.
# shellcheck shell=bash

# In run order, by value per device second: correctness first, then the figures
# only a GPU gives (bf16/fp8 MFU), then what is proven already or rarely breaks.
GPU_STAGES=(cuda_suite train_compare train_bf16 train_fp16 train_fp8 train_fp16_overflow
            bench_gpt2-124m_bf16 bench_llama-1b_bf16 bench_gpt2-124m_fp8 bench_llama-1b_fp8
            bench_llama-1b_bf16_unfused hf_load nccl_smoke nccl_streams multi_gpu train_moe train_moe_fp8
            train_qwen_bf16 train_moe_qwen2_bf16 train_recompute_full sanitizer op_bench bench_gpt2-124m_fp32 bench_llama-1b_fp32)

# Training pairs, NAME|CONFIG|PRECISION|STEPS|EXTRA (--set flags, split on spaces).
# fp8 pairs quantise every block GEMM (the tiny models' first and last too).
GPU_PAIRS=(
  "train_compare|configs/tiny-gpt2.yaml|fp32|50|"
  "train_bf16|configs/tiny-gpt2.yaml|bf16|50|"
  "train_fp16|configs/tiny-gpt2.yaml|fp16|50|"
  "train_fp8|configs/tiny-gpt2.yaml|fp8|50|--set precision.fp8_first_last_bf16=false"
  "train_fp16_overflow|configs/tiny-gpt2.yaml|fp16|3|--set precision.loss_scale=1e9"
  "train_moe|configs/moe-tiny.yaml|fp32|20|"
  "train_moe_fp8|configs/moe-tiny.yaml|fp8|20|--set precision.fp8_first_last_bf16=false"
  "train_qwen_bf16|configs/tiny-llama.yaml|bf16|20|--set model.qkv_bias=true --set model.qk_norm=true --set model.head_dim=32"
  "train_moe_qwen2_bf16|configs/moe-tiny.yaml|bf16|20|--set model.qkv_bias=true --set model.moe.n_shared_experts=2 --set model.moe.shared_expert_gate=true --set model.moe.n_groups=4 --set model.moe.top_groups=2"
  "train_recompute_full|configs/tiny-gpt2.yaml|fp32|20|--set parallel.recompute=full"
)

gpu_is_stage() {  # gpu_is_stage NAME
  local s
  for s in "${GPU_STAGES[@]}"; do [[ $s == "$1" ]] && return 0; done
  return 1
}

# gpu_pair NAME [DEVICE RUN_DIR]: PAIR_CFG, PAIR_PREC, PAIR_STEPS and, with a
# device, PAIR_ARGS (the trainer's arguments); 1 when NAME is not a pair.
# GPU_CHECK_STEPS caps every pair's steps (tests run 2); the stamp records it.
gpu_pair() {
  local row name extra
  for row in "${GPU_PAIRS[@]}"; do
    IFS='|' read -r name PAIR_CFG PAIR_PREC PAIR_STEPS extra <<<"$row"
    [[ $name == "$1" ]] || continue
    if [[ -n ${GPU_CHECK_STEPS:-} ]] && (( GPU_CHECK_STEPS < PAIR_STEPS )); then
      PAIR_STEPS=$GPU_CHECK_STEPS
    fi
    [[ -n ${2:-} ]] || return 0
    # shellcheck disable=SC2206  # EXTRA is a list of words
    PAIR_ARGS=(train "$PAIR_CFG" --set train.steps="$PAIR_STEPS" --set train.eval_every=0
               --set run.device="$2" --set precision.compute="$PAIR_PREC" --set run.dir="$3" $extra)
    return 0
  done
  return 1
}

gpu_losses() {  # gpu_losses METRICS_FILE: "step loss" per training step
  awk -F'[:,}]' '/"loss"/ { s=""; l="";
      for (i = 1; i < NF; i++) { if ($i ~ /"step"$/) s = $(i+1); if ($i ~ /"loss"$/) l = $(i+1) }
      gsub(/ /, "", s); gsub(/ /, "", l); print s, l }' "$1"
}

# gpu_refs_stamp TRAINER: what the CPU losses depend on, one "key: value" line
# each. The build lines of --version (not the libraries found at run time, which
# differ between machines); the pairs' arguments and configs; the data's names
# and sizes. The CPU's BLAS kernels and thread count are left out: across
# machines they change only the summation order, which the GPU changes too
# (fp32: 1.1e-7 on the first H200 run), far inside gpu_check's tolerances.
gpu_refs_stamp() {
  local version row name args="" cfgs=""
  version=$("$1" --version 2>/dev/null | sed '/^libraries found at run time/,$d' | paste -sd';' -)
  [[ -n $version ]] || return 1
  for row in "${GPU_PAIRS[@]}"; do
    IFS='|' read -r name _ <<<"$row"
    gpu_pair "$name" cpu RUN_DIR
    args+="${PAIR_ARGS[*]}"$'\n'
    cfgs+="$PAIR_CFG"$'\n'
  done
  echo "trainer: $version"
  echo "stages: $( { printf '%s' "$args"
                     printf '%s' "$cfgs" | sort -u | while read -r c; do cat "$c"; done
                   } 2>/dev/null | sha256sum | cut -c1-16)"
  echo "data: $(stat -c '%n %s' data/brown/train_*.bin data/brown/val_*.bin 2>/dev/null |
                sha256sum | cut -c1-16)"
}
