#!/usr/bin/env bash
# Bahdanau et al. 2015 Figure 2 in miniature: BLEU against source-sentence length for the RNN
# encoder-decoder without attention, with Bahdanau (additive) attention, with Luong (general)
# attention, and the Transformer, on software_l10n en-de (configs/translation*.py data and
# vocabulary). Same data, same BPE-2000 joint vocabulary, same steps and batch (STEPS x 32
# pairs), one run at a time, niced. Then every model decodes validation + test (beam 4,
# alpha 0.6) and experiments/bahdanau_fig2/evaluate.py scores BLEU per source-length bucket.
#
#   bash experiments/bahdanau_fig2/run.sh            # from the repository root
#
# CPU seconds (user + sys) of each command land in $WORK/<model>/cpu_seconds.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD"
PY=${PY:-python}
STEPS=${STEPS:-1000}
WORK=${WORK:-workdirs/bahdanau_fig2}
mkdir -p "$WORK"
COMMON=(--config.train.num_steps="$STEPS" --config.train.eval_every=0
        --config.eval.decode_metrics=false --config.train.checkpoint_every="$STEPS"
        --config.train.sample_length=0 --config.train.log_every=50)

train() {  # name, config, extra flags...
  local name=$1 cfg=$2; shift 2
  if [ -f "$WORK/$name/result.json" ]; then echo "$name: done"; return; fi
  /usr/bin/time -f "%U %S %e" -o "$WORK/$name.time" \
    nice -n 10 "$PY" -m seqjax.main --config="$cfg" --workdir="$WORK/$name" "${COMMON[@]}" "$@"
  mv "$WORK/$name.time" "$WORK/$name/cpu_seconds.txt"
}

train rnn_none     configs/translation_rnn.py:cpu --config.model.attention_type=none
train rnn_bahdanau configs/translation_rnn.py:cpu --config.model.attention_type=bahdanau
train rnn_general  configs/translation_rnn.py:cpu --config.model.attention_type=general
train transformer  configs/translation.py:cpu --config.optimizer.warmup_steps=150

/usr/bin/time -f "%U %S %e" -o "$WORK/evaluate.time" nice -n 10 "$PY" \
  experiments/bahdanau_fig2/evaluate.py --workdirs "$WORK" \
  --models rnn_none,rnn_bahdanau,rnn_general,transformer --splits validation,test
