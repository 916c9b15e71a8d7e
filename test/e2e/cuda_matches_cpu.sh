#!/usr/bin/env bash
# cuda_matches_cpu.sh TRAINER SOURCE_DIR WORK [CASE ...]: the tiny GPT-2 on
# real text, a few steps on the CUDA backend and on the CPU in fp32, bf16,
# fp16 and fp8 (every block GEMM in fp8), bf16 with run.attention: unfused,
# the tiny MoE in fp8 and as GPT-2 layers in bf16, document masking, and the
# tiny Llama with Qwen2's q/k/v biases and Qwen3's q/k norms in bf16, the tiny MoE as
# Qwen2-MoE with group-limited routing in bf16, losses and grad norms
# compared step by step at gpu_check.sh's tolerances; `ckpt`: a background
# checkpoint's shard against a foreground one's. CASEs (default: all) pick
# some, so ctest runs them as separate entries side by side.
# Exit 77 (skipped) where no GPU is visible; in a build against the CUDA
# emulator (test/cuda_emu) it runs in CI.
set -euo pipefail
trainer=$1 src=$2 work=$3
shift 3
cases=("$@")
((${#cases[@]})) || cases=(fp32 bf16 bf16_unfused fp16 fp8 moe_fp8 moe_gelu_bf16 docs_bf16 docs_llama_fp32 qwen_bf16
                            moe_qwen2_bf16 window_bf16 mla_bf16 ckpt)
steps=${STEPS:-3}
cd "$src"
if [[ ! -f data/brown/train_000000.bin ]]; then
  echo "SKIPPED: data/brown missing (scripts/get_data.sh)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
run() {  # run NAME DEVICE PRECISION [--set ...]
  local name=$1 dev=$2 prec=$3
  shift 3
  # Micro-batches of 2 sequences, 2 to a step: accumulation is still crossed, at
  # half the jobs' 4 x 2 (the emulated runs were most of the emulated suite's time).
  "$trainer" train "${JOB:-configs/tiny-gpt2.yaml}" --set train.steps="$steps" --set train.eval_every=0 \
    --set train.micro_batch=2 --set train.global_batch=4 --set run.device="$dev" \
    --set precision.compute="$prec" --set run.dir="$work/$name" "$@" >"$work/$name.log" 2>&1
}
# A CUDA run first: where it finds no GPU, the whole test is skipped.
run_cuda() {  # run_cuda NAME PRECISION [--set ...]
  local name=$1
  shift
  run "$name" cuda "$@" && return 0
  if grep -q "no GPU is visible\|has no CUDA backend" "$work/$name.log"; then
    echo "SKIPPED: $(tail -1 "$work/$name.log")"
    exit 77
  fi
  tail -20 "$work/$name.log"
  return 1
}
# "step loss grad_norm" per training step of a metrics file.
metrics() {
  awk -F'[:,}]' '/"loss"/ { s=""; l=""; g="";
      for (i = 1; i < NF; i++) { if ($i ~ /"step"$/) s = $(i+1); if ($i ~ /"loss"$/) l = $(i+1);
                                 if ($i ~ /"grad_norm"$/) g = $(i+1) }
      if (s != "" && l != "") print s, l, g }' "$1"
}
status=0
# moe_fp8: configs/moe-tiny.yaml in fp8, every expert GEMM in fp8 on its
# ragged row block (zero-padded to 16 rows on the GPU).
# moe_gelu_bf16: the same MoE as GPT-2 layers in bf16, each expert's GELU fused
# into its GEMMs (kernels/linear_gelu.h) on ragged row blocks, balanced
# aux-loss-free (the bias moved on the device after each step, from the step
# counters gathered there; a rate high enough to move routing within 3 steps).
# bf16_unfused: run.attention unfused, the batched-GEMM attention instead of
# the fused kernels bf16 takes by default (the CPU has one attention).
# docs_*: document masking with "." (13) as the end-of-document id, so Brown's
# sequences hold several documents: GPT-2 in bf16 (the fused attention's tiles
# start at each query tile's first document; learned positions restart) and
# Llama in fp32 (the unfused attention; RoPE at restarted positions).
# qwen_bf16: the tiny Llama with q/k/v biases (Qwen2) and per-head q/k RMSNorms
# (Qwen3) both on (an export takes one or the other; training takes both), its
# 4 heads of 32 wider together than its width of 64 (as Qwen3 0.6B's).
# window_bf16: a sliding window of 40 over 128-token sequences (two 64-row
# tiles; the fused attention masks per element: rows from 103 on see no key
# of tile 0. Whole skipped tiles are test_flash_emulated's and [cuda]'s).
# mla_bf16: the tiny Llama with DeepSeek's multi-head latent attention (q and
# kv latents of 32, q/k heads of 32 + 16 RoPE, value heads of 32 padded to 48
# for the fused attention; model/mla_layer.h).
# moe_qwen2_bf16: moe-tiny as Qwen2-MoE (q/k/v biases, two shared experts
# gated per token by an fp32 (1, d_model) linear) with DeepSeek-V3's
# group-limited routing (8 experts in 4 groups, each token's 2 from its best 2).
declare -A tols=([fp32]=1e-4 [bf16]=5e-3 [bf16_unfused]=5e-3 [fp16]=5e-3 [fp8]=2e-2 [moe_fp8]=2e-2
                 [moe_gelu_bf16]=5e-3 [docs_bf16]=5e-3 [docs_llama_fp32]=1e-4 [qwen_bf16]=5e-3
                 [moe_qwen2_bf16]=5e-3 [window_bf16]=5e-3 [mla_bf16]=5e-3)
for prec in "${cases[@]}"; do
  [[ $prec == ckpt ]] && continue
  [[ -n ${tols[$prec]:-} ]] || { echo "cuda_matches_cpu.sh: unknown case '$prec'"; exit 2; }
  tol=${tols[$prec]}
  extra=() job=configs/tiny-gpt2.yaml dtype=${prec#moe_}
  dtype=${dtype%_unfused} dtype=${dtype#gelu_} dtype=${dtype#docs_} dtype=${dtype#llama_} dtype=${dtype#qwen_}
  dtype=${dtype#qwen2_} dtype=${dtype#window_} dtype=${dtype#mla_}
  [[ $prec == *fp8 ]] && extra=(--set precision.fp8_first_last_bf16=false)
  [[ $prec == moe_gelu_* ]] && extra=(--set model.family=gpt2 --set model.n_kv_head=4
                                      --set model.moe.balance=aux_free --set model.moe.bias_update_rate=0.02)
  [[ $prec == *_unfused ]] && extra=(--set run.attention=unfused)
  [[ $prec == moe_* ]] && job=configs/moe-tiny.yaml
  [[ $prec == docs_llama_* || $prec == qwen_* || $prec == mla_* ]] && job=configs/tiny-llama.yaml
  [[ $prec == qwen_* ]] && extra=(--set model.qkv_bias=true --set model.qk_norm=true --set model.head_dim=32)
  [[ $prec == moe_qwen2_* ]] && extra=(--set model.qkv_bias=true --set model.moe.n_shared_experts=2
                                       --set model.moe.shared_expert_gate=true --set model.moe.n_groups=4
                                       --set model.moe.top_groups=2)
  [[ $prec == mla_* ]] && extra=(--set model.n_kv_head=4 --set "model.mla={q_lora_rank: 32, kv_lora_rank: 32,
                                 qk_nope_head_dim: 32, qk_rope_head_dim: 16, v_head_dim: 32}")
  [[ $prec == window_* ]] && extra=(--set train.seq_len=128 --set model.max_seq_len=128
                                    --set model.sliding_window=40)
  [[ $prec == docs_* ]] && extra=(--set data.reset_attention_mask=true --set data.reset_position_ids=true
                                  --set data.eod_mask_loss=true --set data.eod_token=13)
  JOB=$job run_cuda "${prec}_cuda" "$dtype" "${extra[@]}" || { status=1; continue; }
  JOB=$job run "${prec}_cpu" cpu "$dtype" "${extra[@]}"
  metrics "$work/${prec}_cpu/metrics.jsonl" >"$work/${prec}_cpu.txt"
  metrics "$work/${prec}_cuda/metrics.jsonl" >"$work/${prec}_cuda.txt"
  if ! paste "$work/${prec}_cpu.txt" "$work/${prec}_cuda.txt" | awk -v tol="$tol" -v n="$steps" -v p="$prec" '
      function rel(a, b) { d = a - b; if (d < 0) d = -d; if (a < 0) a = -a; return a > 0 ? d / a : d }
      { rows++; if ($1 != $4) { print p ": step numbers differ"; bad = 1 }
        for (k = 2; k <= 3; k++) { r = rel($k, $(k + 3)); if (r != r || $(k + 3) ~ /nan|inf/) r = 1e9
          if (r > worst) worst = r } }
      END { printf "%s: %d steps, worst relative difference (loss, grad norm) %.3g (tol %s)\n", p, rows, worst, tol
            exit (bad || rows != n || worst > tol) }'; then
    status=1
  fi
done
# checkpoint.async on the CUDA backend: the shard written in the background from
# the page-locked host snapshot at step 1 holds the bytes a foreground save
# writes (the last save, step 2, is always foreground).
[[ " ${cases[*]} " == *" ckpt "* ]] || exit $status
run_cuda ckpt_fg fp32 --set train.steps=2 --set checkpoint.every=1 --set checkpoint.async=false
run_cuda ckpt_bg fp32 --set train.steps=2 --set checkpoint.every=1 --set checkpoint.async=true
for s in 1; do
  shard=checkpoints/$(printf 'step_%06d' "$s")/rank_00000.safetensors
  if cmp -s "$work/ckpt_fg/$shard" "$work/ckpt_bg/$shard" && grep -q "in the background" "$work/ckpt_bg.log"; then
    echo "async checkpoint on cuda: step $s shard equals the foreground save's"
  else
    echo "async checkpoint on cuda: step $s shard differs from the foreground save's (or was not saved in the background)"
    status=1
  fi
done
exit $status
