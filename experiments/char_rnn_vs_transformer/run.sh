#!/usr/bin/env bash
# Char-RNN (LSTM, carried state) vs the nanoGPT-style Transformer on tiny shakespeare at about
# equal parameters (~150K) and an equal step budget (1,000 steps of 32 x 64 characters), then the
# table and the plot (summarize.py). Tiny and nice'd: a few CPU-minutes per run.
#   bash experiments/char_rnn_vs_transformer/run.sh [OUT_DIR]
set -euo pipefail
OUT=${1:-/tmp/char_rnn_vs_transformer}
HERE=$(cd "$(dirname "$0")" && pwd)
COMMON="--config.train.num_steps=1000 --config.train.log_every=20 --config.train.eval_every=0
  --config.train.checkpoint_every=0 --config.train.sample_length=0 --config.data.batch_size=32
  --config.data.seq_len=64 --config.optimizer.warmup_steps=20"
rm -rf "$OUT/lstm" "$OUT/transformer"
nice -n 10 python -m seqjax.main --config configs/char_rnn.py --workdir "$OUT/lstm" $COMMON \
  --config.model.num_layers=1 --config.model.hidden_dim=128 --config.optimizer.learning_rate=5e-3
nice -n 10 python -m seqjax.main --config configs/shakespeare_char.py --workdir "$OUT/transformer" \
  $COMMON --config.model.num_layers=2 --config.model.d_model=76 --config.model.d_ff=304 \
  --config.model.num_heads=4 --config.optimizer.learning_rate=3e-3
python "$HERE/summarize.py" "$OUT" "$HERE"
