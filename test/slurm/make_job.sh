#!/usr/bin/env bash
# make_job.sh DIR: writes DIR/tokens.bin (an llm.c shard) and DIR/job.yaml (a
# tiny GPT-2 over it, 30 steps, constant learning rate) for the launch tests.
set -eu
d=$1
mkdir -p "$d"
# llm.c shard: 256 x int32 header (magic 20240520, version 1, token count),
# then uint16 tokens: an LCG over 64 of the 1000 ids, so the loss has room to
# fall from ln(1000) towards ln(64), and every machine writes the same file.
ntok=20000
le32() { printf "\\x$(printf %02x $(($1 & 255)))\\x$(printf %02x $((($1 >> 8) & 255)))\\x$(printf %02x $((($1 >> 16) & 255)))\\x$(printf %02x $((($1 >> 24) & 255)))"; }
{ le32 20240520; le32 1; le32 $ntok; head -c $((253 * 4)) /dev/zero
  LC_ALL=C awk -v n=$ntok 'BEGIN { x = 4242; for (i = 0; i < n; i++) { x = (x * 1103515245 + 12345) % 2147483648;
    t = (int(x / 65536) % 64) * 13 + 5; printf "%c%c", t % 256, int(t / 256) } }'; } >"$d/tokens.bin.tmp"
mv "$d/tokens.bin.tmp" "$d/tokens.bin"
# A constant learning rate (after 2 warm-up steps) makes step s's update
# independent of train.steps, so a run stopped early and resumed with another
# train.steps can be compared with an uninterrupted one.
cat >"$d/job.yaml" <<YAML
run: {name: slurmtest, dir: $d/runs/default, device: cpu, seed: 11}
model: {family: gpt2, n_layer: 1, d_model: 32, n_head: 2, d_ff: 64, vocab_size: 1000, max_seq_len: 16}
data: {train: $d/tokens.bin}
train: {seq_len: 16, micro_batch: 1, global_batch: 4, steps: 30, eval_every: 0, log_every: 1}
optimizer: {lr: 1.0e-2, warmup_steps: 2, schedule: constant}
YAML
