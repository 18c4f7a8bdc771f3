#!/usr/bin/env bash
# Issue 4's GPU checks in one prepared run (planned for well under 10 minutes on an H200):
#   1. bench/gpu_throughput.py, eager and with torch.compile: bf16 images/s and MFU of vit_p_4gf
#      and vit_c_4gf at 224 px, and dhvt_tiny_cifar_p4's epoch time on CIFAR-100-sized data;
#   2. `optbench train` on CUDA with the paper recipe (bf16 autocast, channels_last, fused AdamW,
#      EMA, AutoAugment, mixup/CutMix) on digits, eager and compiled: each must finish;
#   3. a stopped-and-resumed CUDA trial (SIGUSR2 during epoch 2, then --resume) must finish;
#   4. issue 21's input pipelines: bench/input_pipeline.py on the GPU; `optbench train vit_p_4gf`
#      (bf16, compiled) for one epoch on a generated ImageNet-layout folder of 20,000 JPEGs,
#      --pipeline pil (cores - 1 workers) against --pipeline tensor; dhvt_tiny_cifar_p4 with the
#      deit recipe on CIFAR-100-sized data, pil against tensor. Goals (docs/datasets.md):
#      vit_p_4gf >= 8,000 img/s with input wait < 10% (tensor); DHVT >= 5 x 1,900 img/s;
#   5. issue 55's harness cost on the GPU: bench/harness_cost.py runs the quickstart study as
#      `optbench run` does (one worker per GPU) and says where the trials' seconds went beside
#      their epochs. Each finished trial above prints its result.json `timing` as well.
# Every JSON line and log goes to $OUT (default bench/out). Exit status 0 only if every check
# passed. `DEVICE=cpu bash bench/gpu_checks.sh` runs the same plumbing on tiny models on the CPU;
# `CHECKS=input` runs only part 4, `CHECKS=cost` only part 5. `CHECKS=population` runs issue
# 22's population bench alone instead (vit_c_w64_16px on digits-sized and dhvt_tiny_cifar_p4 on
# CIFAR-sized input, K = 1, 4, 16, fused and manual attention).
# `CHECKS=ratios` runs issue 66's figures alone (planned for about 7 minutes on an H100, each
# step capped by `timeout`, the caps 500 s in all, so that the last line comes within the
# device's 600 s a command): bench/step_parts.py (each
# configuration's input, harness, model-alone and trial images/s, step parts, syncs per step,
# MFU; the 224-px ViT compiled; a profile of 3 steps of the trial and of the model alone each,
# bench/step_profile.py, their Chrome traces gzipped in $OUT), bench/input_stages.py (the tensor pipeline's stages on a class
# folder, each alone: read, decode on the device and on host threads, upload, crop, policy),
# bench/population.py at K = 1, 4, 16 for the 16-px and CIFAR models (with each mode's
# operations per step), and one quickstart trial (`optbench train`, 20 epochs) whose result.json gives its
# wall time over its epochs and its step parts by CUDA events; then bench/gpu_ratios.py prints
# the figures as one JSON line.
#
# On the lent H200 machine (device tool), python3 (3.12) has torch, timm, typer, rich, pyyaml,
# pandas, scipy, matplotlib and scikit-learn, but not pydantic (every step), nor optuna,
# SQLAlchemy and submitit (part 5's `optbench run`). Carry their wheels in .whl/ (ignored by git;
# name it in the run's `carry`); this script installs what .whl/ holds first:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl pydantic pydantic-core annotated-types typing-inspection typing-extensions \
#     optuna sqlalchemy greenlet alembic mako colorlog submitit
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/out}
DEVICE=${DEVICE:-cuda}
CHECKS=${CHECKS:-all}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
failed=0
check() {  # check NAME COMMAND...: run it, keep its output in $OUT/NAME.log, count a failure
    local name=$1
    shift
    echo "== $name: $*"
    if "$@" >"$OUT/$name.log" 2>&1; then
        tail -n 1 "$OUT/$name.log"
    else
        echo "FAILED ($name, exit $?): last lines of $OUT/$name.log"
        tail -n 15 "$OUT/$name.log"
        failed=$((failed + 1))
    fi
}
finished() {  # finished DIR: its result.json says "finished"
    python3 -c "import json,sys; r=json.load(open(sys.argv[1]+'/result.json')); \
print(json.dumps({k: r.get(k) for k in ('status','final_error','images_per_s','input_wait','execution','wall_s','timing','digest','message')})); \
sys.exit(r['status'] != 'finished')" "$1"
}

python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), \
torch.cuda.get_device_name() if torch.cuda.is_available() else '')" | tee "$OUT/env.txt"

if [ "$CHECKS" = population ]; then  # issue 22's check alone: population vs solo img/s
    if [ "$DEVICE" = cuda ]; then steps=50 threads=16; else steps=2 threads=2; fi
    for attention in "" --manual-attention; do
        check "population_vit_c${attention:+_manual}" python3 bench/population.py --device "$DEVICE" \
            --threads "$threads" --steps "$steps" $attention
        check "population_dhvt${attention:+_manual}" python3 bench/population.py --device "$DEVICE" \
            --threads "$threads" --steps "$steps" --model dhvt_tiny_cifar_p4 --img-size 32 \
            --chans 3 --classes 100 --batch 256 $attention
    done
    exit $((failed > 0))
fi

if [ "$CHECKS" = ratios ]; then  # issue 66's figures alone, in one JSON line
    run_dir=$(mktemp -d)
    if [ "$DEVICE" = cuda ]; then
        # DHVT's population at batch 128: at 256, 16 members' saved activations come near an
        # H100's 80 GB (about 14 MB an image: autograd's saved tensors under the CPU's bf16 autocast)
        size=(--profile 3) pop=(--steps 20 --threads 16 --profile 1) pop_batch=(--batch 128) epochs=20 t=1
        stages=()
    else  # the dry run: tiny sizes, and time caps for a loaded 2-core CPU
        size=(--tiny --threads 1 --profile 2) pop=(--steps 2 --threads 1 --sizes 1,4 --batch 8 --profile 1) pop_batch=() epochs=3 t=8
        stages=(--images 96 --batch 16 --threads 1)
    fi
    check input_stages timeout -k 10 $((50 * t)) python3 bench/input_stages.py --device "$DEVICE" "${stages[@]}"
    check step_parts timeout -k 10 $((90 * t)) python3 bench/step_parts.py --device "$DEVICE" "${size[@]}" \
        --configs quickstart,cifar --trace "$OUT"
    check step_parts_224 timeout -k 10 $((160 * t)) python3 bench/step_parts.py --device "$DEVICE" "${size[@]}" \
        --configs 224 --compile --trace "$OUT"
    check population_vit_c timeout -k 10 $((70 * t)) python3 bench/population.py --device "$DEVICE" \
        "${pop[@]}"
    check population_dhvt timeout -k 10 $((80 * t)) python3 bench/population.py --device "$DEVICE" \
        "${pop[@]}" --model dhvt_tiny_cifar_p4 --img-size 32 --chans 3 --classes 100 \
        "${pop_batch[@]}"
    check train_steps timeout -k 10 $((50 * t)) python3 -m optbench train vit_p_w64_16px --dataset digits \
        --img-size 16 --optimizer adamw --lr 2e-3 --wd 0.05 --epochs "$epochs" --batch-size 128 \
        --ref-batch 128 --set warmup_epochs=2 --set label_smoothing=0.1 --set hflip=false \
        --set translate=2 --device "$DEVICE" --out "$run_dir/quickstart"
    check train_steps_result finished "$run_dir/quickstart"
    rm -rf "$run_dir"
    python3 bench/gpu_ratios.py "$OUT" | tee "$OUT/ratios.json"
    echo "== $failed check(s) failed"
    exit $((failed > 0))
fi

run_dir=$(mktemp -d)
if [ "$CHECKS" = all ]; then
if [ "$DEVICE" = cuda ]; then
    check throughput python3 bench/gpu_throughput.py
    check throughput_compile python3 bench/gpu_throughput.py --compile
    model=vit_c_w64_16px epochs=4
else
    check throughput python3 bench/gpu_throughput.py --device cpu --smoke
    model=vit_c_w64_16px epochs=2
fi

train() {  # train OUT_DIR [extra args]: the paper recipe on digits at 16 px
    local dir=$1
    shift
    python3 -m optbench train "$model" --dataset digits --img-size 16 --optimizer adamw \
        --lr 2e-3 --wd 0.05 --epochs "$epochs" --batch-size 128 --ref-batch 128 \
        --recipe paper --set warmup_epochs=1 --device "$DEVICE" --out "$dir" "$@"
}
check train_eager train "$run_dir/eager"
check train_eager_result finished "$run_dir/eager"
check train_compile train "$run_dir/compile" --set compile=true
check train_compile_result finished "$run_dir/compile"

# Stop during epoch 2 (SIGUSR2 as SLURM sends it), then resume from the checkpoint.
train "$run_dir/stopped" >"$OUT/train_stop.log" 2>&1 &
pid=$!
for _ in $(seq 1200); do
    [ -s "$run_dir/stopped/metrics.jsonl" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
kill -USR2 "$pid" 2>/dev/null
wait "$pid"
echo "== stop: exit $? (140 = stopped by SIGUSR2 after its checkpoint)"
check train_resume train "$run_dir/stopped" --resume
check train_resume_result finished "$run_dir/stopped"
fi

# Issue 21: the input pipelines, on generated data.
if [ "$CHECKS" = all ] || [ "$CHECKS" = input ]; then
data_dir=$(mktemp -d)
if [ "$DEVICE" = cuda ]; then
    check input_pipeline python3 bench/input_pipeline.py --images 4000 --batch 256 --batches 12 --workers 15
    jpegs=20000 folder_model=vit_p_4gf folder_size=() folder_batch=256 cifar=50000
    cifar_model=dhvt_tiny_cifar_p4 cifar_size=() compile=(--set compile=true)
else
    check input_pipeline python3 bench/input_pipeline.py --images 200 --batches 2 --workers 2 \
        --cifar 2000 --no-model
    jpegs=200 folder_model=vit_c_w64_16px folder_size=(--img-size 16) folder_batch=32 cifar=1024
    cifar_model=dhvt_w64_16px cifar_size=(--img-size 16) compile=()
fi
check write_jpegs python3 bench/input_pipeline.py --images "$jpegs" --write-jpegs "$data_dir/folders"
check write_cifar python3 bench/input_pipeline.py --cifar "$cifar" --write-cifar "$data_dir/cifar"
for pipeline in pil tensor; do
    check "folder_$pipeline" python3 -m optbench train "$folder_model" --dataset imagefolder \
        --data-root "$data_dir/folders" "${folder_size[@]}" --optimizer adamw --lr 1e-3 --wd 0.05 \
        --epochs 1 --batch-size "$folder_batch" --ref-batch "$folder_batch" --recipe paper \
        --set warmup_epochs=0 "${compile[@]}" --device "$DEVICE" --pipeline "$pipeline" \
        --out "$run_dir/folder_$pipeline"
    check "folder_${pipeline}_result" finished "$run_dir/folder_$pipeline"
    check "cifar_$pipeline" python3 -m optbench train "$cifar_model" --dataset cifar100 \
        --data-root "$data_dir/cifar" "${cifar_size[@]}" --optimizer adamw --lr 5e-4 --wd 0.05 \
        --epochs 1 --batch-size 256 --ref-batch 512 --recipe deit --set warmup_epochs=0 \
        --device "$DEVICE" --pipeline "$pipeline" --out "$run_dir/cifar_$pipeline"
    check "cifar_${pipeline}_result" finished "$run_dir/cifar_$pipeline"
done
rm -rf "$data_dir"
fi

if [ "$CHECKS" = all ] || [ "$CHECKS" = cost ]; then  # issue 55: the harness around the epochs
    check harness_cost python3 bench/harness_cost.py
fi

rm -rf "$run_dir"
echo "== $failed check(s) failed"
exit $((failed > 0))
