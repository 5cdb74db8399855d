"""The three request types of in-context evaluation, answered as lm-evaluation-harness answers
them (Gao et al. 2021/2024, ``lm_eval.api.model.TemplateLM`` and ``HFLM``), by any causal LM.

* ``loglikelihood(context, continuation) -> (sum of log p(continuation tokens), is_greedy)``:
  trailing spaces of the context move to the continuation; the context is its own tokens and
  the continuation the tokens of ``context + continuation`` past the context's count, so a
  continuation that merges with the end of the context is scored by the tokens its text
  has in the whole string (``encode_pair``); an empty context is the prefix token (BOS,
  else EOS). Inputs are ``(context + continuation)[-(L + 1):][:-1]``:
  long contexts lose tokens on the left (L = ``max_length``).
* ``loglikelihood_rolling(text) -> sum of log p``: the document's tokens in disjoint windows
  of L predicted tokens, each window conditioned on the L tokens before it (the first on the
  prefix token; ``rolling_windows``): perplexity with a sliding window.
* ``generate_until(context, {"until", "max_gen_toks", "do_sample", "temperature"}) -> text``:
  greedy (or sampled, seeded) continuation of the context left-truncated to
  ``L - max_gen_toks`` tokens, cut at the first stop string (the EOT token's text included).

Requests are sorted longest first (the harness's order: ``(-len, tokens)``), cut into batches of
``batch_size`` rows, right-padded to a length bucket (a power of two, at most L) so a few shapes
compile, and run on the device mesh with the batch split over its data axes; the answers come
back in the requests' order.

Legend: B batch rows, L padded length, V vocabulary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass
class CausalLM:
    """What the requests need of a model.

    Attributes:
      logits: ``ids int32 [B, L] -> logits [B, L, V]`` (a causal LM: position t sees 0..t).
      encode, decode: the model's tokenizer (``str -> list[int]``, ``list[int] -> str``).
      max_length: L, the longest input.
      prefix_id: the token an empty context stands for (BOS, else EOS).
      eot_id: the end-of-text token (generation stops at it), or None.
      mesh: the device mesh the batches are split over (None: default device).
    """

    logits: Callable
    encode: Callable[[str], list]
    decode: Callable[[list], str]
    max_length: int
    prefix_id: int
    eot_id: int | None = None
    mesh: jax.sharding.Mesh | None = None


def encode_pair(lm: CausalLM, context: str, continuation: str) -> tuple[list, list]:
    """Context and continuation tokens as the harness splits them (module docstring)."""
    if context == "":
        cont = list(lm.encode(continuation))
        if cont and cont[0] == lm.prefix_id:
            return cont[:1], cont[1:]
        return [lm.prefix_id], cont
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole = list(lm.encode(context + continuation))
    ctx = list(lm.encode(context))
    return ctx, whole[len(ctx) :]


def rolling_windows(tokens: list, prefix_id: int, max_len: int) -> list[tuple[list, list]]:
    """Disjoint ``(context, predicted)`` windows covering ``tokens`` once (context length 1,
    the harness's ``get_rolling_token_windows`` + ``make_disjoint_window``)."""
    if not tokens:
        return []
    first = min(max_len, len(tokens))
    windows = [([prefix_id] + tokens[: first - 1], tokens[:first])]
    done = first
    while done < len(tokens):
        n = min(len(tokens) - done, max_len)
        end = done + n
        windows.append((tokens[max(0, end - max_len - 1) : end - 1], tokens[end - n : end]))
        done = end
    return [(ctx[: len(ctx) - (len(pred) - 1)], pred) for ctx, pred in windows]


def bucket(n: int, cap: int) -> int:
    """The padded length of ``n`` tokens: the next power of two (at least 8), at most ``cap``."""
    return min(cap, max(8, 1 << (max(n, 1) - 1).bit_length()))


class Scorer:
    """Answers requests with one model (module docstring); one jitted program per shape."""

    def __init__(self, lm: CausalLM, batch_size: int = 8):
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be >= 1")
        self.lm = lm
        rows = 1
        if lm.mesh is not None:
            rows = lm.mesh.shape.get("data", 1) * lm.mesh.shape.get("fsdp", 1)
        self.batch_size = -(-batch_size // rows) * rows  # a multiple of the data axes
        self._score = jax.jit(_score_fn(lm.logits))
        self._last = jax.jit(_last_logits_fn(lm.logits))

    def _put(self, x):
        if self.lm.mesh is None:
            return jnp.asarray(x)
        from seqjax.models.sharding_rules import batch_sharding

        return jax.device_put(x, batch_sharding(self.lm.mesh))

    # --- loglikelihood -----------------------------------------------------------------

    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[tuple[float, bool]]:
        """``(sum log p, is_greedy)`` of each ``(context, continuation)``."""
        return self.loglikelihood_tokens([encode_pair(self.lm, c, x) for c, x in requests])

    def loglikelihood_tokens(self, pairs: Sequence[tuple[list, list]]) -> list[tuple[float, bool]]:
        """``(sum log p, is_greedy)`` of token pairs ``(context, continuation)``."""
        L = self.lm.max_length
        for ctx, cont in pairs:
            if not ctx or not cont or len(cont) > L:
                raise ValueError(
                    "a loglikelihood request needs a non-empty context and a continuation of "
                    f"1..{L} tokens; got {len(ctx)} and {len(cont)}"
                )
        whole_of = [list(c) + list(x) for c, x in pairs]
        order = sorted(range(len(pairs)), key=lambda i: (-len(whole_of[i]), tuple(whole_of[i])))
        out: list = [None] * len(pairs)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            whole = [(pairs[i][0] + pairs[i][1])[-(L + 1) :] for i in chunk]
            width = bucket(max(len(w) - 1 for w in whole), L)
            ids = np.zeros((self.batch_size, width), np.int32)
            targets = np.zeros((self.batch_size, width), np.int32)
            for r, w in enumerate(whole):
                ids[r, : len(w) - 1], targets[r, : len(w) - 1] = w[:-1], w[1:]
            logp, greedy = jax.device_get(self._score(self._put(ids), self._put(targets)))
            for r, i in enumerate(chunk):
                n, c = len(whole[r]) - 1, len(pairs[i][1])
                span = slice(n - c, n)
                out[i] = (
                    float(np.sum(logp[r, span], dtype=np.float32)),
                    bool(greedy[r, span].all()),
                )
        return out

    # --- loglikelihood_rolling ---------------------------------------------------------

    def loglikelihood_rolling(self, texts: Sequence[str]) -> list[float]:
        """The log-likelihood of each whole text (sliding windows of ``max_length``)."""
        windows, owner = [], []
        for j, text in enumerate(texts):
            ws = rolling_windows(list(self.lm.encode(text)), self.lm.prefix_id, self.lm.max_length)
            windows += ws
            owner += [j] * len(ws)
        totals = [0.0] * len(texts)
        for j, (ll, _) in zip(owner, self.loglikelihood_tokens(windows)):
            totals[j] += ll
        return totals

    # --- generate_until ----------------------------------------------------------------

    def generate_until(self, requests: Sequence[tuple[str, dict]], seed: int = 0) -> list[str]:
        """The continuation of each ``(context, gen_kwargs)`` up to its first stop string.

        ``gen_kwargs``: ``until`` (a string or list; the EOT token's text is added),
        ``max_gen_toks`` (default 256), ``do_sample`` (default False: greedy) and
        ``temperature`` (sampling only)."""
        out: list = [None] * len(requests)
        groups: dict = {}
        for i, (_, kw) in enumerate(requests):
            groups.setdefault(repr(sorted((kw or {}).items())), []).append(i)
        rng = jax.random.key(seed)
        for members in groups.values():
            kw = dict(requests[members[0]][1] or {})
            until = kw.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            if self.lm.eot_id is not None:
                eos = self.lm.decode([self.lm.eot_id])
                until += [eos] if eos not in until else []
            max_gen = int(kw.get("max_gen_toks", 256))
            keep = self.lm.max_length - max_gen
            if keep < 1:
                raise ValueError(
                    f"max_gen_toks={max_gen} must be below the model's max_length="
                    f"{self.lm.max_length}"
                )
            temp = float(kw.get("temperature", 0.0)) if kw.get("do_sample") else 0.0
            encoded = {i: list(self.lm.encode(requests[i][0]))[-keep:] for i in members}
            members = sorted(members, key=lambda i: (-len(encoded[i]), requests[i][0]))
            for start in range(0, len(members), self.batch_size):
                chunk = members[start : start + self.batch_size]
                rng, sub = jax.random.split(rng)
                texts = self._generate([encoded[i] for i in chunk], max_gen, until, temp, sub)
                for i, text in zip(chunk, texts):
                    out[i] = text
        return out

    def _generate(self, prompts, max_gen, until, temperature, rng) -> list[str]:
        n = len(prompts)
        width = bucket(max(len(p) for p in prompts) + max_gen, self.lm.max_length)
        ids = np.zeros((self.batch_size, width), np.int32)
        lengths = np.ones(self.batch_size, np.int32)
        for r, p in enumerate(prompts):
            ids[r, : len(p)], lengths[r] = p, len(p)
        new = [[] for _ in range(n)]
        done = np.zeros(n, bool)
        for _ in range(max_gen):
            logits = np.asarray(jax.device_get(self._last(self._put(ids), self._put(lengths - 1))))
            if temperature > 0:
                rng, sub = jax.random.split(rng)
                nxt = np.asarray(jax.random.categorical(sub, jnp.asarray(logits) / temperature))
            else:
                nxt = logits.argmax(-1)
            for r in range(n):
                if done[r]:
                    continue
                tok = int(nxt[r])
                new[r].append(tok)
                if lengths[r] < width:
                    ids[r, lengths[r]] = tok
                    lengths[r] += 1
                text = self.lm.decode(new[r])
                if tok == self.lm.eot_id or any(s and s in text for s in until):
                    done[r] = True
                elif lengths[r] >= width:
                    done[r] = True
            if done.all():
                break
        texts = []
        for toks in new:
            text = self.lm.decode(toks)
            for stop in until:
                if stop:
                    text = text.split(stop)[0]
            texts.append(text)
        return texts


def _score_fn(logits_fn):
    def score(ids_BL, targets_BL):
        logp_BLV = jax.nn.log_softmax(logits_fn(ids_BL).astype(jnp.float32), axis=-1)
        logp_BL = jnp.take_along_axis(logp_BLV, targets_BL[..., None], axis=-1)[..., 0]
        return logp_BL, jnp.argmax(logp_BLV, axis=-1) == targets_BL

    return score


def _last_logits_fn(logits_fn):
    def last(ids_BL, at_B):
        logits_BLV = logits_fn(ids_BL).astype(jnp.float32)
        return jnp.take_along_axis(logits_BLV, at_B[:, None, None], axis=1)[:, 0]

    return last
