"""What the scratch decoding scripts share: the planning records of a data set with their
images, one record planned through the project's own record -> observation path
(``evaluation.predictors``), and the planning error (mean waypoint displacement, m)."""
import json
import math
from pathlib import Path

from wamdiff2_core.evaluation.open_loop import load_image
from wamdiff2_core.evaluation.predictors import PLANNER_CALLS
from wamdiff2_core.tasks import AnswerParseError


def planning_records(path, n):
    """The first ``n`` planning records of a data-set JSON file and their images."""
    records = [r for r in json.load(open(path)) if r['task'] == 'planning'][:n]
    return records, [load_image(r, Path(path).parent) for r in records]


def l2(text, record):
    """Mean waypoint displacement of a raw plan answer against the record's ground truth;
    None when the answer does not parse to as many numbers."""
    truth = [float(v) for v in record['conversations'][1]['value'].split(',')]
    try:
        plan = [float(v) for v in text.split(',')]
    except ValueError:
        return None
    if len(plan) != len(truth):
        return None
    return sum(math.hypot(plan[i] - truth[i], plan[i + 1] - truth[i + 1])
               for i in range(0, len(truth), 2)) / (len(truth) / 2)


class _Recorded:
    """A planner whose last plan's decode stats are kept, parsed or not (the planner puts
    them on its AnswerParseError)."""
    def __init__(self, planner):
        self.planner, self.stats = planner, None

    def plan(self, observation):
        try:
            result = self.planner.plan(observation)
        except AnswerParseError as exc:
            self.stats = exc.stats
            raise
        self.stats = result.stats
        return result


def plan_record(planner, record, image):
    """(answer text, l2 or None, decode stats) of one planning record."""
    recorded = _Recorded(planner)
    text = PLANNER_CALLS['planning'](recorded, record, [image])
    return text, l2(text, record), recorded.stats
