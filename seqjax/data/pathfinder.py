"""Pathfinder and Path-X: a seeded generator of LRA's contour images (the TFDS builders that
store them are in `seqjax.data.pathfinder_data`).

The task (Linsley et al. 2018, "Learning long-range spatial dependencies with horizontal
gated-recurrent units", §3; as used by LRA, Tay et al. 2020 §2.2.5): an image holds two
small discs (markers) and several dashed curved contours; label 1 when one contour connects
the two markers, 0 when they lie on different contours. As a sequence task each 8-bit pixel
is one token (Pathfinder: 32x32 = 1,024 tokens; Path-X: 128x128 = 16,384).

The generator (written for seqjax; Linsley et al.'s `snakes2` script is not used):

- a contour of `L` dashes ("paddles"): dash `j` is a straight segment of `paddle_length`
  pixels from node `P_j` in direction `theta_j`; the next node is `P_{j+1} = P_j +
  (paddle_length + paddle_gap) * (cos theta_j, sin theta_j)`, so consecutive dashes are
  separated by a gap of `paddle_gap` pixels; `theta_{j+1} = theta_j + u_j * max_turn`, `u_j`
  uniform in [-1, 1] (bounded curvature change, Linsley's "continuity"); a walk about to
  leave the frame or run into a placed contour turns away instead (`_walks`);
- every image holds two target contours A and B of `contour_length` dashes (the difficulty:
  LRA's Pathfinder and Path-X both use 14, the "hard" `curv_contour_length_14` set; 9 and 6
  are the intermediate and easy ones), then up to `num_distractors` distractor contours of
  `distractor_length` dashes (LRA: `contour_length // 3` and `20 // distractor_length`);
- the scene does not depend on the label: positives get markers on both ends of A,
  negatives one on an end of A and one on an end of B. Both classes thus hold the same
  contours and two markers, so pixel counts do not tell them apart (the task's point);
- placement by rejection: each contour takes the first of its candidate random walks that
  stays inside the frame and keeps a clearance from every contour placed before, such that
  after dilating the image's non-zero pixels by `PathfinderSpec.dilation` (the least that
  joins the dashes of a contour) each contour is an 8-connected component apart from all
  others (`markers_connected` checks this on the final images: it is what makes the labels
  right). An image whose A or B cannot be placed is
  drawn again from the same per-image stream; a distractor that cannot be placed is left out
  (the same for both classes);
- anti-aliasing: drawn on a grid `supersample` times finer, each pixel the covered share,
  `round(255 * coverage)`; black background.

Each image depends only on `(seed, split, index)` (its own `numpy` generator), so chunks,
processes and order do not change the data. Labels are exactly balanced per split (a seeded
permutation of `n // 2` zeros and `n - n // 2` ones).

Differences from the LRA release (Linsley's script with LRA's parameters, see the LRA
repository's `lra_benchmarks/data/pathfinder.py`): our dashes are plain anti-aliased
rectangles at one contrast (theirs are rendered paddles with a contrast parameter), the
markers are discs at the contours' ends, the clearance between contours is exact (their
contours may pass closer), and our walks turn back from the frame's edge (theirs are
rejected); the turn limit is ours (60 degrees per dash at 32x32, 30 at 128x128: LRA's
"continuity" 1.0 and 1.8 are in the script's own units). The other geometry parameters
(`PRESETS`) follow LRA's: dash 2 px, gap 1 px, marker radius 1.5 px, 14 dashes, 5
distractors of 4 dashes at 32x32; at 128x128 gaps of 2.5 px (LRA: 2 or 3), dash width 1.5,
marker radius 3, 7 distractors (LRA: 35 / (14 / 3)), and dashes of 5 px (not in LRA's list
of changed parameters; Linsley's default is our guess).

Legend: N images in a chunk, K candidate walks, L dashes of a contour, M centre-line
samples of a contour, S image side, s = S * supersample.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math

import numpy as np
from scipy import ndimage

from seqjax.data.sources import DataError

GENERATOR_VERSION = "1.0.0"  # bump when the images for the same parameters change
SPLITS = ("train", "validation", "test")
NUM_CLASSES = 2
VOCAB_SIZE = 256  # 8-bit pixels, one token each
CONTOUR_LENGTHS = {"easy": 6, "intermediate": 9, "hard": 14}  # Linsley's three data sets


@dataclasses.dataclass(frozen=True)
class PathfinderSpec:
    """Parameters of one Pathfinder data set (lengths in pixels of the final image).

    Attributes:
      size: S, the image side (32 Pathfinder, 128 Path-X).
      contour_length: dashes of each target contour (the difficulty: 6, 9 or 14).
      paddle_length, paddle_gap, thickness: a dash's length, the gap to the next dash, and
        its width.
      marker_radius: the markers' radius.
      distractor_length: dashes of a distractor contour.
      num_distractors: distractor contours tried per image.
      max_turn_deg: largest change of direction between two dashes (degrees).
      supersample: anti-aliasing factor.
      candidates: random walks tried per distractor before leaving it out.
      target_candidates: random walks tried per target contour (A, B) before the image is
        drawn again.
      seed, train_size, validation_size, test_size: the data set.
    """

    size: int = 32
    contour_length: int = 14
    paddle_length: float = 2.0
    paddle_gap: float = 1.0
    thickness: float = 0.75
    marker_radius: float = 1.5
    distractor_length: int = 4
    num_distractors: int = 5
    max_turn_deg: float = 60.0
    supersample: int = 4
    candidates: int = 16
    target_candidates: int = 32
    seed: int = 0
    train_size: int = 160_000
    validation_size: int = 20_000
    test_size: int = 20_000

    def geometry(self) -> dict:
        """The fields that shape the images (not the seed or the split sizes)."""
        out = dataclasses.asdict(self)
        for k in ("seed", "train_size", "validation_size", "test_size"):
            out.pop(k)
        return out

    @property
    def name(self) -> str:
        """The builder config name: side, difficulty, seed, sizes and a hash of the geometry."""
        h = hashlib.sha256(json.dumps(self.geometry(), sort_keys=True).encode()).hexdigest()
        return (
            f"s{self.size}_len{self.contour_length}_seed{self.seed}_"
            f"{self.train_size}_{self.validation_size}_{self.test_size}_{h[:8]}"
        )

    def split_size(self, split: str) -> int:
        return {"train": self.train_size, "validation": self.validation_size,
                "test": self.test_size}[split]  # fmt: skip

    @property
    def dilation(self) -> int:
        """r: the square dilation (pixels) that joins the dashes of one contour.

        Two points `g` apart lie in pixels at most `ceil(g)` apart (Chebyshev), and the pixel
        holding a dash's end is non-zero; dilating both by `r` makes them 8-adjacent when
        `2 r + 1 >= ceil(g)` (so r = 0 for LRA's 1-pixel gaps at 32x32).
        """
        return math.ceil((math.ceil(self.paddle_gap) - 1) / 2)


# LRA's parameters (lra_benchmarks/data/pathfinder.py: Pathfinder32, Pathfinder128) where
# they map onto ours; LRA's splits are 80/10/10 % of 200,000 images per difficulty.
PRESETS = {
    "pathfinder32": PathfinderSpec(),
    "pathx": PathfinderSpec(
        size=128, paddle_length=5.0, paddle_gap=2.5, thickness=1.5, marker_radius=3.0,
        distractor_length=4, num_distractors=7, max_turn_deg=30.0, supersample=2,
    ),
}  # fmt: skip


def split_labels(spec: PathfinderSpec, split: str) -> np.ndarray:
    """Labels `[n]` of a split: exactly balanced, in a seeded order."""
    n = spec.split_size(split)
    labels = (np.arange(n) >= n // 2).astype(np.int64)
    return np.random.default_rng([spec.seed, SPLITS.index(split), 7]).permutation(labels)


def _walks(
    u_NKX: np.ndarray,
    spec: PathfinderSpec,
    margin: float,
    zone_NSS: np.ndarray,
    start_zone_NSS: np.ndarray,
):
    """Random walks from uniforms `u [N, K, L + 2]`: nodes `P [N, K, L, 2]` (x, y), unit
    directions `D [N, K, L, 2]` and the contour's far end `E [N, K, 2]`.

    A walk starts at a uniform point of the pixels inside `margin` and outside `start_zone`
    (uniform in the frame if there is none) with a uniform direction and turns by
    `u * max_turn` (u uniform in [-1, 1]) after each dash. Where the node one or two steps
    ahead would leave the frame or enter `zone` (around contours placed before), it turns
    instead towards the frame's centre, else by +-max_turn, +-max_turn / 2 or 0 (the first
    that is free), so that long contours fit in small frames with bounded curvature.
    """
    S, max_turn = spec.size, np.deg2rad(spec.max_turn_deg)
    step = spec.paddle_length + spec.paddle_gap
    lo, hi = margin, S - margin

    img_NK = np.broadcast_to(np.arange(len(u_NKX))[:, None], u_NKX.shape[:2])

    def free(x_n2, theta_n, img_n):
        """Whether the nodes ahead of walkers (flat `[n]`) stay in the frame, out of `zone`."""
        d_n2 = np.stack([np.cos(theta_n), np.sin(theta_n)], -1)
        ok = np.ones(theta_n.shape, bool)
        for ahead in (0.5 * step, step, 1.5 * step, 2 * step):
            a = x_n2 + ahead * d_n2
            ok &= np.all((a >= lo) & (a <= hi), axis=-1)
            ij = np.clip(a.astype(np.int64), 0, S - 1)
            ok &= ~zone_NSS[img_n, ij[..., 1], ij[..., 0]]
        return ok

    x_NK2 = lo + u_NKX[..., :2] * (hi - lo)
    pix = np.arange(S)
    ok_SS = ((pix >= np.ceil(lo)) & (pix + 1 <= np.floor(hi)))[:, None]
    allowed_NP = (~start_zone_NSS & ok_SS & ok_SS.T).reshape(len(u_NKX), -1)
    count_N = allowed_NP.sum(-1)
    pick = u_NKX[..., 0] * count_N[:, None]  # [N, K]: the pick-th allowed pixel
    cum_NP = np.cumsum(allowed_NP, -1)
    flat = (cum_NP[:, None, :] <= np.floor(pick)[..., None]).sum(-1)  # [N, K]
    corner = np.stack([flat % S, flat // S], -1) + np.stack([u_NKX[..., 1], pick % 1], -1)
    x_NK2 = np.where((count_N > 0)[:, None, None], corner, x_NK2)
    theta_NK = 2 * np.pi * u_NKX[..., 2]
    nodes, dirs = [], []
    for j in range(u_NKX.shape[-1] - 2):
        prev = theta_NK
        if j:
            theta_NK = prev + max_turn * (2 * u_NKX[..., 2 + j] - 1)
        phi_NK = np.arctan2(S / 2 - x_NK2[..., 1], S / 2 - x_NK2[..., 0])
        toward = np.angle(np.exp(1j * (phi_NK - prev)))  # wrapped to (-pi, pi]
        options = [prev + np.clip(toward, -max_turn, max_turn) if j else phi_NK]
        options += [prev + f * max_turn for f in (1, -1, 0.5, -0.5, 0)] if j else []
        w = np.flatnonzero(~free(x_NK2.reshape(-1, 2), theta_NK.ravel(), img_NK.ravel()))
        theta_NK = theta_NK.copy()
        for alt in options:  # only the blocked walkers try the alternatives, in order
            if not len(w):
                break
            alt_w = np.broadcast_to(alt, theta_NK.shape).ravel()[w]
            take = free(x_NK2.reshape(-1, 2)[w], alt_w, img_NK.ravel()[w])
            theta_NK.ravel()[w[take]] = alt_w[take]
            w = w[~take]
        d_NK2 = np.stack([np.cos(theta_NK), np.sin(theta_NK)], -1)
        nodes.append(x_NK2)
        dirs.append(d_NK2)
        x_NK2 = x_NK2 + step * d_NK2
    P_NKL2, D_NKL2 = np.stack(nodes, 2), np.stack(dirs, 2)
    E_NK2 = P_NKL2[:, :, -1] + spec.paddle_length * D_NKL2[:, :, -1]
    return P_NKL2, D_NKL2, E_NK2


def _centre_line(P, D, spec: PathfinderSpec, spacing: float = 0.5):
    """Points every `spacing` px along dashes and gaps: `[..., M, 2]` (last dash: no gap)."""
    step = spec.paddle_length + spec.paddle_gap
    t = np.arange(0.0, step, spacing)
    Q = P[..., :, None, :] + t[:, None] * D[..., :, None, :]  # [..., L, m, 2]
    keep = np.ones(Q.shape[-3:-1], bool)
    keep[-1] = t <= spec.paddle_length  # the last dash ends the contour
    return Q[..., keep, :]


def _lookup(mask_NSS: np.ndarray, pts, lo: float) -> np.ndarray:
    """Per point `[N, K, M]`: inside `[lo, S - lo]` and not in `mask` (True = free)."""
    S = mask_NSS.shape[-1]
    inside = np.all((pts >= lo) & (pts <= S - lo), axis=-1)
    ij = np.clip(np.floor(pts).astype(np.int64), 0, S - 1)
    n = np.arange(len(mask_NSS)).reshape((-1,) + (1,) * (pts.ndim - 2))
    return inside & ~mask_NSS[n, ij[..., 1], ij[..., 0]]


def _splat(buf_Nss: np.ndarray, rows: np.ndarray, pts: np.ndarray, ss: int) -> None:
    """Sets the fine cells holding `pts [n, ..., 2]` (image px) of images `rows [n]`."""
    s = buf_Nss.shape[-1]
    ij = np.clip(np.floor(pts * ss).astype(np.int64), 0, s - 1)
    r = np.broadcast_to(rows.reshape((-1,) + (1,) * (pts.ndim - 2)), ij.shape[:-1])
    buf_Nss[r, ij[..., 1], ij[..., 0]] = True


def _dash_points(P, D, spec: PathfinderSpec):
    """Fine sample points covering each dash rectangle: `[n, L * a * b, 2]`."""
    ss = spec.supersample
    h = 0.5 / ss  # half a fine cell: no fine cell inside the rectangle is missed
    u = np.linspace(0, spec.paddle_length, int(np.ceil(spec.paddle_length / h)) + 1)
    w = spec.thickness / 2
    v = np.linspace(-w, w, int(np.ceil(2 * w / h)) + 1)
    normal = np.stack([-D[..., 1], D[..., 0]], axis=-1)
    pts = (P[..., :, None, None, :] + u[:, None, None] * D[..., :, None, None, :]
           + v[None, :, None] * normal[..., :, None, None, :])  # fmt: skip
    return pts.reshape(len(P), -1, 2)


def _disc_points(C, spec: PathfinderSpec):
    """Fine cell centres within `marker_radius` of centres `C [n, c, 2]`: `[n, c, q, 2]`."""
    ss, r = spec.supersample, spec.marker_radius
    k = np.arange(-math.ceil(r * ss) - 1, math.ceil(r * ss) + 2)
    grid = np.stack(np.meshgrid(k, k), -1).reshape(-1, 2)  # fine-cell offsets
    cell = (np.floor(C * ss)[..., None, :] + grid + 0.5) / ss  # [n, c, q, 2] cell centres
    inside = np.sum((cell - C[..., None, :]) ** 2, -1) <= r * r
    return np.where(inside[..., None], cell, C[..., None, :])  # outside: the centre again


def _scene(u_targets: np.ndarray, u_distractors: np.ndarray, spec: PathfinderSpec):
    """Places contours A, B (uniforms `[N, 2, K_target, contour_length + 2]`) and the
    distractors (`[N, num_distractors, K, distractor_length + 2]`) in `N` images.

    Returns `(ok [N], dashes_Nss, ends [N, 2 contours, 2 ends, 2])`: whether A and B were
    placed, the fine mask of every placed dash, and the end points of A and B.
    """
    N, S, ss = len(u_targets), spec.size, spec.supersample
    r, m = spec.dilation, spec.marker_radius
    fine = 1.0 / ss
    c_body = math.ceil(spec.thickness / 2 + 0.25 + fine)  # ink of a sample's pixel reaches
    c_mark = math.ceil(m + fine)
    lo_body = spec.thickness / 2 + 0.5
    lo_mark = m + 0.5
    ink_NSS = np.zeros((N, S, S), bool)  # pixels touched by what was placed (markers reserved)
    dashes = np.zeros((N, S * ss, S * ss), bool)
    ok = np.ones(N, bool)
    ends = np.zeros((N, 2, 2, 2))
    rows = np.arange(N)
    walks = [u_targets[:, c] for c in range(2)]
    walks += [u_distractors[:, c] for c in range(spec.num_distractors)]
    for c, u_NKX in enumerate(walks):
        target = c < 2
        # Free of the clearance zone around all placed ink (Chebyshev 2r + 2 between inks).
        zone_body = ndimage.maximum_filter(ink_NSS, size=(1,) + (2 * (2 * r + 1 + c_body) + 1,) * 2)
        zone_mark = ndimage.maximum_filter(ink_NSS, size=(1,) + (2 * (2 * r + 1 + c_mark) + 1,) * 2)
        start = zone_mark if target else zone_body
        P, D, E = _walks(u_NKX, spec, lo_mark if target else lo_body, zone_body, start)
        Q = _centre_line(P, D, spec)  # [N, K, M, 2]
        free = _lookup(zone_body, Q, lo_body).all(-1)
        if target:  # the reserved marker discs at both ends
            tips = np.stack([P[:, :, 0], E], axis=2)  # [N, K, 2, 2]
            free &= _lookup(zone_mark, tips, lo_mark).all(-1)
        found = free.any(1) & ok  # distractors only where A and B are placed
        k = free.argmax(1)
        if target:
            ok &= found
        sel = rows[found]
        if not len(sel):
            continue
        Pk, Dk = P[sel, k[sel]], D[sel, k[sel]]
        pts = _dash_points(Pk, Dk, spec)
        _splat(dashes, sel, pts, ss)
        _splat(ink_NSS, sel, pts, 1)  # the pixel of a fine cell is the pixel of its points
        if target:
            tips_k = np.stack([Pk[:, 0], E[sel, k[sel]]], axis=1)  # [n, 2, 2]
            ends[sel, c] = tips_k
            _splat(ink_NSS, sel, _disc_points(tips_k, spec), 1)
    return ok, dashes, ends


def generate(spec: PathfinderSpec, split: str, start: int = 0, stop: int | None = None,
             chunk: int | None = None):  # fmt: skip
    """Images `start..stop-1` of a split.

    Returns:
      `(images uint8 [n, S, S], labels int64 [n], markers float [n, 2, 2])`: the markers'
      centres (x, y) in pixels.

    Raises:
      DataError: the parameters leave no room for two target contours.
    """
    stop = spec.split_size(split) if stop is None else stop
    labels_all = split_labels(spec, split)
    S, ss = spec.size, spec.supersample
    chunk = chunk or max(8, (1 << 22) // (S * ss) ** 2)
    shape_t = (2, spec.target_candidates, spec.contour_length + 2)
    shape_d = (spec.num_distractors, spec.candidates, spec.distractor_length + 2)
    out_x, out_m = [], []
    for c0 in range(start, stop, chunk):
        idx = np.arange(c0, min(stop, c0 + chunk))
        rngs = [np.random.default_rng([spec.seed, SPLITS.index(split), int(i)]) for i in idx]
        images = np.zeros((len(idx), S, S), np.uint8)
        markers = np.zeros((len(idx), 2, 2))
        todo = np.arange(len(idx))
        for _attempt in range(50):
            u_t = np.stack([rngs[i].random(shape_t) for i in todo])
            u_d = np.stack([rngs[i].random(shape_d) for i in todo])
            flip = np.stack([rngs[i].random(2) < 0.5 for i in todo])  # which ends get markers
            ok, dashes, ends = _scene(u_t, u_d, spec)
            done = todo[ok]
            lab = labels_all[idx[done]]
            e0, e1 = flip[ok, 0].astype(int), flip[ok, 1].astype(int)
            n = np.arange(len(done))
            first = ends[ok][n, 0, e0]  # an end of A
            second = np.where(lab[:, None] == 1, ends[ok][n, 0, 1 - e0], ends[ok][n, 1, e1])
            mk = np.stack([first, second], axis=1)
            fine = dashes[ok]
            _splat(fine, n, _disc_points(mk, spec), ss)
            cover = fine.reshape(len(done), S, ss, S, ss).mean(axis=(2, 4))
            images[done] = np.rint(255 * cover).astype(np.uint8)
            markers[done] = mk
            todo = todo[~ok]
            if not len(todo):
                break
        else:
            raise DataError(
                f"pathfinder: no room for two contours of {spec.contour_length} dashes in "
                f"{S}x{S} images after 50 tries; shorten config.data.pathfinder_contour_length."
            )
        out_x.append(images)
        out_m.append(markers)
    if not out_x:
        return np.zeros((0, S, S), np.uint8), labels_all[:0], np.zeros((0, 2, 2))
    return np.concatenate(out_x), labels_all[start:stop], np.concatenate(out_m)


def markers_connected(image_SS: np.ndarray, markers_22: np.ndarray, dilation: int) -> bool:
    """Whether the two markers lie in one 8-connected component of the image's non-zero
    pixels dilated by a `(2 * dilation + 1)` square (the dashes of a contour join, separate
    contours stay apart): the ground truth a label must match."""
    on = ndimage.binary_dilation(image_SS > 0, np.ones((2 * dilation + 1,) * 2, bool))
    comp, _ = ndimage.label(on, np.ones((3, 3), bool))
    (x0, y0), (x1, y1) = np.floor(markers_22).astype(int)
    return bool(comp[y0, x0] and comp[y0, x0] == comp[y1, x1])
