"""COCO mAP / AP50 on hand-made boxes with known answers."""
from dataclasses import dataclass

import pytest

from wamdiff2_core.evaluation.detection_map import detection_map


@dataclass(frozen=True)
class Det:                     # the shape of wamdiff2_core.tasks.Detection
    box: tuple
    label: str = "car"
    score: float = 1.0


GT = [[{"bbox": [10, 10, 50, 40], "label": "car"}, {"bbox": [100, 60, 180, 120], "label": "car"}],
      [{"bbox": [0, 0, 30, 30], "label": "truck"}]]
SIZES = [(320, 180), (320, 180)]


def _perfect():
    return [[Det(tuple(b["bbox"]), b["label"]) for b in img] for img in GT]


def test_perfect_predictions_score_one():
    score = detection_map(GT, _perfect(), SIZES)
    assert score.map == pytest.approx(1.0) and score.ap50 == pytest.approx(1.0)
    assert (score.num_images, score.num_gt, score.num_pred) == (2, 3, 3)


def test_one_of_two_missed_gives_coco_interpolated_half():
    # Recall reaches 0.5 at precision 1 and never more: 51 of COCO's 101 recall points.
    gt = [GT[0]]
    preds = [[Det((10, 10, 50, 40), score=0.9)]]
    score = detection_map(gt, preds)
    assert score.map == pytest.approx(51 / 101) and score.ap50 == pytest.approx(51 / 101)


def test_high_scoring_false_positive_halves_precision_at_full_recall():
    gt = [[GT[0][0]]]
    preds = [[Det((200, 100, 240, 140), score=0.95), Det((10, 10, 50, 40), score=0.5)]]
    score = detection_map(gt, preds)
    assert score.ap50 == pytest.approx(0.5)        # precision 1/2 at every recall point


def test_iou_between_thresholds_counts_for_ap50_only_partly_for_map():
    # Prediction shifted by 9 px on a 40x30 box: IoU = (31*30)/(2*1200 - 930) = 0.633.
    gt = [[GT[0][0]]]
    preds = [[Det((19, 10, 59, 40))]]
    score = detection_map(gt, preds)
    assert score.ap50 == pytest.approx(1.0)
    assert score.map == pytest.approx(0.3)          # a match at IoU 0.50, 0.55, 0.60 of the 10


def test_wrong_label_is_a_miss():
    preds = [[Det(tuple(GT[0][0]["bbox"]), "truck")]]
    score = detection_map([[GT[0][0]]], preds)
    assert score.ap50 == pytest.approx(0.0)


def test_empty_cases_do_not_crash():
    assert detection_map([], []).map is None                       # no images
    no_gt = detection_map([[], []], [[Det((0, 0, 10, 10))], []])
    assert no_gt.map is None and no_gt.ap50 is None and no_gt.num_pred == 1
    assert detection_map([[], []], [[], []]).map is None
    no_pred = detection_map(GT, [[], []], SIZES)
    assert no_pred.map == 0.0 and no_pred.ap50 == 0.0 and no_pred.num_gt == 3
    # an image with no ground truth but a prediction, next to a perfect one, costs precision
    mixed = detection_map([[GT[0][0]], []], [[Det((10, 10, 50, 40), score=0.9)],
                                              [Det((0, 0, 10, 10), score=0.95)]])
    assert mixed.ap50 == pytest.approx(0.5)


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError):
        detection_map(GT, [[]])


def test_equal_scores_rank_in_answer_order():
    # Parsed answers carry no scores (all 1.0): the order the model wrote them in decides.
    gt = [[GT[0][0]]]
    false_first = [[Det((200, 100, 240, 140)), Det((10, 10, 50, 40))]]
    true_first = [[Det((10, 10, 50, 40)), Det((200, 100, 240, 140))]]
    assert detection_map(gt, false_first).ap50 == pytest.approx(0.5)
    assert detection_map(gt, true_first).ap50 == pytest.approx(1.0)


# One box per area range: 8 x 6 (48 px^2), 20 x 20 (400), 40 x 30 (1200), 100 x 100 (10,000).
BY_SIZE = [[{"bbox": [10, 10, 18, 16], "label": "car"}, {"bbox": [50, 10, 70, 30], "label": "car"}],
           [{"bbox": [10, 10, 50, 40], "label": "car"}, {"bbox": [100, 50, 200, 150], "label": "car"}]]


def test_by_area_scores_each_size_on_its_own():
    # Found: the smallest and the largest box; missed: the two in between, with a false
    # positive of 20 x 20 px that only its own range sees.
    preds = [[Det((10, 10, 18, 16)), Det((150, 100, 170, 120))],
             [Det((100, 50, 200, 150))]]
    score = detection_map(BY_SIZE, preds)
    assert list(score.by_area) == ["<16^2", "16^2-32^2", "32^2-96^2", ">=96^2"]
    assert [a["num_gt"] for a in score.by_area.values()] == [1, 1, 1, 1]
    small, patch_to_32, medium, large = score.by_area.values()
    assert small == {"num_gt": 1, "ap50": pytest.approx(1.0), "recall50": pytest.approx(1.0)}
    assert large["ap50"] == pytest.approx(1.0) and large["recall50"] == pytest.approx(1.0)
    assert patch_to_32["ap50"] == 0.0 and patch_to_32["recall50"] == 0.0
    assert medium["ap50"] == 0.0 and medium["recall50"] == 0.0
    # all sizes together: 2 of 4 found, the false positive ranked between them
    assert 0.0 < score.ap50 < 0.51


def test_by_area_empty_ranges_and_no_predictions():
    only_small = [[BY_SIZE[0][0]]]
    hit = detection_map(only_small, [[Det((10, 10, 18, 16))]]).by_area
    assert hit["<16^2"]["ap50"] == pytest.approx(1.0)
    assert all(hit[k] == {"num_gt": 0, "ap50": None, "recall50": None}
               for k in ("16^2-32^2", "32^2-96^2", ">=96^2"))
    none = detection_map(BY_SIZE, [[], []]).by_area
    assert all(a == {"num_gt": 1, "ap50": 0.0, "recall50": 0.0} for a in none.values())
    assert detection_map([[]], [[]]).by_area is None           # no ground truth at all
    assert "by_area" in detection_map(BY_SIZE, [[], []]).to_dict()
