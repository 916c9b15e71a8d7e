#!/usr/bin/env bash
# make_fixtures.sh DIR: writes the bad job specs and data files the
# expect_error tests use (binary files with printf, no other tools).
set -eu
d=$1
rm -rf "$d" && mkdir -p "$d/data"
cd "$d"

# llm.c shard: 256 x int32 header (magic 20240520, version 1, token count), uint16 tokens.
header() {  # header COUNT MAGIC
  local magic=$2 count=$1
  le32() { printf "\\x$(printf %02x $(($1 & 255)))\\x$(printf %02x $((($1 >> 8) & 255)))\\x$(printf %02x $((($1 >> 16) & 255)))\\x$(printf %02x $((($1 >> 24) & 255)))"; }
  le32 "$magic"; le32 1; le32 "$count"
  head -c $((253 * 4)) /dev/zero
}
tokens() {  # tokens N VALUE: N uint16 tokens, all VALUE
  local i v=$2
  for ((i = 0; i < $1; i++)); do printf "\\x$(printf %02x $((v & 255)))\\x$(printf %02x $((v >> 8)))"; done
}
{ header 300 20240520; tokens 300 7; } >data/good.bin
{ header 300 20240521; tokens 300 7; } >data/badmagic.bin
{ header 300 20240520; tokens 200 7; } >data/truncated.bin
{ header 300 20240520; tokens 5 7; tokens 1 60000; tokens 294 7; } >data/bigtoken.bin

# 40000 pseudo-random tokens below 1000 (an LCG, so every machine writes the same file).
{ header 40000 20240520
  LC_ALL=C awk 'BEGIN { x = 12345; for (i = 0; i < 40000; i++) { x = (x * 1103515245 + 12345) % 2147483648;
    t = int(x / 65536) % 1000; printf "%c%c", t % 256, int(t / 256) } }'; } >data/random.bin

# 40000 tokens of short documents: the same LCG, with about one token in eight
# the end-of-document id 0 (so a 16-token sequence holds two or three documents).
{ header 40000 20240520
  LC_ALL=C awk 'BEGIN { x = 54321; for (i = 0; i < 40000; i++) { x = (x * 1103515245 + 12345) % 2147483648;
    t = int(x / 65536) % 1000; if (t < 125) t = 0; printf "%c%c", t % 256, int(t / 256) } }'; } >data/docs.bin

base() {  # base DATA: a valid tiny job over DATA
  cat <<YAML
run: {name: e2e, dir: runs/e2e, device: cpu}
model: {family: gpt2, n_layer: 1, d_model: 16, n_head: 2, d_ff: 32, vocab_size: 1000, max_seq_len: 16}
data: {train: $1}
train: {seq_len: 16, micro_batch: 2, global_batch: 4, steps: 2, eval_every: 0}
YAML
}
base data/good.bin >good.yaml
sed 's/n_layer: 1/n_layers: 1/' good.yaml >unknown_key.yaml
{ cat good.yaml; printf -- '---\nrun: {name: second}\n'; } >two_documents.yaml
printf ',\n' >stray_comma.yaml  # yaml-cpp 0.7's LoadAll loops on it (jbeder/yaml-cpp#1040)
sed 's/n_layer: 1/n_layer: four/' good.yaml >wrong_type.yaml
sed 's/n_head: 2/n_head: 3/' good.yaml >heads.yaml
sed 's/family: gpt2/family: llama, n_kv_head: 3/; s/n_head: 2/n_head: 4/' good.yaml >kv_heads.yaml
sed 's/global_batch: 4/global_batch: 5/' good.yaml >global_batch.yaml
sed 's/seq_len: 16,/seq_len: 32,/' good.yaml >seq_len.yaml
sed 's/n_layer: 1/n_layer: 0/' good.yaml >zero_layers.yaml
printf 'run: {name: x\nmodel: [\n' >syntax.yaml
sed 's/^train:/optimizer: {schedule: cosinus}\ntrain:/' good.yaml >bad_enum.yaml
sed 's/^train:/optimizer: {lr: -1}\ntrain:/' good.yaml >negative_lr.yaml
base data/missing_*.bin >missing_data.yaml
base data/badmagic.bin >bad_magic.yaml
base data/truncated.bin >truncated.yaml
base data/bigtoken.bin >big_token.yaml

# The jobs the mesh tests compare across layouts (20 steps, global batch 8).
for family in gpt2 llama; do
  kv=""; [ $family = llama ] && kv=", n_kv_head: 2"
  cat >mesh_$family.yaml <<YAML
run: {name: mesh, dir: runs/mesh, device: cpu, seed: 7}
model: {family: $family, n_layer: 2, d_model: 32, n_head: 4$kv, d_ff: 64, vocab_size: 1000, max_seq_len: 16}
data: {train: data/random.bin}
train: {seq_len: 16, micro_batch: 1, global_batch: 8, steps: 20, eval_every: 0}
optimizer: {lr: 3.0e-3, warmup_steps: 2}
YAML
done
sed 's/n_kv_head: 2/n_kv_head: 4/' mesh_llama.yaml >mesh_llama_kv4.yaml
# Fewer KV heads than tp ranks (replicated KV heads): 2 and 1 (MQA) KV heads, clipped
# so a gradient norm counting a replicated head twice would change the losses;
# and 3 KV heads (6 query heads) that tp 2 cannot hold.
sed 's/warmup_steps: 2}/warmup_steps: 2, grad_clip: 0.3}/' mesh_llama.yaml >mesh_llama_clip.yaml
# Clipped on every step: a gradient norm summed wrongly over ZeRO-3 shards shows.
sed 's/warmup_steps: 2}/warmup_steps: 2, grad_clip: 0.3}/' mesh_gpt2.yaml >mesh_gpt2_clip.yaml
sed 's/n_kv_head: 2/n_kv_head: 1/' mesh_llama_clip.yaml >mesh_llama_kv1.yaml
# Qwen2's shape: q/k/v biases (split and replicated with their heads) and a tied head.
sed 's/n_kv_head: 2/n_kv_head: 2, qkv_bias: true, tie_embeddings: true/' mesh_llama_clip.yaml >mesh_qwen2.yaml
# Qwen3's: per-head q/k norms (one weight over heads split by tp; MQA replicates
# k's), heads of 16 over the width of 32.
sed 's/n_kv_head: 2/n_kv_head: 1, head_dim: 16, qk_norm: true, tie_embeddings: true/' mesh_llama_clip.yaml >mesh_qwen3.yaml
sed 's/d_model: 32, n_head: 4, n_kv_head: 2/d_model: 48, n_head: 6, n_kv_head: 3/' mesh_llama.yaml >mesh_llama_kv3.yaml
# DeepSeek's multi-head latent attention: a q latent of 12, a kv latent of 16,
# q/k heads of 8 + 4 (RoPE), value heads of 6; clipped, so a down-projection
# gradient not summed over tp (or summed twice) shows in the losses too.
sed 's/n_kv_head: 2/n_kv_head: 4,\n        mla: {q_lora_rank: 12, kv_lora_rank: 16, qk_nope_head_dim: 8, qk_rope_head_dim: 4, v_head_dim: 6}/' \
  mesh_llama_clip.yaml >mesh_llama_mla.yaml
grep -q 'kv_lora_rank: 16' mesh_llama_mla.yaml
# YaRN over an original context of 8: pair 0 kept, the rest divided by 4, cos/sin x 1.14.
sed 's/max_seq_len: 16}/max_seq_len: 16,\n        rope_scaling: {type: yarn, factor: 4, original_max_position_embeddings: 8}}/' \
  mesh_llama_clip.yaml >mesh_llama_yarn.yaml
grep -q 'type: yarn' mesh_llama_yarn.yaml
# MLA under DeepSeek's YaRN: the mscale pair sets the attention factor and the softmax multiplier.
sed 's/max_seq_len: 16}/max_seq_len: 16,\n        rope_scaling: {type: yarn, factor: 4, original_max_position_embeddings: 8, mscale: 1, mscale_all_dim: 0.6}}/' \
  mesh_llama_mla.yaml >mesh_llama_mla_yarn.yaml
grep -q 'mscale_all_dim: 0.6' mesh_llama_mla_yarn.yaml
# DeepseekV3ForCausalLM's latent norms take eps 1e-6: the MLA job as its Hugging Face class.
sed 's/max_seq_len: 16}/max_seq_len: 16, norm_eps: 1.0e-6}/' mesh_llama_mla.yaml >mesh_llama_mla_hf.yaml
grep -q 'norm_eps: 1.0e-6' mesh_llama_mla_hf.yaml
# Four layers, so pp 4 has one per stage (and pp 2 two).
for family in gpt2 llama; do sed 's/n_layer: 2/n_layer: 4/' mesh_$family.yaml >mesh_${family}_l4.yaml; done
# Mixed precision on meshes (the single-rank reference in the same precision).
for p in bf16 fp16 fp8; do
  for family in gpt2 llama; do
    sed "s/^optimizer:/precision: {compute: $p, fp8_first_last_bf16: false}\noptimizer:/" \
      mesh_${family}_l4.yaml >mesh_${family}_$p.yaml
  done
done
# Evaluation on a mesh (context parallelism: every cp rank holds part of each
# validation sequence): 3 batches over dp 2, so the dp ranks run unequal rounds.
sed 's|data: {train: data/random.bin}|data: {train: data/random.bin, val: data/random.bin}|; s|eval_every: 0|eval_every: 5, eval_batches: 3|' \
  mesh_gpt2.yaml >mesh_gpt2_eval.yaml
# Eight layers: interleaved pp 4 x virtual_stages 2 (one layer per chunk).
sed 's/n_layer: 2/n_layer: 8/' mesh_gpt2.yaml >mesh_gpt2_l8.yaml

# Mixture-of-experts jobs: GPT-2 with the balance loss, Llama with aux-loss-free
# balancing, a shared expert and MoE in every second layer.
cat >mesh_moe.yaml <<YAML
run: {name: mesh, dir: runs/mesh, device: cpu, seed: 7}
model: {family: gpt2, n_layer: 2, d_model: 32, n_head: 4, d_ff: 64, vocab_size: 1000, max_seq_len: 16,
        moe: {n_experts: 4, top_k: 2, d_ff_expert: 32}}
data: {train: data/random.bin}
train: {seq_len: 16, micro_batch: 1, global_batch: 8, steps: 20, eval_every: 0}
optimizer: {lr: 3.0e-3, warmup_steps: 2}
YAML
cat >mesh_moe_llama.yaml <<YAML
run: {name: mesh, dir: runs/mesh, device: cpu, seed: 7}
model: {family: llama, n_layer: 2, d_model: 32, n_head: 4, n_kv_head: 2, d_ff: 64, vocab_size: 1000,
        max_seq_len: 16, moe: {n_experts: 4, top_k: 2, d_ff_expert: 32, n_shared_experts: 1, every: 2,
        balance: aux_free}}
data: {train: data/random.bin}
train: {seq_len: 16, micro_batch: 1, global_batch: 8, steps: 20, eval_every: 0}
optimizer: {lr: 3.0e-3, warmup_steps: 2}
YAML
# The MoE GPT-2 with capacity dropping and a router z-loss (expert-parallel
# drop counts and z-loss gradients against one rank).
cat >mesh_moe_capacity.yaml <<YAML
run: {name: mesh, dir: runs/mesh, device: cpu, seed: 7}
model: {family: gpt2, n_layer: 2, d_model: 32, n_head: 4, d_ff: 64, vocab_size: 1000, max_seq_len: 16,
        moe: {n_experts: 4, top_k: 2, d_ff_expert: 32, capacity_factor: 1.0, z_loss_coeff: 0.001}}
data: {train: data/random.bin}
train: {seq_len: 16, micro_batch: 1, global_batch: 8, steps: 20, eval_every: 0}
optimizer: {lr: 3.0e-3, warmup_steps: 2}
YAML
# fp8 MoE (every layer in fp8): each expert GEMM with its own scaling state.
for job in mesh_moe mesh_moe_llama; do
  sed "s/^optimizer:/precision: {compute: fp8, fp8_first_last_bf16: false}\noptimizer:/" \
    $job.yaml >${job}_fp8.yaml
done
# Two sequences per micro-batch: capacity shared over cp chunks of several sequences.
sed 's/micro_batch: 1/micro_batch: 2/' mesh_moe_capacity.yaml >mesh_moe_capacity_mb2.yaml
# Qwen3-MoE's shape: q/k norms, an MoE every other layer without a shared
# expert, routed by softmax top-2 not renormalised (a Qwen3MoeForCausalLM export).
sed -e 's/n_kv_head: 2,/n_kv_head: 2, qk_norm: true,/' \
    -e 's/n_shared_experts: 1, every: 2,/every: 2, normalize_topk: false,/' \
    -e 's/balance: aux_free/balance: aux_loss/' mesh_moe_llama.yaml >mesh_qwen3_moe.yaml
grep -q 'qk_norm: true' mesh_qwen3_moe.yaml && grep -q 'normalize_topk: false' mesh_qwen3_moe.yaml
# DeepSeek-V3's router: sigmoid scores (with the aux_free bias).
sed 's/balance: aux_free/balance: aux_free, score: sigmoid/' mesh_moe_llama.yaml >mesh_moe_llama_sigmoid.yaml
grep -q 'score: sigmoid' mesh_moe_llama_sigmoid.yaml
# ...and its sequence-wise balance loss, over micro-batches of 3 sequences so
# that tp 2 blocks and cp chunks cut sequences (rank 0 of tp 2 holds one and a
# half): each sequence's counts must be summed over the ranks holding it.
sed -e 's/score: sigmoid/score: sigmoid, seq_aux_loss_coeff: 0.05/' \
    -e 's/micro_batch: 1, global_batch: 8/micro_batch: 3, global_batch: 6/' \
  mesh_moe_llama_sigmoid.yaml >mesh_moe_seq_aux.yaml
grep -q 'seq_aux_loss_coeff: 0.05' mesh_moe_seq_aux.yaml && grep -q 'micro_batch: 3' mesh_moe_seq_aux.yaml
# ...and its group-limited routing: 8 experts in 4 groups of 2, each token's
# two from its best 2 groups (with ep 4, a group per rank: node-limited).
sed 's/n_experts: 4, top_k: 2,/n_experts: 8, top_k: 2, n_groups: 4, top_groups: 2,/' \
  mesh_moe_llama_sigmoid.yaml >mesh_moe_llama_grouped.yaml
grep -q 'n_groups: 4' mesh_moe_llama_grouped.yaml
# Four layers (MoE in layers 1 and 3): an interleaved pipeline pp 2 x v2 with ep.
sed 's/n_layer: 2/n_layer: 4/' mesh_moe_llama.yaml >mesh_moe_llama_l4.yaml
# DeepSeek-V3's router: the first two layers dense (MoE in layer 3 only),
# sigmoid scores, combine weights x 2.5.
sed 's/every: 2,/every: 2, first_dense: 2, score: sigmoid, topk_scaling_factor: 2.5,/' \
  mesh_moe_llama_l4.yaml >mesh_moe_llama_dense_first.yaml
grep -q 'first_dense: 2' mesh_moe_llama_dense_first.yaml
sed 's/^optimizer:/precision: {compute: bf16}\noptimizer:/' mesh_moe_llama.yaml >mesh_moe_llama_bf16.yaml
# Qwen2-MoE's gated shared expert (its gate in fp32 beside the router), also in bf16.
sed 's/n_shared_experts: 1,/n_shared_experts: 1, shared_expert_gate: true,/' mesh_moe_llama.yaml \
  >mesh_moe_llama_gated.yaml
grep -q 'shared_expert_gate: true' mesh_moe_llama_gated.yaml
sed 's/^optimizer:/precision: {compute: bf16}\noptimizer:/' mesh_moe_llama_gated.yaml \
  >mesh_moe_llama_gated_bf16.yaml
sed 's/^optimizer:/precision: {compute: fp16}\noptimizer:/' mesh_moe_llama.yaml >mesh_moe_llama_fp16.yaml
# A loss scale fp16 cannot hold: every step overflows and must be skipped on every rank.
sed 's/^optimizer:/precision: {compute: fp16, loss_scale: 1e30}\noptimizer:/' mesh_moe_llama.yaml >mesh_moe_llama_fp16_overflow.yaml
# Evaluation with ep: 3 batches over dp 4, so one rank of an ep group has none
# (it must still take part in its group's token exchanges).
sed 's|data: {train: data/random.bin}|data: {train: data/random.bin, val: data/random.bin}|; s|eval_every: 0|eval_every: 5, eval_batches: 3|' \
  mesh_moe.yaml >mesh_moe_eval.yaml

# Packed documents (Megatron's --reset-attention-mask, --reset-position-ids,
# --eod-mask-loss) over docs.bin, with evaluation; four layers for pp 2 x v2.
for family in gpt2 llama; do
  sed 's|data: {train: data/random.bin}|data: {train: data/docs.bin, val: data/docs.bin, reset_attention_mask: true, reset_position_ids: true, eod_mask_loss: true, eod_token: 0}|; s|eval_every: 0|eval_every: 5, eval_batches: 3|' \
    mesh_${family}_l4.yaml >mesh_${family}_docs.yaml
done
for job in mesh_moe mesh_moe_llama; do
  sed 's|data: {train: data/random.bin}|data: {train: data/docs.bin, val: data/docs.bin, reset_attention_mask: true, reset_position_ids: true, eod_mask_loss: true, eod_token: 0}|; s|eval_every: 0|eval_every: 5, eval_batches: 3|' \
    $job.yaml >${job}_docs.yaml
done
