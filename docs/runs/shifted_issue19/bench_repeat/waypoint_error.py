"""The scratch scripts' planning error: mean waypoint displacement (m) of a raw plan answer
against a record's ground truth; None when the answer does not parse to as many numbers."""
import math


def l2(text, record):
    truth = [float(v) for v in record['conversations'][1]['value'].split(',')]
    try:
        plan = [float(v) for v in text.split(',')]
    except ValueError:
        return None
    if len(plan) != len(truth):
        return None
    return sum(math.hypot(plan[i] - truth[i], plan[i + 1] - truth[i + 1])
               for i in range(0, len(truth), 2)) / (len(truth) / 2)
