"""The sentences of chapter 5 that state a comparison, as claims checked against the stored
measurements (``results/norms/real_paper.json``). The chapter prints them and asserts them;
``tests/norms/test_real.py`` checks them, so a stored file that no longer supports a
sentence fails a test."""

from __future__ import annotations

import numpy as np

from lncourse.norms.hidden import chance_abs_cos

__all__ = ["claims"]


def claims(stored: dict) -> dict[str, bool]:
    """Each claim of the chapter's prose -> whether the stored measurements support it."""
    smol, mini = stored["models"]["smollm2"], stored["models"]["minilm"]
    s = smol["summary"]
    n = len(smol["names"])
    below_random = np.array(s["abs_cos_ones"]["high"]) < np.array(s["abs_cos_random"]["mean"])
    norm = s["norm"]["mean"]
    rest = max(s["massive_rest"]["mean"])
    strongest = int(np.argmin(s["saturation"]["mean"]))
    rest_below = np.array(s["saturation_rest"]["high"]) < 1
    return {
        "SmolLM2's h is closer to ⟂ 1 than to ⟂ a random direction at most norms":
            bool(below_random.sum() > n / 2),
        "SmolLM2's median |cos(h, 1)| is below the isotropic chance level":
            bool(np.median(s["abs_cos_ones"]["mean"]) < chance_abs_cos(smol["d"])),
        "the median fraction of ||h||² along 1 is below 0.1%":
            bool(np.median(s["cos2_ones"]["mean"]) < 1e-3),
        "SmolLM2's residual stream is longer at its last norm than at its first":
            bool(norm[-1] > norm[0]),
        "token 0's largest entry exceeds every other token's by more than 10 times":
            bool(max(s["massive_token0"]["mean"]) > 10 * rest),
        "SmolLM2's median slope ratio is below 1 (an S-shape) and MiniLM's is nearer 1":
            bool(np.median(s["saturation"]["mean"]) < 1
                 and abs(np.median(mini["summary"]["saturation"]["mean"]) - 1)
                 < abs(np.median(s["saturation"]["mean"]) - 1)),
        "SmolLM2's strongest bend is token 0's: without it the ratio there is above 0.8":
            bool(s["saturation_rest"]["mean"][strongest] > 0.8),
        "without token 0 a milder bend remains: the interval is below 1 at most norms":
            bool(rest_below.sum() > n / 2),
    }
