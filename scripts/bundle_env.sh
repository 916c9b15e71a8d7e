# env.sh of a trainer bundle (scripts/bundle.sh copies scripts/bundle_env.sh
# here): source it with bash to put bin/ on PATH and the node's CUDA libraries
# on LD_LIBRARY_PATH, and to see what was found.
#
#   source bundle/env.sh            # report on stderr
#   TRAINER_ENV_QUIET=1 source bundle/env.sh
#
# CUDA library folders, in order: $CUDA_HOME/lib64 (and $CUDA_PATH),
# /usr/local/cuda/lib64, and every site-packages/nvidia/*/lib of python3 (pip's
# nvidia-* wheels). The bundle's own lib/ goes first: binaries find it through
# their RUNPATH anyway, but an LD_LIBRARY_PATH set earlier (a conda env, a
# module) would otherwise win over RUNPATH.
# Sourced, so it sets no shell options and leaves only _trainer_* functions unset.

_trainer_env_main() {
  local bundle
  bundle=$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd) || return 1
  local say=1
  [[ ${TRAINER_ENV_QUIET:-0} == 1 ]] && say=0

  local -a dirs=() seen=()
  local d sp
  _trainer_add() {  # a folder holding at least one shared library, once
    local x
    [[ -d $1 ]] || return 0
    compgen -G "$1/lib*.so*" >/dev/null || return 0
    for x in "${dirs[@]}"; do [[ $x == "$1" ]] && return 0; done
    dirs+=("$1")
  }
  for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}"; do
    [[ -n $d ]] && { _trainer_add "$d/lib64"; _trainer_add "$d/lib"; }
  done
  _trainer_add /usr/local/cuda/lib64
  local sites=""
  if command -v python3 >/dev/null 2>&1; then
    sites=$(python3 -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null)
  fi
  local IFS_old=$IFS
  IFS=$'\n'
  for sp in $sites /usr/local/lib/python3*/dist-packages /usr/lib/python3/dist-packages; do
    for d in "$sp"/nvidia/*/lib; do _trainer_add "$d"; done
  done
  IFS=$IFS_old

  local joined="$bundle/lib"
  for d in "${dirs[@]}"; do joined="$joined:$d"; done
  export TRAINER_BUNDLE=$bundle
  export LD_LIBRARY_PATH="$joined${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  case ":$PATH:" in *":$bundle/bin:"*) ;; *) export PATH="$bundle/bin:$PATH" ;; esac

  ((say)) || return 0
  {
    echo "trainer bundle: $bundle ($(sed -n 's/^commit=//p' "$bundle/bundle.info" 2>/dev/null))"
    if ((${#dirs[@]})); then
      echo "  CUDA library folders added to LD_LIBRARY_PATH:"
      for d in "${dirs[@]}"; do echo "    $d"; done
    else
      echo "  no CUDA library folder found (CUDA_HOME, /usr/local/cuda/lib64, python3 site-packages/nvidia/*/lib)"
    fi
    local lib where cache
    cache=$(/sbin/ldconfig -p 2>/dev/null || ldconfig -p 2>/dev/null)
    for lib in libcuda.so.1 libcudart.so.13 libcublasLt.so.13 libcublas.so.13 libcudnn.so.9 libnccl.so.2; do
      where=""
      IFS=:
      for d in $LD_LIBRARY_PATH; do [[ -e $d/$lib ]] && { where="$d/$lib"; break; }; done
      IFS=$IFS_old
      [[ -z $where ]] && where=$(awk -v l="$lib" '$1 == l { print $NF; exit }' <<<"$cache")
      printf '  %-18s %s\n' "$lib" "${where:-not found}"
    done
    # The loader's own verdict: a library or symbol version the node lacks.
    if [[ -x $bundle/bin/trainer ]] && command -v ldd >/dev/null 2>&1; then
      local problems
      problems=$(ldd "$bundle/bin/trainer" 2>&1 | grep -E 'not found' | sed 's/^[[:space:]]*//')
      if [[ -n $problems ]]; then
        echo "  bin/trainer cannot start yet; the loader reports:"
        sed 's/^/    /' <<<"$problems"
      else
        echo "  bin/trainer: every library it links resolves"
      fi
    fi
    local need have
    need=$(sed -n 's/^glibc_required=//p' "$bundle/bundle.info" 2>/dev/null)
    have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{ print $2 }')
    if [[ -n $need && -n $have && $need != unknown ]]; then
      if [[ $(printf '%s\n%s\n' "$need" "$have" | sort -t. -k1,1n -k2,2n | head -1) == "$need" ]]; then
        echo "  glibc $have (the bundle needs >= $need)"
      else
        echo "  glibc $have is too old: the bundle needs >= $need and will not start here"
      fi
    fi
  } >&2
}
if [[ ${BASH_SOURCE[0]:-} == "$0" ]]; then
  echo "env.sh sets variables for the shell that sources it: run 'source $0'" >&2
  exit 2
fi
_trainer_env_main
unset -f _trainer_env_main _trainer_add
