#!/usr/bin/env python3
"""Checks that a `trainer export --reference-logits N` directory loads as it is
in Hugging Face transformers (and vLLM, when installed) and computes the
trainer's logits.

    python3 scripts/hf_check.py EXPORT_DIR [--engine transformers|vllm] [--tol 1e-4]
    python3 scripts/hf_check.py EXPORT_DIR --text FILE --tokens SHARD

transformers: AutoModelForCausalLM.from_pretrained(EXPORT_DIR) in fp32 on the
CPU, logits on reference.json's ids against reference_logits.f32: the largest
absolute difference must be within tol * max(1, max |logit|).
vLLM: LLM(EXPORT_DIR, dtype=float32) prompt log-probabilities of the same ids
against log_softmax of the trainer's logits.
--text/--tokens: AutoTokenizer.from_pretrained(EXPORT_DIR) (an export with
--vocab/--merges) must encode FILE to the ids `trainer tokenize` wrote in
SHARD, and decode them back to FILE.

Exit 0 = match, 1 = mismatch or load failure, 3 = the engine is not installed.
Used on machines that have these libraries (scripts/gpu_check.sh runs it
where they import); the trainer and its tests never need Python.
"""
import argparse
import json
import math
import os
import struct
import sys


def read_reference(d):
    with open(os.path.join(d, "reference.json")) as f:
        ref = json.load(f)
    T, V = ref["shape"]
    with open(os.path.join(d, ref["logits"]), "rb") as f:
        raw = f.read()
    if len(raw) != T * V * 4:
        sys.exit(f"{d}/{ref['logits']}: {len(raw)} bytes, expected {T} x {V} float32")
    flat = struct.unpack(f"<{T * V}f", raw)
    return ref["ids"], [flat[t * V:(t + 1) * V] for t in range(T)], V


def check_transformers(d, ids, ours, V, tol):
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"transformers: not installed ({e})")
        return 3
    kwargs = {"attn_implementation": "eager"}
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, **kwargs)
    except TypeError:  # transformers 4.x names it torch_dtype
        model = transformers.AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32, **kwargs)
    model.eval()
    with torch.no_grad():
        theirs = model(torch.tensor([ids])).logits[0].float()
    if tuple(theirs.shape) != (len(ids), V):
        print(f"transformers {transformers.__version__}: logits of shape {tuple(theirs.shape)}, "
              f"expected ({len(ids)}, {V})")
        return 1
    ours_t = torch.tensor(ours, dtype=torch.float32)
    diff = (theirs - ours_t).abs()
    worst = diff.max().item()
    where = divmod(int(diff.argmax().item()), V)
    scale = max(1.0, ours_t.abs().max().item())
    ok = worst <= tol * scale
    print(f"transformers {transformers.__version__} ({type(model).__name__}): {len(ids)} tokens x {V}, "
          f"max |logit diff| {worst:.3g} at (token {where[0]}, id {where[1]}), "
          f"max |logit| {scale:.3g}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def check_tokenizer(d, text_path, tokens_path):
    """AutoTokenizer on the export's tokenizer files against `trainer tokenize`'s ids of the same text."""
    try:
        import transformers
    except ImportError as e:
        print(f"tokenizer: transformers not installed ({e})")
        return 3
    with open(tokens_path, "rb") as f:
        raw = f.read()
    magic, version, n = struct.unpack("<3i", raw[:12])
    if magic != 20240520 or len(raw) != 1024 + 2 * n:
        print(f"tokenizer: {tokens_path} is not an llm.c token shard")
        return 1
    ours = list(struct.unpack(f"<{n}H", raw[1024:]))[1:]  # the document's leading <|endoftext|>
    with open(text_path, encoding="utf-8") as f:
        text = f.read()
    tok = transformers.AutoTokenizer.from_pretrained(d)
    theirs = tok(text)["input_ids"]
    ok = theirs == ours and tok.decode(theirs) == text
    first = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
    print(f"tokenizer ({type(tok).__name__}): {len(ours)} ids of {tokens_path}, "
          f"{'identical' if theirs == ours else f'first difference at {first}'}, "
          f"decode {'round-trips' if tok.decode(theirs) == text else 'differs'}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def log_softmax_at(row, i):
    m = max(row)
    return row[i] - m - math.log(sum(math.exp(x - m) for x in row))


def check_vllm(d, ids, ours, V, tol):
    try:
        from vllm import LLM, SamplingParams
    except ImportError as e:
        print(f"vllm: not installed ({e})")
        return 3
    # An export with its tokenizer (trainer export --vocab --merges) loads with it.
    skip = not os.path.exists(os.path.join(d, "tokenizer_config.json"))
    llm = LLM(model=d, dtype="float32", skip_tokenizer_init=skip, enforce_eager=True,
              gpu_memory_utilization=0.2, max_model_len=len(ids))
    out = llm.generate([{"prompt_token_ids": ids}],
                       SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False))
    got = out[0].prompt_logprobs
    worst = 0.0
    for t in range(1, len(ids)):
        lp = got[t][ids[t]].logprob
        worst = max(worst, abs(lp - log_softmax_at(ours[t - 1], ids[t])))
    ok = worst <= tol * 10  # vLLM's kernels: log-probabilities, not raw logits
    print(f"vllm: prompt log-probabilities of {len(ids) - 1} tokens, max difference {worst:.3g}: "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("export_dir")
    p.add_argument("--engine", choices=["transformers", "vllm"], default="transformers")
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--text", help="with --tokens: a text whose ids the export's tokenizer must give")
    p.add_argument("--tokens", help="`trainer tokenize` of --text (an llm.c shard)")
    a = p.parse_args()
    if a.text and a.tokens:
        sys.exit(check_tokenizer(a.export_dir, a.text, a.tokens))
    ids, ours, V = read_reference(a.export_dir)
    check = check_transformers if a.engine == "transformers" else check_vllm
    sys.exit(check(a.export_dir, ids, ours, V, a.tol))


if __name__ == "__main__":
    main()
