# Sourced by the mesh comparisons (mesh_matches.sh, ep_matches.sh): the one-rank
# reference run, trained once per ctest invocation and shared. Dozens of meshes
# compare against the same one-rank run of the same job (the mesh's overrides
# are its own), and that run was a third of each entry's time. A run is keyed
# by the trainer binary (path, size, modification time), the job file's bytes
# and the reference's own overrides; e2e_make_fixtures, the setup every such
# entry requires, wipes the fixtures directory, and so the cache, each time.
#
# ref_run TRAINER REF JOB [ARGS...]: REF (removed first) becomes a link to the
# run directory of `TRAINER train JOB --set run.dir=... ARGS` (its output in
# REF/train.log), trained here unless an identical run already is. Entries
# running at once (ctest -j) wait for one another's run under a lock.
ref_run() {
  local trainer=$1 ref=$2 job=$3
  shift 3
  local key cache
  key=$({ stat -L -c '%n %s %Y' "$trainer"; cat "$job"; printf '%s\n' "$@"; } | sha256sum | cut -c1-20)
  cache=$PWD/runs/refcache_$key
  mkdir -p runs
  (
    flock 9
    if [[ ! -f $cache/complete ]]; then
      rm -rf "$cache" "$cache.part"
      OMP_NUM_THREADS=1 "$trainer" train "$job" --set run.dir="$cache.part" "$@" >"$cache.log" 2>&1 ||
        { cat "$cache.log"; exit 1; }
      mv "$cache.log" "$cache.part/train.log"
      touch "$cache.part/complete"
      mv "$cache.part" "$cache"
    fi
  ) 9>"$cache.lock" || return 1
  rm -rf "$ref"
  ln -s "$cache" "$ref"
}
