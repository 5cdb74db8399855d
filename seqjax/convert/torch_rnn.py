"""PyTorch's recurrent layers (``torch.nn.LSTM`` / ``GRU`` / ``RNN``) onto Flax's cells, as
``seqjax.models.rnn.RecurrentStack`` names them (``cell_l{k}`` and ``cell_l{k}_reverse``,
PyTorch's own suffixes).

PyTorch stacks the gates of a layer in one matrix, ``weight_ih_l{k}`` ``[G H, I]`` and
``weight_hh_l{k}`` ``[G H, H]``, in the order i, f, g, o (LSTM) or r, z, n (GRU), with two
biases ``bias_ih`` and ``bias_hh``. Flax's cells keep one ``Dense`` per gate and side
(``[in, out]`` kernels) and a single bias where the two sides are summed:

* ``OptimizedLSTMCell``: ``i{i,f,g,o}`` kernels without bias, ``h{i,f,g,o}`` kernels with
  the bias ``b_ih + b_hh`` of that gate;
* ``GRUCell``: ``ir``/``iz`` with ``b_ir + b_hr`` / ``b_iz + b_hz``, ``hr``/``hz`` without;
  ``in`` with ``b_in`` and ``hn`` with ``b_hn`` (inside ``r ⊙ (W_hn h + b_hn)``, so these
  two are not summed);
* ``SimpleCell`` (Elman, tanh): ``i`` with ``b_ih + b_hh``, ``h`` without.

Legend: G gates, H hidden width, I input width.
"""

from __future__ import annotations

import numpy as np

GATES = {"lstm": "ifgo", "gru": "rzn", "elman": ""}


def _get(tensors, name):
    value = tensors.get(name)
    return None if value is None else np.asarray(value, np.float32)


def cell_from_torch(tensors, cell: str, suffix: str, *, projection: bool = False) -> dict:
    """The Flax parameters of one cell from a PyTorch state dict (numpy or torch arrays;
    ``suffix`` such as ``_l0`` or ``_l1_reverse``). A layer without biases gets zeros.
    ``projection``: an LSTM with ``proj_size`` onto ``seqjax.models.elmo.ProjectedLSTMCell``
    (``weight_hr`` ``[P, H]`` -> ``hr``)."""
    if cell not in GATES:
        raise ValueError(f"cell={cell!r} is not one of {', '.join(GATES)}")
    w_ih, w_hh = _get(tensors, f"weight_ih{suffix}"), _get(tensors, f"weight_hh{suffix}")
    if w_ih is None or w_hh is None:
        raise ValueError(f"no weight_ih{suffix}/weight_hh{suffix} among the tensors")
    w_hr = _get(tensors, f"weight_hr{suffix}")
    if (w_hr is not None) != projection:
        raise ValueError(
            f"weight_hr{suffix}: a projected LSTM (proj_size) maps onto ProjectedLSTMCell "
            "(projection=True), not onto Flax's cells" if w_hr is not None else
            f"projection=True but no weight_hr{suffix} among the tensors"
        )  # fmt: skip
    rows = w_ih.shape[0]
    b_ih = _get(tensors, f"bias_ih{suffix}")
    b_hh = _get(tensors, f"bias_hh{suffix}")
    b_ih = np.zeros(rows, np.float32) if b_ih is None else b_ih
    b_hh = np.zeros(rows, np.float32) if b_hh is None else b_hh
    if cell == "elman":
        return {"i": {"kernel": w_ih.T, "bias": b_ih + b_hh}, "h": {"kernel": w_hh.T}}
    gates = GATES[cell]
    wi, wh = np.split(w_ih, len(gates)), np.split(w_hh, len(gates))
    bi, bh = np.split(b_ih, len(gates)), np.split(b_hh, len(gates))
    out = {}
    for k, g in enumerate(gates):
        if cell == "lstm":
            out[f"i{g}"] = {"kernel": wi[k].T}
            out[f"h{g}"] = {"kernel": wh[k].T, "bias": bi[k] + bh[k]}
        elif g == "n":  # (GRU)  # GRU candidate: the hidden side's bias sits inside r ⊙ (...)
            out["in"] = {"kernel": wi[k].T, "bias": bi[k]}
            out["hn"] = {"kernel": wh[k].T, "bias": bh[k]}
        else:
            out[f"i{g}"] = {"kernel": wi[k].T, "bias": bi[k] + bh[k]}
            out[f"h{g}"] = {"kernel": wh[k].T}
    if projection:
        out["hr"] = {"kernel": w_hr.T}
    return out


def stack_from_torch(tensors, cell: str, num_layers: int, bidirectional: bool) -> dict:
    """``RecurrentStack`` parameters from a ``torch.nn.LSTM/GRU/RNN`` state dict."""
    out = {}
    for k in range(num_layers):
        for rev in ("", "_reverse") if bidirectional else ("",):
            out[f"cell_l{k}{rev}"] = cell_from_torch(tensors, cell, f"_l{k}{rev}")
    return out
