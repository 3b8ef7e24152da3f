"""The lm-eval adapter: scores equal direct computations, rolling windows follow lm-eval's scheme, and
run_lm_eval evaluates local tasks fully offline."""

from __future__ import annotations

import json
import math
import shutil
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from lm_eval.api.instance import Instance
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from torch import nn

from leanlm.errors import ConfigError, DataError
from leanlm.lm_eval.adapter import LeanLMEvalAdapter, run_lm_eval
from leanlm.evaluation.scoring import rolling_windows

TEXTS = ["the cat sat on the mat .", "a dog ran in the park .", "the sun is hot and the sky is blue .",
         "my cat and my dog sat in the sun ."]


class TinyCausalLM(nn.Module):
    """Embedding -> causal convolution (kernel ``kernel``, left-padded) -> vocabulary logits.

    With ``kernel=1`` the prediction at a position depends on its own token only (a bigram model), so
    a text's log-likelihood does not depend on how it is cut into windows.
    """

    def __init__(self, vocab_size: int, kernel: int = 3, max_position: int = 8, d: int = 16):
        super().__init__()
        self.config = SimpleNamespace(max_position=max_position)
        self.kernel = kernel
        self.embed = nn.Embedding(vocab_size, d)
        self.conv = nn.Conv1d(d, d, kernel)
        self.out = nn.Linear(d, vocab_size)

    def forward(self, input_ids, attention_mask=None):
        x = F.pad(self.embed(input_ids).transpose(1, 2), (self.kernel - 1, 0))
        return {"logits": self.out(torch.tanh(self.conv(x)).transpose(1, 2))}


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(TEXTS, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"]))
    return tok


def make_model(tokenizer, kernel=3, max_position=8, seed=0):
    torch.manual_seed(seed)
    return TinyCausalLM(tokenizer.get_vocab_size(), kernel=kernel, max_position=max_position).eval()


def ids(tokenizer, text):
    return tokenizer.encode(text, add_special_tokens=False).ids


def direct_logprob(model, input_ids, targets):
    """log p(targets | input_ids) scored at the last len(targets) positions, and whether all are argmax."""
    with torch.no_grad():
        logits = model(torch.tensor([input_ids]))["logits"][0]
    logp = torch.log_softmax(logits.double(), dim=-1)[-len(targets):]
    total = float(sum(logp[i, t] for i, t in enumerate(targets)))
    greedy = all(int(logits[-len(targets) + i].argmax()) == t for i, t in enumerate(targets))
    return total, greedy


def request(kind, *args):
    return Instance(request_type=kind, doc={}, arguments=args, idx=0)


def test_loglikelihood_equals_direct_computation(tokenizer):
    model = make_model(tokenizer)
    lm = LeanLMEvalAdapter(model, tokenizer, batch_size=2)
    pairs = [("the cat sat", " on the mat"), ("a dog", " ran"), ("the sun is hot and the sky", " is blue .")]
    results = lm.loglikelihood([request("loglikelihood", c, x) for c, x in pairs])
    for (context, continuation), (logprob, greedy) in zip(pairs, results):
        full = ids(tokenizer, context + continuation)
        n = len(ids(tokenizer, continuation))
        expected, expected_greedy = direct_logprob(model, full[:-1], full[-n:])
        assert logprob == pytest.approx(expected, abs=1e-5)
        assert greedy == expected_greedy
    # Batching (sorted longest first, right-padded) does not change any score.
    one_by_one = LeanLMEvalAdapter(model, tokenizer, batch_size=1).loglikelihood(
        [request("loglikelihood", c, x) for c, x in pairs])
    assert [r[0] for r in one_by_one] == pytest.approx([r[0] for r in results], abs=1e-5)


def test_long_context_is_truncated_from_the_left(tokenizer):
    model = make_model(tokenizer, max_position=8)
    lm = LeanLMEvalAdapter(model, tokenizer)
    context, continuation = "my cat and my dog sat in the sun . the cat sat on", " the mat"
    full = ids(tokenizer, context + continuation)
    assert len(full) > 9
    (logprob, _), = lm.loglikelihood([request("loglikelihood", context, continuation)])
    expected, _ = direct_logprob(model, full[-9:-1], full[-2:])  # the last 8 inputs, 2 scored tokens
    assert logprob == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("n_tokens", [1, 5, 8, 9, 17, 24, 31])
@pytest.mark.parametrize("max_length", [1, 4, 8])
def test_rolling_windows_match_lm_eval(n_tokens, max_length):
    tokens = list(range(10, 10 + n_tokens))
    expected = [make_disjoint_window(w) for w in get_rolling_token_windows(tokens, 0, max_length, 1)]
    ours = rolling_windows(tokens, 0, max_length)
    assert [(list(a), list(b)) for a, b in ours] == [(list(a), list(b)) for a, b in expected]
    assert [t for _, cont in ours for t in cont] == tokens  # every token predicted exactly once


def test_rolling_loglikelihood_is_the_sum_over_the_text(tokenizer):
    # A bigram model: each token's probability depends on the previous token only, so the rolling
    # windows' total must equal the sum over the whole text, whatever the window size.
    model = make_model(tokenizer, kernel=1, max_position=8)
    text = " ".join(TEXTS)
    tokens = ids(tokenizer, text)
    assert len(tokens) > 3 * 8
    cls = tokenizer.token_to_id("[CLS]")
    expected, _ = direct_logprob(model, [cls] + tokens[:-1], tokens)
    for max_length in (8, 5):
        lm = LeanLMEvalAdapter(model, tokenizer, batch_size=3, max_length=max_length)
        (total,) = lm.loglikelihood_rolling([request("loglikelihood_rolling", text)])
        assert total == pytest.approx(expected, abs=1e-4)


def test_generate_until_is_refused_with_a_reason(tokenizer):
    lm = LeanLMEvalAdapter(make_model(tokenizer), tokenizer)
    with pytest.raises(ConfigError, match="does not generate"):
        lm.generate_until([request("generate_until", "the cat", {"until": ["."]})])


def write_task(directory, name, rows, output_type):
    """A stand-in task as the tasks stage writes it (only those are evaluated: standin_config)."""
    from leanlm.lm_eval.standins import _write_task

    directory.mkdir(parents=True, exist_ok=True)
    assert _write_task(directory, name, rows, output_type) == directory / f"{name}.yaml"


@pytest.fixture
def offline_datasets(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_datasets")


def test_run_lm_eval_on_local_tasks_offline(tokenizer, tmp_path, offline_datasets):
    model = make_model(tokenizer)
    mc_rows = [{"query": "the cat sat on the", "choices": ["mat", "dog", "sky"], "label": 0},
               {"query": "a dog ran in the", "choices": ["park", "sun"], "label": 0},
               {"query": "the sky is", "choices": ["hot", "blue"], "label": 1}]
    built = tmp_path / "built"
    write_task(built, "leanlm_tiny_choice", mc_rows, "multiple_choice")
    write_task(built, "leanlm_wikitext", [{"page": t} for t in TEXTS], "loglikelihood_rolling")
    # The task directory moves after it was built (as after a DVC pull elsewhere): the data are found beside the YAML.
    moved = tmp_path / "moved"
    shutil.move(built, moved)
    results = run_lm_eval(model, tokenizer, ["leanlm_tiny_choice", "leanlm_wikitext"], str(moved), batch_size=4)

    lm = LeanLMEvalAdapter(model, tokenizer)
    correct = 0
    for row in mc_rows:
        scores = lm.loglikelihood([request("loglikelihood", row["query"], " " + c) for c in row["choices"]])
        correct += max(range(len(scores)), key=lambda i: scores[i][0]) == row["label"]
    assert results["leanlm_tiny_choice"]["acc"] == pytest.approx(correct / len(mc_rows))
    total = sum(lm.loglikelihood_rolling([request("loglikelihood_rolling", t) for t in TEXTS]))
    words = sum(len(t.split()) for t in TEXTS)
    assert results["leanlm_wikitext"]["word_perplexity"] == pytest.approx(math.exp(-total / words), rel=1e-5)


def test_run_lm_eval_names_missing_stand_ins(tokenizer, tmp_path, offline_datasets):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="leanlm_lambada.*missing; run the data stage"):
        run_lm_eval(make_model(tokenizer), tokenizer, ["leanlm_lambada"], str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match="leanlm_lambada.*no stand-in folder"):
        run_lm_eval(make_model(tokenizer), tokenizer, ["leanlm_lambada"], None)
    with pytest.raises(ConfigError, match="no tasks"):
        run_lm_eval(make_model(tokenizer), tokenizer, [], None)
