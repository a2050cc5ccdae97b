#!/usr/bin/env bash
# One `wamdiff2 train` over several 8-GPU nodes under SLURM: edit the #SBATCH lines and the
# variables below, then `sbatch scripts/slurm_train.sh`. srun starts one torchrun per node;
# the torchruns meet at the first node (c10d rendezvous) and start 8 processes each, so the
# run has NODES x 8 processes (train.global_batch must be a multiple of that times
# train.micro_batch). output.dir must be on a file system every node sees: each process
# writes its own checkpoint shard there, and a resume (--resume) reads them at any node
# count. Before booking, `wamdiff2 memory-plan --config RECIPE --gpus N` says whether the
# recipe fits (docs/training.md, "Scale").
#SBATCH --job-name=wamdiff2-train
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=64
#SBATCH --time=24:00:00
#SBATCH --output=%x-%j.log
set -euo pipefail

RECIPE=${RECIPE:-config/training/distill_cross.yaml}
OVERRIDES=${OVERRIDES:-"data.path=data/train output.dir=runs/distill_cross \
train.strategy=fsdp train.activation_checkpointing=true"}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
PORT=${PORT:-29400}
VENV=${VENV:-.venv}

HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
# NCCL_SOCKET_IFNAME / NCCL_IB_HCA: set them here if the cluster's fabric needs it.

# RESUME=1 continues the newest complete checkpoint of output.dir (after a pre-emption).
srun --kill-on-bad-exit=1 "$VENV/bin/torchrun" \
    --nnodes "$SLURM_JOB_NUM_NODES" --nproc_per_node "$GPUS_PER_NODE" \
    --rdzv-backend c10d --rdzv-endpoint "$HEAD:$PORT" --rdzv-id "$SLURM_JOB_ID" \
    -m wamdiff2_core.cli train --config "$RECIPE" ${RESUME:+--resume} $OVERRIDES
