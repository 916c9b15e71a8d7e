#!/usr/bin/env bash
# bundle_test.sh SOURCE_DIR WORK_DIR CUDA(on|off): builds the relocatable bundle
# with scripts/bundle.sh, unpacks its tarball elsewhere and, in an environment
# stripped to PATH=/usr/bin:/bin plus the bundle's env.sh, checks that every
# non-system library resolves inside the bundle, that `trainer --version`
# reports the libraries it finds, that a tiny CPU job trains, that bin/launch.sh
# starts ranks, and that the size limit holds (and is enforced).
# TRAINER_BUNDLE_BUILD_DIR overrides the build tree (default WORK_DIR/build).
set -euo pipefail
SRC=$1
WORK=$2
CUDA=$3
BUILD=${TRAINER_BUNDLE_BUILD_DIR:-$WORK/build}
LIMIT_MB=60
T0=$(date +%s)
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "== [$(( $(date +%s) - T0 ))s] $*"; }

rm -rf "$WORK/out" "$WORK/unpacked" "$WORK/run" "$WORK/small"
mkdir -p "$WORK/out" "$WORK/unpacked"

step "building the bundle (cuda $CUDA) in $BUILD"
"$SRC/scripts/bundle.sh" --out "$WORK/out/bundle" --build-dir "$BUILD" --cuda "$CUDA"
[[ -f $WORK/out/bundle.tar.gz ]] || fail "no tarball at $WORK/out/bundle.tar.gz"

step "size limit"
bytes=$(du -sb "$WORK/out/bundle" | cut -f1)
echo "bundle: $bytes bytes; tarball: $(stat -c %s "$WORK/out/bundle.tar.gz") bytes"
((bytes < LIMIT_MB * 1000000)) || fail "bundle is $bytes bytes, over $LIMIT_MB MB"
# The limit is enforced: with 1 MB allowed bundle.sh fails and leaves nothing behind.
if "$SRC/scripts/bundle.sh" --out "$WORK/small/bundle" --build-dir "$BUILD" --cuda "$CUDA" \
     --max-mb 1 >"$WORK/small.log" 2>&1; then
  fail "bundle.sh --max-mb 1 succeeded"
fi
grep -q "over the 1 MB limit" "$WORK/small.log" || { cat "$WORK/small.log"; fail "no size-limit message"; }
[[ ! -e $WORK/small/bundle && ! -e $WORK/small/bundle.tar.gz ]] || fail "a failed bundle.sh left files"

# Relocated: the tarball unpacked somewhere else, the build tree out of reach.
tar -C "$WORK/unpacked" -xzf "$WORK/out/bundle.tar.gz"
B=$WORK/unpacked/bundle
for f in bin/trainer bin/launch.sh env.sh README.md bundle.info configs/tiny-gpt2.yaml \
         bin/test/kernels/test_kernels_cpu bin/test/precision/test_precision; do
  [[ -e $B/$f ]] || fail "bundle lacks $f"
done
[[ $CUDA != on || -x $B/bin/test/cuda/cuda_ops_test ]] || fail "CUDA bundle lacks bin/test/cuda/cuda_ops_test"
bare() { env -i PATH=/usr/bin:/bin HOME="$HOME" OMP_NUM_THREADS=2 bash -c "cd '$B' && $1"; }
with_env() { bare "TRAINER_ENV_QUIET=${QUIET:-1} source ./env.sh && $1"; }

step "env.sh's report"
report=$(QUIET=0 with_env true 2>&1)
echo "$report"
grep -q "libcublasLt.so.13" <<<"$report" || fail "env.sh reported nothing about libcublasLt.so.13"
grep -q "bin/trainer: every library it links resolves" <<<"$report" || fail "env.sh: bin/trainer does not resolve"
step "ldd: every non-system library from the bundle"
# System: glibc, the GCC runtime, the loader; CUDA/driver: the node's. Anything
# else must come from the bundle's lib/.
check_ldd() {  # check_ldd MODE(env|bare) BINARY
  local out name arrow path bad=0
  if [[ $1 == env ]]; then out=$(with_env "ldd $2"); else out=$(bare "ldd $2"); fi
  while read -r name arrow path _; do
    [[ $arrow == "=>" ]] || continue
    case $name in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libstdc++.so*|libgcc_s.so*|ld-linux*) continue ;;
      libcuda.so*|libcudart.so*|libcublas*|libcudnn*|libnccl*|libnvrtc*|libnvJitLink*)
        # Without env.sh a CUDA library may be missing; with it, it must be found here.
        [[ $path == not && $1 == env ]] && { echo "  $2: $name not found"; bad=1; }
        continue ;;
    esac
    # RUNPATH resolution prints $ORIGIN paths like bin/test/x/../../../lib/...
    [[ $path == not ]] || path=$(readlink -f "$path")
    if [[ $path != "$B/lib/"* ]]; then
      echo "  $2 ($1): $name => $path (not inside the bundle)"
      bad=1
    fi
  done <<<"$out"
  return $bad
}
bins=$(cd "$B" && find bin -type f ! -name '*.sh' | sort)
for b in $bins; do
  check_ldd env "$b" || fail "$b resolves a library outside the bundle (with env.sh)"
  check_ldd bare "$b" || fail "$b resolves a library outside the bundle (RUNPATH only)"
done
echo "checked: $(echo $bins)"
nlibs=$(ls "$B/lib" | wc -l)
((nlibs > 0)) || fail "lib/ is empty"
with_env "ldd bin/trainer" | grep -q "$B/lib/libyaml-cpp" || fail "trainer does not load libyaml-cpp from the bundle"

step "trainer --version"
version=$(with_env "bin/trainer --version" 2>&1) || { echo "$version"; fail "trainer --version failed"; }
echo "$version"
# The commit of the build: the tree's HEAD or, if someone committed meanwhile,
# an ancestor of it; "+dirty.<diff hash>" after it when built with local edits.
commit=$(sed -n 's/^commit=//p' "$B/bundle.info")
grep -q "^trainer $commit (Release build)" <<<"$version" || fail "--version lacks 'trainer $commit (Release build)'"
if git -C "$SRC" rev-parse HEAD >/dev/null 2>&1; then
  git -C "$SRC" merge-base --is-ancestor "${commit%%+dirty.*}" HEAD || fail "--version commit $commit is not HEAD or an ancestor"
fi
for lib in driver cudart cublasLt cublas cudnn nccl; do
  grep -qE "^$lib +" <<<"$version" || fail "--version has no line for $lib"
done
# Versions the library reports must equal the headers this machine compiled against.
expect_version() {  # expect_version LABEL SONAME HEADER MAJOR_MACRO MINOR_MACRO PATCH_MACRO
  local label=$1 so=$2 h=$3 ver
  [[ -f $h ]] || return 0
  with_env "/sbin/ldconfig -p | grep -q ' $so ' || ls \$(echo \$LD_LIBRARY_PATH | tr : ' ') 2>/dev/null | grep -qx $so" || return 0
  ver=$(awk -v a="$4" -v b="$5" -v c="$6" '$1 == "#define" { v[$2] = $3 } END { print v[a] "." v[b] "." v[c] }' "$h")
  grep -qE "^$label +$ver " <<<"$version" || fail "$label: expected version $ver (from $h)"
  echo "  $label $ver matches $h"
}
CUDA_INC=/usr/local/cuda/include
expect_version cublasLt libcublasLt.so.13 $CUDA_INC/cublas_api.h CUBLAS_VER_MAJOR CUBLAS_VER_MINOR CUBLAS_VER_PATCH
expect_version cublas libcublas.so.13 $CUDA_INC/cublas_api.h CUBLAS_VER_MAJOR CUBLAS_VER_MINOR CUBLAS_VER_PATCH
expect_version cudnn libcudnn.so.9 $CUDA_INC/cudnn_version.h CUDNN_MAJOR CUDNN_MINOR CUDNN_PATCHLEVEL
expect_version nccl libnccl.so.2 $CUDA_INC/nccl.h NCCL_MAJOR NCCL_MINOR NCCL_PATCH
if ! /sbin/ldconfig -p | grep -q 'libcuda\.so\.1 '; then
  grep -qE "^driver +not found" <<<"$version" || fail "no libcuda.so.1 here, but --version did not say 'not found'"
fi

# A node without cuDNN: only the libraries the binary links (a CUDA build needs
# cudart, cuBLAS and NCCL to start) in a folder of their own, the loader's cache
# ignored. cuDNN is only ever dlopen'ed, so --version must start and say so.
mkdir -p "$WORK/partial_cuda"
rm -f "$WORK/partial_cuda"/*
for f in /usr/local/cuda/lib64/libcudart.so* /usr/local/cuda/lib64/libcublas*.so* /usr/local/cuda/lib64/libnccl.so*; do
  [[ -e $f ]] && ln -s "$f" "$WORK/partial_cuda/"
done
no_cudnn=$(env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$WORK/partial_cuda" bash -c \
  "cd '$B' && /lib64/ld-linux-x86-64.so.2 --inhibit-cache bin/trainer --version" 2>&1) ||
  { echo "$no_cudnn"; fail "trainer --version did not start without cuDNN"; }
grep -qE "^cudnn +not found \(tried libcudnn.so.9" <<<"$no_cudnn" || { echo "$no_cudnn"; fail "no 'cudnn not found' line without cuDNN"; }
echo "without cuDNN: $(grep '^cudnn' <<<"$no_cudnn")"

step "a tiny CPU job from the bundle"
# llm.c shard: 256 int32 header (magic 20240520, version 1, token count), then
# uint16 tokens below 1000 from an LCG.
shard=$WORK/tokens.bin
le32() { local v=$1 i; for i in 0 8 16 24; do printf "\\x$(printf %02x $(((v >> i) & 255)))"; done; }
{ le32 20240520; le32 1; le32 8000; head -c $((253 * 4)) /dev/zero
  LC_ALL=C awk 'BEGIN { x = 7; for (i = 0; i < 8000; i++) { x = (x * 1103515245 + 12345) % 2147483648;
    t = int(x / 65536) % 1000; printf "%c%c", t % 256, int(t / 256) } }'; } >"$shard"
[[ $(stat -c %s "$shard") == $((1024 + 16000)) ]] || fail "shard has the wrong size"
with_env "bin/trainer train configs/tiny-gpt2.yaml --set train.steps=3 --set train.eval_every=0 \
  --set data.train=$shard --set data.val=$shard --set model.vocab_size=1000 --set run.device=cpu \
  --set run.dir=$WORK/run" >"$WORK/train.log" 2>&1 || { tail -20 "$WORK/train.log"; fail "training from the bundle failed"; }
[[ -f $WORK/run/metrics.jsonl ]] || fail "no metrics.jsonl in $WORK/run"
nloss=$(grep -c '"loss"' "$WORK/run/metrics.jsonl" || true)
((nloss >= 3)) || { cat "$WORK/run/metrics.jsonl"; fail "expected 3 steps with a loss, found $nloss"; }
grep '"loss"' "$WORK/run/metrics.jsonl" | grep -qiE 'nan|inf' && fail "non-finite loss in metrics.jsonl"
echo "trained 3 steps: $(grep -c . "$WORK/run/metrics.jsonl") metrics lines"

step "a bundled unit-test binary"
with_env "bin/test/precision/test_precision" >"$WORK/unit.log" 2>&1 || { tail -20 "$WORK/unit.log"; fail "test_precision failed from the bundle"; }
grep -E "^(All tests passed|test cases)" "$WORK/unit.log" || fail "test_precision printed no Catch2 summary"

step "launch.sh starts ranks (this build has no MPI, so CPU ranks are refused with one line)"
rc=0
with_env "bin/launch.sh -n 2 bin/trainer train configs/tiny-gpt2.yaml --set data.train=$shard \
  --set data.val=$shard --set model.vocab_size=1000 --set run.device=cpu --set run.dir=$WORK/run2" \
  >"$WORK/launch.log" 2>&1 || rc=$?
((rc == 2)) || { cat "$WORK/launch.log"; fail "launch.sh -n 2 exited $rc, expected 2"; }
grep -q "2 ranks were launched (pmi)" "$WORK/launch.log" || { cat "$WORK/launch.log"; fail "the ranks did not see the launch"; }

step "PASS"
