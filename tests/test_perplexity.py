"""Sliding-window perplexity (§3.4.5, stride 256) against hand computations on a tiny decoder, the
registered ``perplexity`` metric, and the ``lm`` task runner on a scratch project."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from leanlm.errors import ConfigError, DataError
from leanlm.evaluation.metrics import LOWER_IS_BETTER, METRICS, compute, import_metric_modules
from leanlm.evaluation.perplexity import sliding_windows, strided_perplexity
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.decoder import GPT2ForCausalLM

TINY = dict(backbone="gpt2", vocab_size=53, n_layers=2, d_model=32, n_heads=4, head_dim=8, d_ff=64,
            max_position=16, type_vocab_size=0, layer_norm_eps=1e-5, dropout=0.0, attention_dropout=0.0)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return GPT2ForCausalLM(ModelConfig(**TINY)).eval()


@pytest.fixture(scope="module")
def stream():
    return torch.randint(0, 53, (50,), generator=torch.Generator().manual_seed(1))


@torch.no_grad()
def next_token_nll(model, context: torch.Tensor, target: int) -> float:
    """-log p(target | context) from one forward pass over the context alone."""
    logits = model(input_ids=context[None])["logits"][0, -1]
    return -float(logits.log_softmax(-1)[target])


def test_stride_equal_to_window_scores_disjoint_chunks(model, stream):
    # Chunks [0, 8), [8, 16), ..., [48, 50): each scores its own tokens but the first.
    nll, tokens = 0.0, 0
    for begin in range(0, 50, 8):
        chunk = stream[begin:begin + 8]
        for t in range(1, len(chunk)):
            nll += next_token_nll(model, chunk[:t], int(chunk[t]))
            tokens += 1
    result = strided_perplexity(model, stream, max_length=8, stride=8, batch_size=3)
    assert result["tokens"] == tokens == 50 - 7
    assert result["windows"] == 7
    assert result["nll"] == pytest.approx(nll, rel=1e-5)
    assert result["perplexity"] == pytest.approx(math.exp(nll / tokens), rel=1e-5)


@pytest.mark.parametrize("stride", [1, 3, 5])
def test_smaller_stride_matches_token_by_token_contexts(model, stream, stride):
    # Token i is scored once, in the first window [b, b + 8) with b < i, reading tokens[b:i].
    max_length = 8
    nll = 0.0
    for i in range(1, 50):
        begin = max(0, -(-(i - max_length + 1) // stride) * stride)
        assert begin < i < begin + max_length
        nll += next_token_nll(model, stream[begin:i], int(stream[i]))
    result = strided_perplexity(model, stream, max_length=max_length, stride=stride, batch_size=4)
    assert result["tokens"] == 49
    assert result["nll"] == pytest.approx(nll, rel=1e-5)


def test_batching_and_padding_do_not_change_the_result(model, stream):
    one = strided_perplexity(model, stream, max_length=12, stride=5, batch_size=1)
    many = strided_perplexity(model, stream, max_length=12, stride=5, batch_size=64)
    assert many["window_tokens"] == one["window_tokens"]
    np.testing.assert_allclose(many["window_nll"], one["window_nll"], rtol=1e-5)


def test_model_mode_is_restored(model, stream):
    model.train()
    strided_perplexity(model, stream[:10], max_length=4, stride=2)
    assert model.training
    model.eval()


@pytest.mark.parametrize("n,max_length,stride", [(2, 2, 1), (7, 3, 3), (50, 8, 3), (51, 16, 16), (9, 16, 4)])
def test_every_token_but_the_first_is_scored_exactly_once(n, max_length, stride):
    windows = sliding_windows(n, max_length, stride)
    scored = [i for _, end, first in windows for i in range(first, end)]
    if stride < max_length:
        assert scored == list(range(1, n))
    else:  # disjoint windows: the first token of each has no context
        assert scored == [i for i in range(1, n) if i % max_length]
    assert all(0 <= begin < first < end <= begin + max_length for begin, end, first in windows)


def test_bad_windows_and_streams_are_refused(model):
    with pytest.raises(ConfigError, match="stride=9 must be in 1..max_length=8"):
        sliding_windows(20, 8, 9)
    with pytest.raises(ConfigError, match="max_length=1"):
        sliding_windows(20, 1, 1)
    with pytest.raises(DataError, match="at least 2 tokens"):
        strided_perplexity(model, torch.tensor([3]), max_length=8)


def test_registered_metric_pools_tokens():
    import_metric_modules()
    assert "perplexity" in METRICS.names() and "perplexity" in LOWER_IS_BETTER
    # Two units: 10 nats over 4 tokens and 2 nats over 1 token -> exp(12 / 5), not a mean of two ppls.
    assert compute("perplexity", [10.0, 2.0], [4, 1]) == pytest.approx(math.exp(12 / 5))
    assert compute("perplexity", [0.0], [3]) == 1.0
    with pytest.raises(DataError, match="no scored tokens"):
        compute("perplexity", [1.0], [0])


# --- the lm task runner -----------------------------------------------------------------------------

TEXTS = ["The river flows past the old mill and under the stone bridge.",
         "A new school opened in the village after the long winter.",
         "The council met in the town hall to discuss the harbour."]


def _project(root, task: str = "ptb"):
    """A checkpoint of a tiny decoder, a tokenizer and a task set under the scratch root."""
    from leanlm import paths
    from leanlm.data.tokenizer import train_wordpiece
    from leanlm.io import write_jsonl
    from leanlm.modeling.checkpoint import save_checkpoint

    tokenizer = train_wordpiece(lambda: TEXTS * 3, 120, lowercase=True)
    torch.manual_seed(2)
    config = ModelConfig(**{**TINY, "vocab_size": tokenizer.get_vocab_size()})
    model = GPT2ForCausalLM(config)
    save_checkpoint(model, config, paths.models_dir("smoke") / "ch3_decoder-mha")
    tasks = paths.data_dir("smoke") / "tasks" / task
    # Written out of idx order: the runner reads the rows in idx order.
    write_jsonl(tasks / "test.jsonl", [{"idx": 1, "text": TEXTS[1]}, {"idx": 0, "text": TEXTS[0]},
                                       {"idx": 2, "text": TEXTS[2]}])
    return tokenizer, model


def test_runner_reports_test_perplexity(scratch_root):
    from leanlm.stages.finetune import TASK_RUNNERS
    from leanlm.runners.lm import PerplexityRunner, stream_token_ids

    tokenizer, model = _project(scratch_root)
    assert TASK_RUNNERS.get("lm") is PerplexityRunner and not PerplexityRunner.seeded
    config = {"profile": "smoke", "finetune": {"lm": {"tasks": ["ptb"], "stride": 4, "max_length": 8, "batch_size": 2}}}
    tokenizer.enable_truncation(max_length=5)  # a caller's setting must not cut the stream
    result = PerplexityRunner()(config, "ch3_decoder-mha", "lm", "ptb", 0, tokenizer)
    assert tokenizer.truncation is not None  # the caller's tokenizer is left as it was
    tokenizer.no_truncation()

    expected_ids = tokenizer.encode("\n\n".join(TEXTS), add_special_tokens=False).ids
    assert len(expected_ids) > 8
    assert stream_token_ids(tokenizer, [{"idx": 1, "text": TEXTS[1]}, {"idx": 0, "text": TEXTS[0]},
                                        {"idx": 2, "text": TEXTS[2]}]).tolist() == expected_ids
    expected = strided_perplexity(model.eval(), torch.tensor(expected_ids), max_length=8, stride=4)
    assert result["task"] == "ptb" and result["split"] == "test" and result["primary_metric"] == "perplexity"
    assert result["metrics"] == {"perplexity": pytest.approx(expected["perplexity"], rel=1e-5)}
    assert result["primary"] == result["metrics"]["perplexity"]
    assert result["tokens"] == len(expected_ids) - 1 and (result["max_length"], result["stride"]) == (8, 4)


def test_runner_defaults_and_setting_errors(scratch_root):
    from leanlm.runners.lm import PerplexityRunner

    tokenizer, _ = _project(scratch_root)
    runner = PerplexityRunner()
    # Defaults: the model's whole context (16) as the window; the thesis's stride 256 does not fit it.
    with pytest.raises(ConfigError, match=r"finetune\.lm\.stride = 256 exceeds the window of 16"):
        runner({"profile": "smoke", "finetune": {"lm": {"tasks": ["ptb"]}}}, "ch3_decoder-mha", "lm", "ptb", 0, tokenizer)
    ok = runner({"profile": "smoke", "finetune": {"lm": {"tasks": ["ptb"], "stride": 8}}},
                "ch3_decoder-mha", "lm", "ptb", 0, tokenizer)
    assert ok["max_length"] == 16
    with pytest.raises(ConfigError, match="max_length = 32 exceeds the model's context of 16"):
        runner({"profile": "smoke", "finetune": {"lm": {"tasks": ["ptb"], "max_length": 32}}},
               "ch3_decoder-mha", "lm", "ptb", 0, tokenizer)
    capped = runner({"profile": "smoke", "finetune": {"lm": {"tasks": ["ptb"], "stride": 8, "max_tokens": 10}}},
                    "ch3_decoder-mha", "lm", "ptb", 0, tokenizer)
    assert capped["tokens"] == 9 and capped["stream_tokens"] == ok["stream_tokens"] == ok["tokens"] + 1
    with pytest.raises(ConfigError, match=r"finetune\.lm\.batch_size = 0"):
        runner({"profile": "smoke", "finetune": {"lm": {"tasks": ["ptb"], "stride": 8, "batch_size": 0}}},
               "ch3_decoder-mha", "lm", "ptb", 0, tokenizer)


def test_runner_refuses_a_model_that_is_no_causal_lm(scratch_root):
    from leanlm import paths
    from leanlm.modeling.checkpoint import save_checkpoint
    from leanlm.modeling.heads import BertForMLM
    from leanlm.runners.lm import PerplexityRunner

    tokenizer, _ = _project(scratch_root)
    bert = ModelConfig(vocab_size=tokenizer.get_vocab_size(), n_layers=1, d_model=16, n_heads=2, head_dim=8,
                       d_ff=32, max_position=16)
    save_checkpoint(BertForMLM(bert), bert, paths.models_dir("smoke") / "ch3_encoder-mha")
    with pytest.raises(ConfigError, match="perplexity of a causal LM.*ch3_encoder-mha.*no 'causal_lm' model"):
        PerplexityRunner()({"profile": "smoke", "finetune": {"lm": {"stride": 4}}}, "ch3_encoder-mha", "lm", "ptb",
                           0, tokenizer)


# Table 3.12's fine-tuning settings, at this scale (DESIGN §8: the lm tasks are fine-tuned, five seeds).
FINE_TUNE = dict(epochs=3, batch_size=2, lr=1e-2, schedule="cosine_with_hard_restarts", warmup_ratio=0.06,
                 weight_decay=0.0, adam_betas=[0.9, 0.999], adam_eps=1e-6, clip_norm=1.0, eval_every=None,
                 early_stopping_patience=None)


def test_runner_fine_tunes_on_the_train_split_per_seed(scratch_root):
    from leanlm import paths
    from leanlm.io import write_jsonl
    from leanlm.runners.lm import PerplexityRunner
    from leanlm.stages.finetune import TASK_RUNNERS

    tokenizer, _ = _project(scratch_root)
    tasks = paths.data_dir("smoke") / "tasks" / "ptb"
    write_jsonl(tasks / "train.jsonl", [{"idx": i, "text": TEXTS[i % 3]} for i in range(12)])
    write_jsonl(tasks / "validation.jsonl", [{"idx": 0, "text": TEXTS[2]}, {"idx": 1, "text": TEXTS[0]}])
    zero_shot = {"tasks": ["ptb"], "stride": 4, "max_length": 8, "batch_size": 2}
    tuned = {**zero_shot, "fine_tune": FINE_TUNE}
    runner = TASK_RUNNERS.get("lm")()
    # Fine-tuning depends on the seed (five runs in the paper profile); zero-shot evaluation does not.
    assert PerplexityRunner.is_seeded(tuned) and not PerplexityRunner.is_seeded(zero_shot)
    before = (paths.models_dir("smoke") / "ch3_decoder-mha" / "model.safetensors").read_bytes()
    base = runner({"profile": "smoke", "finetune": {"lm": zero_shot}}, "ch3_decoder-mha", "lm", "ptb", 0, tokenizer)
    first = runner({"profile": "smoke", "finetune": {"lm": tuned}}, "ch3_decoder-mha", "lm", "ptb", 0, tokenizer)
    second = runner({"profile": "smoke", "finetune": {"lm": tuned}}, "ch3_decoder-mha", "lm", "ptb", 1, tokenizer)
    assert base["fine_tuned"] is False and first["fine_tuned"] is True
    train_tokens = len(tokenizer.encode("\n\n".join(TEXTS[i % 3] for i in range(12)), add_special_tokens=False).ids)
    windows = train_tokens // 8  # non-overlapping windows of max_length tokens
    assert first["train_windows"] == windows and first["steps"] == 3 * math.ceil(windows / 2)
    assert set(first["validation_metrics"]) == {"perplexity"}
    assert first["primary"] < base["primary"]  # it learnt the benchmark's text
    assert first["primary"] != second["primary"]  # another seed, another data order
    assert first["stride"] == 4 and first["split"] == "test"
    # every seed starts from the pretrained model, which stays as it was
    assert (paths.models_dir("smoke") / "ch3_decoder-mha" / "model.safetensors").read_bytes() == before
    assert not (paths.models_dir("smoke") / "ch3_decoder-mha" / "finetune" / "ptb-seed0").exists()


def test_paper_profile_fine_tunes_the_lm_tasks_five_times():
    from leanlm.config import load_config
    from leanlm.reporting.ch3.results import family_seeds

    config = load_config("params/paper.yaml")
    lm = config["finetune"]["lm"]
    glue = config["finetune"]["glue"]
    assert lm["stride"] == 256 and lm["fine_tune"] is not None
    for key in ("lr", "schedule", "warmup_ratio", "weight_decay", "adam_betas", "adam_eps", "batch_size", "epochs"):
        assert lm["fine_tune"][key] == glue[key], key  # Table 3.12's settings
    assert family_seeds(config, "lm", lm["tasks"]) == [0, 1, 2, 3, 4]


def test_train_stream_is_encoded_in_chunks_and_capped(monkeypatch):
    from leanlm.data.tokenizer import train_wordpiece
    from leanlm.stages import lm_finetune

    tokenizer = train_wordpiece(lambda: TEXTS * 3, 120, lowercase=True)
    rows = [{"idx": i, "text": TEXTS[i % 3]} for i in range(7)][::-1]  # read back in idx order
    monkeypatch.setattr(lm_finetune, "ROWS_PER_CHUNK", 2)
    expected = []
    for start in range(0, 7, 2):
        chunk = "\n\n".join(TEXTS[i % 3] for i in range(start, min(start + 2, 7)))
        expected += tokenizer.encode(chunk, add_special_tokens=False).ids
    stream = lm_finetune.train_stream_ids(tokenizer, rows)
    assert stream.dtype == torch.int32 and stream.tolist() == expected
    assert lm_finetune.train_stream_ids(tokenizer, rows, max_tokens=10).tolist() == expected[:10]
    windows = lm_finetune.train_windows(stream, 8)
    assert windows.shape == (len(expected) // 8, 8) and windows.flatten().tolist() == expected[: windows.numel()]
    with pytest.raises(DataError, match="fewer than one window of 512"):
        lm_finetune.train_windows(stream, 512)
