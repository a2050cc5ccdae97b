"""wamdiff2_core.tasks: task prompts, answer formats and strict answer parsers.

Three tasks share one scene opening, one image per camera (:func:`scene_prefix`; for the
front camera alone "Here is a front-view images from a driving vehicle: <image>\\n", the
reference repository's text); each prompt builder takes ``cameras`` (default ``("front",)``):

* planning: :func:`planning_prompt` (the reference user turn, byte for byte) and the answer
  ``x1,y1,...,x8,y8`` (:func:`format_waypoints` / :func:`parse_waypoints`);
* detection: :func:`detection_prompt` and a Qwen3-VL JSON box list on a 0-1000 grid
  (:func:`format_detections` / :func:`parse_detections`);
* qa: :func:`qa_prompt` and free text (:func:`format_answer` / :func:`parse_answer`).

Each task also declares the language of its answer as a regular expression
(:func:`planning_language`, :func:`detection_language`, :func:`qa_language`): exactly the
texts its writer produces, which constrained decoding keeps every answer inside.

Every parser raises :class:`AnswerParseError` (a ``ValueError``) and nothing else on a
malformed or non-str input. :func:`conversation_record` / :func:`record_prompt_and_answer`
write and read the reference repository's conversation JSON records. Caller text that goes
into a prompt (a question) passes :func:`user_text`, which refuses image placeholders; the
processor reads the rest of a prompt as plain text. See docs/tasks.md.
"""
from .cameras import DEFAULT_CAMERAS, check_cameras, prompt_cameras, scene_prefix
from .conversation import (RECORDS_FILE, answer_task, conversation_record, read_records,
                           record_prompt_and_answer, record_task, records_path)
from .detection import (Detection, detection_prompt, format_detections, parse_detections,
                        parse_model_detections)
from .errors import AnswerParseError
from .languages import (PLAN_MAX_SPEED_MPS, AnswerLanguage, detection_language,
                        planning_language, qa_language)
from .planning import (COMMANDS, NUM_WAYPOINTS, WAYPOINT_DT_S, format_waypoints,
                       parse_planning_prompt, parse_waypoints, planning_prompt)
from .motion import MAX_ACCEL_MPS2, MAX_SPEED_MPS, ImplausibleMotion, check_accel, check_speed
from .qa import format_answer, parse_answer, qa_prompt
from .text import IMAGE_PLACEHOLDER, PLACEHOLDERS, UserTextError, user_text

__all__ = [
    "RECORDS_FILE",
    "read_records",
    "records_path",
    "AnswerParseError",
    "COMMANDS",
    "NUM_WAYPOINTS",
    "WAYPOINT_DT_S",
    "planning_prompt",
    "parse_planning_prompt",
    "format_waypoints",
    "parse_waypoints",
    "Detection",
    "detection_prompt",
    "format_detections",
    "parse_detections",
    "parse_model_detections",
    "qa_prompt",
    "format_answer",
    "parse_answer",
    "conversation_record",
    "record_prompt_and_answer",
    "AnswerLanguage",
    "planning_language",
    "PLAN_MAX_SPEED_MPS",
    "detection_language",
    "qa_language",
    "record_task",
    "answer_task",
    "IMAGE_PLACEHOLDER",
    "PLACEHOLDERS",
    "UserTextError",
    "user_text",
    "MAX_SPEED_MPS",
    "MAX_ACCEL_MPS2",
    "ImplausibleMotion",
    "check_speed",
    "check_accel",
    "DEFAULT_CAMERAS",
    "check_cameras",
    "prompt_cameras",
    "scene_prefix",
]
