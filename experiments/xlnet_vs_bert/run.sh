#!/usr/bin/env bash
# XLNet vs BERT-MLM at equal steps x tokens on the IMDB reviews' BPE pieces, then each
# fine-tuned as the IMDB sentiment classifier (README.md beside this file).
#
#   PYTHONPATH=$PWD bash experiments/xlnet_vs_bert/run.sh [WORKDIR]   (from the repository root)
#
# Runs one at a time under nice; each run's CPU and wall seconds go to WORKDIR/<run>.time;
# summarize.py writes results.json, results.md and results.png beside this file.
set -euo pipefail
OUT=${1:-/tmp/xlnet_vs_bert}
PY=${PYTHON:-python}
SEEDS=${SEEDS:-"0 1 2"}
SCRATCH_SEEDS=${SCRATCH_SEEDS:-"0 1"}
mkdir -p "$OUT"
# the same optimizer, batch, length and step count for both (configs differ in their defaults)
SAME=(--config.data.batch_size=16 --config.train.num_steps=200 --config.optimizer.learning_rate=1e-3
      --config.optimizer.warmup_steps=20 --config.optimizer.b2=0.98 --config.optimizer.min_lr_ratio=0.1
      --config.train.eval_every=100 --config.train.eval_max_batches=5 --config.train.log_every=50)
XL=(--config.model.num_heads=2)  # as BERT's smoke: 2 heads of 32

run() {  # run NAME ARGS...: skipped when NAME already finished
  local name=$1; shift
  if [[ -f "$OUT/$name/result.json" ]]; then echo "skip $name"; return; fi
  rm -rf "${OUT:?}/$name"
  echo "run $name"
  /usr/bin/time -f "%U %S %e" -o "$OUT/$name.time" nice -n 10 "$PY" -m seqjax.main \
    --workdir "$OUT/$name" "$@" "${SAME[@]}" > "$OUT/$name.log" 2>&1
}

# pre-training: 200 steps x 16 rows x 256 pieces each
run xlnet_pt --config configs/xlnet.py:subword,smoke "${XL[@]}" --config.train.test_max_batches=8
run bert_pt --config configs/mlm.py:subword,smoke --config.train.test_max_batches=8
# fine-tuning (test: the first 64 x 16 = 1,024 test reviews), from the pre-trained and from scratch
for s in $SEEDS; do
  SEED=(--config.seed="$s" --config.data.seed="$s" --config.train.test_max_batches=64)
  run "xlnet_ft_s$s" --config configs/xlnet.py:subword,finetune,smoke "${XL[@]}" "${SEED[@]}" \
    --config.init_from="$OUT/xlnet_pt"
  run "bert_ft_s$s" --config configs/mlm.py:subword,finetune,smoke "${SEED[@]}" \
    --config.init_from="$OUT/bert_pt"
done
for s in $SCRATCH_SEEDS; do  # the same fine-tuning from a random init
  SEED=(--config.seed="$s" --config.data.seed="$s" --config.train.test_max_batches=64)
  run "xlnet_scratch_s$s" --config configs/xlnet.py:subword,finetune,smoke "${XL[@]}" "${SEED[@]}"
  run "bert_scratch_s$s" --config configs/mlm.py:subword,finetune,smoke "${SEED[@]}"
done
"$PY" experiments/xlnet_vs_bert/summarize.py "$OUT"
