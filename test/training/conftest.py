from pathlib import Path

import pytest
from toy_data import write_toy_data


@pytest.fixture(scope="session")
def toy_data(tmp_path_factory) -> Path:
    """A 6-frame (18-record) data set of PNGs and conversation records."""
    return write_toy_data(tmp_path_factory.mktemp("toy"), n_frames=6)


@pytest.fixture(scope="session")
def ar_checkpoint(tmp_path_factory, toy_data) -> Path:
    """A tiny AR checkpoint (two training steps) to start diffusion stages from."""
    from wamdiff2_core.training.config import build_recipe
    from wamdiff2_core.training.engine import train

    out = tmp_path_factory.mktemp("ar")
    recipe = build_recipe({}, tiny_overrides(toy_data, out, "ar") + ["train.steps=2"])
    return train(recipe, log=lambda *a: None)


def tiny_overrides(data: Path, out: Path, objective: str = "diffusion", block: int = 4,
                   init: str = "tiny") -> list[str]:
    """Overrides of a small, fast, deterministic recipe on the toy data."""
    paradigm = "ar" if objective == "ar" else "diffusion"
    return [f"objective={objective}", f"model.init={init}", f"model.paradigm={paradigm}",
            f"model.block_size={1 if paradigm == 'ar' else block}", f"data.path={data}",
            "data.max_answer_tokens=128", "train.global_batch=4", "train.micro_batch=4",
            "train.precision=fp32", "train.steps=3", "optim.warmup_steps=0",
            "optim.lr=1e-3", f"output.dir={out}", "output.tensorboard=false",
            "output.progress=false", "output.save_every=100"]
