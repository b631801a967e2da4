"""Chapter 2's stored benchmarks: what can be recomputed is (timings cannot be replayed,
the claims built on them can be checked against their own records)."""

import numpy as np
import pytest
import torch

from lncourse.results import RESULTS_DIR, load_result
from lncourse.selectability.exact import selectability_batch
from lncourse.evidence.selectability.fused import fused_losses, scaling_flags, stack_models
from lncourse.selectability.lm import (KeysLMConfig, held_out_contexts, layer_vectors,
                                       load_model, tokenized)

EXACT = RESULTS_DIR / "selectability" / "exact_benchmark.json"
TRAINER = sorted((RESULTS_DIR / "selectability").glob("trainer_benchmark*.json"))


@pytest.mark.skipif(not EXACT.exists(), reason="no stored benchmark")
def test_stored_exact_benchmark_recomputes_its_first_set():
    """The first set's unselectable fraction comes out of today's code on the stored
    model; the verdicts agreed; the speed-up is the ratio of the stored seconds."""
    stored = load_result(EXACT)
    first = stored["sets"][0]
    assert stored["verdicts_differ"] == 0 and stored["keys"] == 1024 * len(stored["sets"])
    for name, total in stored["seconds"].items():
        assert total == pytest.approx(sum(stored["seconds_per_set"][name]))
    assert stored["speedup"] == pytest.approx(stored["seconds"]["previous"]
                                              / stored["seconds"]["today"])
    paper = load_result(RESULTS_DIR / "selectability" / "lm_paper.json")
    _, _, test_ids = tokenized(KeysLMConfig.paper())
    ctx = held_out_contexts(test_ids, KeysLMConfig(contexts=stored["config"]["contexts"],
                                                   track_contexts=0))
    vec = layer_vectors(load_model(paper, first["model"]), ctx)      # as the benchmark
    c = first["context"]
    got = selectability_batch(vec[first["vectors"]][first["layer"]][c:c + 1])
    assert float(got.unselectable_fraction[0]) == first["fraction"]


@pytest.mark.parametrize("path", TRAINER, ids=[p.stem for p in TRAINER])
def test_stored_trainer_benchmarks_replay_their_first_losses(path):
    """Each stored trainer benchmark (one thread, two threads): the first-step losses of
    all six models come out of today's fused code; the speed-ups are the ratios of the
    stored seconds; the losses agreed."""
    from lncourse.evidence.selectability.seeds import SeedsConfig, models_of
    from lncourse.text import sample_batch
    stored = load_result(path)
    cfg = SeedsConfig.table1()
    assert stored["config"]["seeds"] == list(cfg.seeds)
    tok, train_ids, _ = tokenized(cfg.lm)
    models, seeds, _ = models_of(cfg, tok.vocab_size)
    gens = {s: torch.Generator().manual_seed(s) for s in dict.fromkeys(seeds)}
    drawn = {s: sample_batch(train_ids, cfg.lm.batch_size, cfg.lm.block_size, g)
             for s, g in gens.items()}
    x = torch.stack([drawn[s][0] for s in seeds])
    y = torch.stack([drawn[s][1] for s in seeds])
    with torch.no_grad():
        first = fused_losses(stack_models(models), scaling_flags(models), x, y, 4)
    base = stored["methods"]["train_lm"]["seconds_per_model_step"]
    for name, method in stored["methods"].items():
        got = [row[0] for row in method["losses"]]
        np.testing.assert_allclose(got, first.tolist()[:len(got)], rtol=1e-5)
        if name != "train_lm":
            assert method["max_loss_diff_to_train_lm"] < 1e-5
            for k in ("cpu", "wall"):
                assert method["speedup_over_train_lm"][k] == pytest.approx(
                    base[k] / method["seconds_per_model_step"][k])
