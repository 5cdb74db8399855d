#!/usr/bin/env bash
# Iyyer et al. 2015's IMDB table at CPU scale: NBOW, DAN, Kim's CNN, a BiLSTM, a small
# Transformer and ELMo features (a biLM pre-trained on the training reviews, frozen, scalar-
# mixed) on one IMDB split: sentencepiece (8,000 pieces), the first 128 pieces of each review,
# batch 32, test accuracy on the first 2,000 of the 25,000 test reviews (a random subset: the
# test split is stored shuffled). Then the table, the plot and the JSON (summarize.py).
#   bash experiments/iyyer_imdb/run.sh [OUT_DIR]        (about 20 CPU-minutes, nice'd)
# ONLY="dan cnn" runs a subset (the others' workdirs are kept for the summary).
set -euo pipefail
OUT=${1:-/tmp/iyyer_imdb}
mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python}
DATA="--config.data.max_len=128 --config.data.batch_size=32 --config.train.eval_every=0
  --config.train.checkpoint_every=0 --config.train.log_every=50 --config.train.eval_batch_size=100
  --config.train.test_max_batches=20 --config.optimizer.warmup_steps=50"
BASE=configs/text_baselines.py
run() {
  name=$1; shift
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
  rm -rf "$OUT/$name"
  /usr/bin/time -f "%U %S %e" -o "$OUT/$name.time" nice -n 10 $PY -m seqjax.main \
    --workdir "$OUT/$name" "$@"
}
run nbow --config $BASE $DATA --config.train.num_steps=800 --config.model.num_layers=0 \
  --config.model.word_dropout=0.0  # NBOW: the averaged embeddings, then the softmax
run dan --config $BASE $DATA --config.train.num_steps=800
run cnn --config $BASE $DATA --config.train.num_steps=800 --config.model.architecture=cnn \
  --config.model.embed_dim=128 --config.model.num_filters=64 --config.model.dropout_rate=0.5
run lstm --config $BASE:lstm $DATA --config.train.num_steps=300
run transformer --config $BASE:transformer $DATA --config.train.num_steps=400 \
  --config.model.max_len=128
ELMO="--config.model.hidden_dim=128 --config.model.proj_dim=64 --config.data.token_chars=20
  --config.model.filters=((1,32),(2,32),(3,64),(4,64))"
run elmo_bilm --config configs/elmo.py $DATA $ELMO --config.train.num_steps=300 \
  --config.train.checkpoint_every=300 --config.train.test_max_batches=5
run elmo --config configs/elmo.py:classify $DATA $ELMO --config.train.num_steps=800 \
  --config.init_from="$OUT/elmo_bilm" --config.optimizer.learning_rate=1e-3
$PY "$HERE/summarize.py" "$OUT" "$HERE"
PYTHONPATH=. $PY "$HERE/probe.py" "$OUT/elmo" "$HERE"  # diagnostic: a linear probe of the frozen features
