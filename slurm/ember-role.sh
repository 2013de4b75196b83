#!/usr/bin/env bash
# slurm/ember-role.sh ROLE [EMBER-TRAIN ARGS]: one line of a --multi-prog file.
#
# srun --multi-prog gives each rank its own program line; this wrapper checks
# that the line's ROLE (trainer, master or ps) is the role ember-train gives
# this rank (SLURM_PROCID: ranks 0..T-1 trainers, T master, T+1.. the PS,
# with T and P from --trainers/--ps in ARGS or their defaults: P=1, T = the
# rest of SLURM_NTASKS), then runs `ember-train ARGS` (ember-train from PATH;
# slurm/hybrid.sbatch --multi-prog puts its --program first in PATH).
# Every rank must get the same ARGS: they describe one job.  Under
# hybrid.sbatch (HYBRID_RANK_ENV set) it first picks UCX's interface as the
# script's plain srun does.
set -euo pipefail
role=${1:?usage: ember-role.sh trainer|master|ps [ember-train args]}
shift
rank=${SLURM_PROCID:?not under srun}
ntasks=${SLURM_NTASKS:?not under srun}
ps=1 trainers=
args=("$@")
while (($#)); do
    case $1 in
    --ps) ps=${2:-}; shift ;;
    --trainers) trainers=${2:-}; shift ;;
    esac
    shift || true
done
[ -n "$trainers" ] || trainers=$((ntasks - 1 - ps))
if ((rank < trainers)); then want=trainer
elif ((rank == trainers)); then want=master
else want=ps
fi
if [ "$role" != "$want" ]; then
    echo "ember-role.sh: rank $rank is the $want of this job ($trainers trainers," \
        "$ps ps), but its --multi-prog line says $role" >&2
    exit 2
fi
# hybrid.sbatch's per-rank setup (UCX_NET_DEVICES, the "ember-net:" line).
if [ -n "${HYBRID_RANK_ENV:-}" ]; then
    # shellcheck source=/dev/null
    . "$HYBRID_RANK_ENV"
    ember_net_devices
fi
exec ember-train --trainers "$trainers" --ps "$ps" "${args[@]}"
