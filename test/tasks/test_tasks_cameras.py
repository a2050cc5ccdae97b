"""Several cameras in one prompt: one placeholder per camera, each introduced by its name;
the front camera alone keeps the reference text byte for byte."""
from __future__ import annotations

import pytest

from wamdiff2_core import tasks
from wamdiff2_core.tasks import (AnswerParseError, UserTextError, check_cameras,
                                 parse_planning_prompt, planning_prompt, prompt_cameras,
                                 scene_prefix)

REFERENCE_OPENING = "Here is a front-view images from a driving vehicle: <image>\n"
RIG = ("front", "left", "rear_right")


def test_front_camera_alone_is_the_reference_text():
    assert scene_prefix() == scene_prefix(["front"]) == REFERENCE_OPENING
    for prompt in (planning_prompt("left", (4.66, -0.09), (0.17, -1.53)),
                   tasks.detection_prompt(), tasks.qa_prompt("Is the road clear?")):
        assert prompt.startswith(REFERENCE_OPENING) and prompt.count("<image>") == 1
    assert "in the image." in tasks.detection_prompt()


@pytest.mark.parametrize("build, same_body", [
    (lambda cams: planning_prompt("right", (3.0, 0.5), (0.0, 0.0), cameras=cams), True),
    (lambda cams: tasks.detection_prompt(cams), False),
    (lambda cams: tasks.qa_prompt("Is the left lane free?", cameras=cams), True),
])
def test_every_task_names_each_camera_before_its_image(build, same_body):
    prompt = build(RIG)
    opening = ("Here are the images of the cameras of a driving vehicle:\n"
               "front camera: <image>\nleft camera: <image>\nrear_right camera: <image>\n")
    assert prompt.startswith(opening)
    assert prompt.count("<image>") == 3
    assert prompt_cameras(prompt) == RIG
    one_camera_body = build(("front",))[len(REFERENCE_OPENING):]
    if same_body:
        assert prompt[len(opening):] == one_camera_body
    else:                                    # detection names the camera of its boxes
        assert prompt[len(opening):] == one_camera_body.replace(
            "in the image.", "in the front camera's image.")


def test_one_other_camera_is_named():
    prompt = planning_prompt("straight", cameras=["left"])
    assert "left camera: <image>\n" in prompt and prompt.count("<image>") == 1
    assert parse_planning_prompt(prompt)["cameras"] == ("left",)


def test_planning_prompt_round_trips_its_cameras():
    prompt = planning_prompt("left", (1.25, -0.5), (0.1, 0.0), cameras=RIG)
    state = parse_planning_prompt(prompt)
    assert state["cameras"] == RIG
    assert planning_prompt(**state) == prompt


@pytest.mark.parametrize("cameras, words", [
    ([], "at least one"),
    (["front", "front"], "twice"),
    (["Front"], "lower-case identifier"),
    (["front-left"], "lower-case identifier"),
    (["front <image>"], "lower-case identifier"),
    ("front", "list of camera names"),
    ([f"c{i}" for i in range(17)], "at most"),
])
def test_bad_camera_lists_are_refused_with_a_sentence(cameras, words):
    with pytest.raises(ValueError, match=words):
        check_cameras(cameras)
    with pytest.raises(ValueError, match=words):
        planning_prompt("left", cameras=cameras)


@pytest.mark.parametrize("text", [
    # the front camera alone must use the reference opening
    "Here are the images of the cameras of a driving vehicle:\nfront camera: <image>\n",
    # a camera named twice
    "Here are the images of the cameras of a driving vehicle:\nleft camera: <image>\n"
    "left camera: <image>\n",
    # a line with no image
    "Here are the images of the cameras of a driving vehicle:\nleft camera: \n",
])
def test_parse_refuses_malformed_openings(text):
    body = planning_prompt("left")[len(REFERENCE_OPENING):]
    with pytest.raises(AnswerParseError, match="scene"):
        parse_planning_prompt(text + body)


def test_user_text_cannot_add_an_image():
    with pytest.raises(UserTextError):
        tasks.qa_prompt("what is in <image>?", cameras=RIG)


def test_prompt_cameras_of_other_text_is_none():
    assert prompt_cameras("Describe the scene.") is None
    assert prompt_cameras(None) is None
