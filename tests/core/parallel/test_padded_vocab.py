"""Padded vocabulary rows never count: a GPT-2 loaded from a Hugging Face directory at a vocabulary that
128 × TP does not divide (317, and GPT-2's own 50,257) trains to the same losses and gradients under TP 1, 2
and 4 as in one process — full fine-tuning and LoRA — although every layout pads differently and the
padded rows hold large values (:mod:`tests.core.parallel.vocab_workers`). One spawned group of 4 ranks runs
every layout in turn."""
import pytest
import torch

from mwb.core.models.transformer import padded_vocab_size
from tests.core.parallel.vocab_workers import loaded_run
from tests.helpers.compare import assert_losses_match
from tests.helpers.distributed import run_ranks
from tests.helpers.needs import needs

pytestmark = needs("transformers")

LAYOUTS = [(1, 0), (2, 0), (4, 0), (1, 4), (2, 4), (4, 4)]


def hf_gpt2_dir(path, vocab: int) -> str:
    """A GPT-2 directory of random weights, built offline from a ``GPT2Config``."""
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=32, n_embd=16, n_layer=2, n_head=4,
                                       bos_token_id=0, eos_token_id=0))
    model.save_pretrained(str(path))
    return str(path)


@pytest.fixture(scope="module", params=[317, 50257])
def runs(request, tmp_path_factory):
    vocab = request.param
    hf_dir = hf_gpt2_dir(tmp_path_factory.mktemp(f"gpt2_{vocab}"), vocab)
    reference = loaded_run(0, 1, hf_dir, [(1, 0), (1, 4)])
    spawned = run_ranks(loaded_run, 4, hf_dir, LAYOUTS, timeout_s=600)
    return vocab, hf_dir, reference, spawned


def test_every_layout_is_padded_differently(runs):
    vocab, _, reference, spawned = runs
    for i, (tp, _) in enumerate(LAYOUTS):
        want = padded_vocab_size(vocab, 128, tp)
        assert spawned[0][i]["padded_vocab"] == want
        # padded rows of the embedding and the head (GPT-2 ties them: one tensor), over the TP ranks
        assert sum(spawned[r][i]["padded_rows"] for r in range(tp)) == want - vocab
    assert reference[0]["padded_rows"] == padded_vocab_size(vocab, 128, 1) - vocab


@pytest.mark.parametrize("index", range(len(LAYOUTS)), ids=[f"tp{t}_lora{r}" for t, r in LAYOUTS])
def test_tp_equals_one_process(runs, index):
    vocab, _, reference, spawned = runs
    tp, lora = LAYOUTS[index]
    ref = reference[1 if lora else 0]
    got = spawned[0][index]
    name = f"vocab {vocab}, tp {tp}, lora {lora}"
    assert_losses_match(name, got["losses"], ref["losses"], steps=2)
    grads = {}
    for r in range(4):
        grads.update(spawned[r][index]["grads"])
    assert set(grads) == set(ref["grads"])
    for k, want in ref["grads"].items():
        torch.testing.assert_close(grads[k], want, rtol=1e-4, atol=1e-6, msg=f"{name}: gradient of {k}")


def test_loss_and_logits_are_transformers(runs):
    """The loaded one-process model, its padded rows filled with large values, gives transformers' loss
    (the fused output-layer cross-entropy and the blocked one) and, through the harness's LanguageModel,
    transformers' log-probabilities over the true vocabulary; greedy decoding never picks a padded id."""
    from transformers import GPT2LMHeadModel
    from mwb.core.compose import load_full_model
    from mwb.evaluation.lm import LanguageModel
    from tests.core.parallel.vocab_workers import fill_padded_rows
    vocab, hf_dir, _, _ = runs
    _, model, _ = load_full_model(hf_dir)
    assert fill_padded_rows(model, vocab) == padded_vocab_size(vocab, 128, 1) - vocab
    model.eval()
    hf = GPT2LMHeadModel.from_pretrained(hf_dir).eval()
    tokens = torch.randint(0, vocab, (2, 10), generator=torch.Generator().manual_seed(1))
    tokens[0, 3:6] = vocab - 1  # the last real id, next to the padding
    with torch.no_grad():
        want_logits = hf(tokens).logits.double()
        want = torch.nn.functional.cross_entropy(want_logits[:, :-1].reshape(-1, vocab), tokens[:, 1:].reshape(-1),
                                                 reduction="sum")
        total, count = model(tokens=tokens[:, :-1], labels=tokens[:, 1:])
        assert int(count) == 18 and float(total) == pytest.approx(float(want), rel=1e-5)
        blocked = model.loss_fn.token_losses(model(tokens=tokens[:, :-1]), tokens[:, 1:]).sum()
        assert float(blocked) == pytest.approx(float(want), rel=1e-5)
        lm = LanguageModel(model, tokenizer=None)
        logp = lm.log_probs(tokens)
        assert logp.shape == (2, 10, vocab)
        torch.testing.assert_close(logp.double(), torch.log_softmax(want_logits, -1), rtol=1e-4, atol=1e-4)
        assert int(lm.logits(tokens).argmax(-1).max()) < vocab
