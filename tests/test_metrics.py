"""Task metrics against values computed by hand (Appendix 3.8's metrics)."""

import math

import numpy as np
import pytest

from leanlm.errors import ConfigError, DataError
from leanlm.evaluation.metrics import compute, compute_all


def test_accuracy_counts_exact_matches():
    assert compute("accuracy", [1, 0, 1, 1], [1, 1, 1, 0]) == pytest.approx(0.5)
    assert compute("accuracy", [2, 0, 1], [2, 0, 1]) == 1.0  # three-way labels (MNLI)


def test_f1_is_binary_on_the_positive_class():
    # TP = 2 (positions 0, 3), FP = 1 (position 1), FN = 1 (position 4): P = R = 2/3, F1 = 2/3.
    assert compute("f1", [1, 1, 0, 1, 0], [1, 0, 0, 1, 1]) == pytest.approx(2 / 3)
    # Never predicting the positive class scores 0 (not NaN, no exception).
    assert compute("f1", [0, 0, 0], [1, 0, 1]) == 0.0


def test_matthews_on_a_hand_computed_confusion_matrix():
    # TP = 3, TN = 2, FP = 1, FN = 2.
    # MCC = (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (6 - 2) / sqrt(4*5*3*4) = 4/sqrt(240).
    preds = [1, 1, 1, 0, 0, 1, 0, 0]
    refs = [1, 1, 1, 0, 0, 0, 1, 1]
    assert compute("matthews", preds, refs) == pytest.approx(4 / math.sqrt(240))
    # Constant predictions: MCC undefined, scored 0 (scikit-learn's convention).
    assert compute("matthews", [1, 1, 1, 1], [1, 0, 1, 0]) == 0.0


def test_spearman_gives_ties_their_average_rank():
    # ranks of x = [1, 2.5, 2.5, 4], of y = [1, 3, 2, 4]; Pearson of the ranks = 4.5 / sqrt(4.5 * 5).
    expected = 4.5 / math.sqrt(22.5)
    assert compute("spearman", [1.0, 2.0, 2.0, 3.0], [1.0, 3.0, 2.0, 4.0]) == pytest.approx(expected)
    # Monotone but non-linear: Spearman is exactly 1, Pearson is not.
    assert compute("spearman", [1, 2, 3, 4], [1, 8, 27, 64]) == pytest.approx(1.0)


def test_pearson_by_hand():
    # x - mean = [-1, 0, 1], y - mean = [-7/3, -1/3, 8/3]; r = 5 / sqrt(2 * 114/9).
    assert compute("pearson", [1, 2, 3], [2, 4, 7]) == pytest.approx(5 / math.sqrt(2 * 114 / 9))
    assert compute("pearson", [1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


def test_correlation_of_constant_predictions_is_zero_not_nan():
    assert compute("spearman", [0.5, 0.5, 0.5], [1.0, 2.0, 3.0]) == 0.0
    assert compute("pearson", [0.5, 0.5, 0.5], [1.0, 2.0, 3.0]) == 0.0


def test_compute_all_keeps_order_and_values():
    preds, refs = [1, 1, 0, 1, 0], [1, 0, 0, 1, 1]
    out = compute_all(["f1", "accuracy"], preds, refs)
    assert list(out) == ["f1", "accuracy"]
    assert out == {"f1": pytest.approx(2 / 3), "accuracy": pytest.approx(0.6)}


def test_unknown_metric_is_a_config_error_naming_the_known_ones():
    with pytest.raises(ConfigError, match=r"unknown metric 'bleu_score'.*accuracy.*spearman"):
        compute("bleu_score", [1], [1])


def test_bad_inputs_are_data_errors():
    with pytest.raises(DataError, match="3 predictions but 2 references"):
        compute("accuracy", [1, 0, 1], [1, 0])
    with pytest.raises(DataError, match="no examples"):
        compute("accuracy", [], [])
    with pytest.raises(DataError, match="argmax"):
        compute("accuracy", [[0.1, 0.9]], [1])


def test_nan_predictions_score_zero_like_a_constant_prediction():
    # A diverged regression head (NaN outputs) has no defined correlation: scored 0 as a constant
    # prediction is, so an average over tasks stays a number.
    nan = float("nan")
    assert compute("spearman", [1.0, nan, 3.0], [1.0, 2.0, 3.0]) == 0.0
    assert compute("pearson", [1.0, nan, 3.0], [1.0, 2.0, 3.0]) == 0.0


def test_constant_references_score_zero():
    assert compute("spearman", [1.0, 2.0, 3.0], [0.5, 0.5, 0.5]) == 0.0
    assert compute("pearson", [1.0, 2.0, 3.0], [0.5, 0.5, 0.5]) == 0.0


def test_correlation_of_a_constant_prediction_emits_no_warning():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compute("spearman", [2.0, 2.0, 2.0], [1.0, 2.0, 3.0]) == 0.0
        assert compute("pearson", [1.0, 2.0, 3.0], [7.0, 7.0, 7.0]) == 0.0


def test_predictions_and_references_may_be_any_iterable():
    # Generators (e.g. a map over decoded batches) are scored like lists.
    preds, refs = [1, 0, 1, 1], [1, 1, 1, 0]
    assert compute("accuracy", (p for p in preds), iter(refs)) == pytest.approx(0.5)
    assert compute("accuracy", map(int, preds), tuple(refs)) == pytest.approx(0.5)


def test_shape_errors_name_the_metric_and_the_argument():
    with pytest.raises(DataError) as info:
        compute("accuracy", [[0.1, 0.9], [0.8, 0.2]], [1, 0])
    assert str(info.value) == (
        "metric 'accuracy': predictions must be a flat sequence of labels or scores, got shape (2, 2); "
        "take the argmax of logits before scoring"
    )
    with pytest.raises(DataError) as info:
        compute("f1", [1, 0], [[1], [0]])
    assert str(info.value) == (
        "metric 'f1': references must be a flat sequence of labels or scores, got shape (2, 1); "
        "take the argmax of logits before scoring"
    )


def test_length_mismatch_error_in_full():
    with pytest.raises(DataError) as info:
        compute("matthews", [1, 0, 1], [1, 0])
    assert str(info.value) == (
        "metric 'matthews': 3 predictions but 2 references; score each example exactly once"
    )


def test_import_metric_modules_registers_the_other_task_shapes():
    from leanlm.evaluation.metrics import METRICS, import_metric_modules

    import_metric_modules()
    for name in ("squad_f1", "squad_em", "bleu", "perplexity"):
        assert name in METRICS


def test_correlation_of_scores_spanning_exactly_one():
    # Scores in [0, 1] whose range is exactly 1 (a probability head, STS-B rescaled to 0..1) are not
    # mistaken for constant ones.
    assert compute("pearson", [0.0, 0.5, 1.0], [0.0, 0.4, 1.0]) == pytest.approx(0.99339926779878)
    assert compute("spearman", [0.0, 0.5, 1.0], [0.2, 0.1, 0.9]) == pytest.approx(0.5)
    assert compute("pearson", [0.2, 0.1, 0.9], [0.0, 0.5, 1.0]) == pytest.approx(
        float(np.corrcoef([0.2, 0.1, 0.9], [0.0, 0.5, 1.0])[0, 1])
    )


def test_near_constant_predictions_score_a_number_and_keep_scipys_warning():
    # Only the constant-input case is silenced (it is scored 0); scipy's warning that a nearly constant
    # input makes the coefficient inaccurate still reaches the user.
    from scipy.stats import NearConstantInputWarning

    with pytest.warns(NearConstantInputWarning):
        value = compute("pearson", [1.0, 1.0 + 1e-13, 1.0 - 1e-13, 1.0], [1.0, 2.0, 3.0, 4.0])
    assert math.isfinite(value) and -1.0 <= value <= 1.0


def test_a_zero_dimensional_array_is_a_data_error():
    # A metric input reduced to a scalar too early (np.array(1)) gets the clear error, not a TypeError.
    with pytest.raises(DataError, match=r"metric 'accuracy': predictions must be a flat sequence.*shape \(\)"):
        compute("accuracy", np.array(1), [1])
