"""Training recipes: frozen dataclasses built once from YAML plus ``key=value`` overrides.

A recipe is one YAML file whose sections map onto the dataclasses below. Overrides use dotted
keys (``optim.lr=1e-4``, ``distill.teacher=runs/block16/final``); values are parsed as YAML
scalars. An unknown key, in the file or an override, is an error naming the key. ``validate``
checks everything that can be checked before any weight is loaded (data path, block sizes,
batch arithmetic), so a bad recipe fails at start with one clear sentence.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path

OBJECTIVES = ("ar", "diffusion", "distill")
PRECISIONS = ("fp32", "bf16")
STRATEGIES = ("auto", "none", "ddp", "fsdp")
TEACHER_PLACEMENTS = ("auto", "sharded", "replicated")
LOSS_NORMS = ("answer", "task")
PREDICTIONS = ("", "own", "shifted")


class RecipeError(ValueError):
    """A recipe that cannot run; the message is one sentence naming the culprit."""


@dataclass(frozen=True)
class ModelConfig:
    init: str = "tiny"               # preset name or checkpoint directory to start from
    paradigm: str = "diffusion"      # "ar" (stage 0) or "diffusion"
    block_size: int = 32
    seed: int = 0                    # weight initialisation seed of a preset
    max_pixels: int = 0              # image budget (pixels after resizing); 0: init's own
    min_pixels: int = 0              # its floor: smaller frames are scaled up; 0: init's own
    # Where a diffusion model reads answer position i's prediction: "own" (position i, the
    # reference repository's convention), "shifted" (position i - 1, as the AR head it may
    # start from does: docs/model.md, "Shifted prediction"); "": the init checkpoint's own
    # (a preset or an AR checkpoint: "own").
    prediction: str = ""
    # The commit rule and threshold the trained checkpoint recommends
    # (DiffusionFields.decode_commit_rule / decode_threshold: its answers are decoded with
    # them unless a caller chooses a rule; docs/decoding.md, "The checkpoint's commit rule").
    # "" / 0: the init's own.
    decode_commit_rule: str = ""
    decode_threshold: float = 0.0


@dataclass(frozen=True)
class DataConfig:
    path: str = ""                   # data set directory (DIR/train.json + DIR/images/...)
    split: str = "train.json"
    # the folder relative image paths are under; "": the rule predict and eval use (this
    # project's records: beside the records file; the reference's: the working directory)
    image_root: str = ""
    tasks: tuple[str, ...] = ()      # keep only these record tasks (empty: all)
    max_answer_tokens: int = 256     # answers are padded to whole blocks within this
    limit: int = 0                   # use only the first N records (0: all)
    group_by_task: bool = True       # one task per global batch (less answer padding)
    length_bucket: int = 0           # with group_by_task: also one answer-length bucket of
                                     # this many tokens per batch (0: off)
    # task -> how many times each of its records is drawn per epoch, on average (tasks not
    # named: 1). 2.0 doubles a task's share of the steps; 0.5 draws half its records.
    task_weights: dict[str, float] = field(default_factory=dict)
    # Probability that a planning sample is trained with its lateral ego status (the prompt's
    # velocity y and acceleration y) written as 0.00. Without it a model plans bends from
    # those two numbers alone and never learns to read the bend off the image (docs/training.md,
    # "The ego-status shortcut"). 0: off. Drawn per stream position: resumable, any world size.
    lateral_status_dropout: float = 0.0
    # The cameras of every record, in the order of its images (a rig data set from
    # `data generate --cameras front,left`: [front, left]); each record's prompt must name
    # exactly these, and the trained checkpoint records them (model.fields.cameras).
    cameras: tuple[str, ...] = ("front",)


@dataclass(frozen=True)
class NoiseConfig:
    schedule: str = "linear"
    eps: float = 1e-3                # mask ratios are drawn from (eps, 1]


@dataclass(frozen=True)
class DistillConfig:
    teacher: str = ""                # checkpoint directory of the frozen teacher
    teacher_block_size: int = 0      # 0: the teacher checkpoint's own block size
    divergence: str = "jsd"          # jsd | forward_kl | reverse_kl
    beta: float = 0.5
    temperature: float = 1.0
    lam: float = 0.5                 # loss = (1 - lam) CE + lam divergence
    on_policy_every: int = 0         # every K steps the student's own answers replace x0
    on_policy_steps_per_block: int = 0   # decode budget in on-policy mode (0: block size)
    # Where the frozen teacher lives: "sharded" like an FSDP2 student (each process holds
    # its slice; no optimizer state, no gradients), "replicated" (a whole copy per process);
    # both in bf16 under train.precision bf16. "auto": sharded when the student is.
    teacher_placement: str = "auto"

    def teacher_block(self, paradigm: str, block_size: int) -> int:
        """The block size the teacher predicts with, given its checkpoint's paradigm and
        block size: 1 for an AR teacher, else ``teacher_block_size`` or its own."""
        from wamdiff2_core.model.config import paradigm_block_size  # transformers: lazily

        return paradigm_block_size(paradigm, self.teacher_block_size or block_size)


@dataclass(frozen=True)
class VisionAuxConfig:
    # An auxiliary target for the vision tower: a head on the merged visual tokens predicts
    # where the frame's boxes are (training/vision_aux.py). weight x its loss is added to
    # every sample whose image has a detection record; 0: off.
    weight: float = 0.0
    subgrid: int = 8                 # sub-cells per token side (a tiny token: 32 x 32 px)
    pos_weight: float = 8.0          # weight of a positive sub-cell in the cross-entropy


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 3e-4
    vision_lr: float = 1e-4          # learning rate of the vision tower
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.95)
    warmup_steps: int = 20
    min_lr_ratio: float = 0.1        # cosine decays to lr * min_lr_ratio
    grad_clip: float = 1.0


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 100
    global_batch: int = 8            # samples per optimizer step over all processes
    micro_batch: int = 8             # samples per forward on one process
    seed: int = 0
    precision: str = "bf16"
    # none (one process) | ddp | fsdp (FSDP2: each decoder layer and vision block sharded)
    # | auto: none for one process; with several, DDP when the memory plan says a whole
    # replica fits one device, FSDP2 when it does not (docs/training.md, "Scale").
    strategy: str = "auto"
    # Recompute each decoder layer's and vision block's activations in the backward pass
    # (saves memory, costs about one more forward; same losses and gradients).
    activation_checkpointing: bool = False
    threads: int = 0                 # torch threads per process (0: leave as is)
    # What a sample's summed answer-token loss is divided by: "answer", its own answer
    # length (every sample weighs the same); "task", the mean answer length of its task
    # (every answer token of a task weighs the same, so a 2-token "[]" does not outweigh a
    # box's tokens 100 to 1).
    loss_norm: str = "answer"


@dataclass(frozen=True)
class OutputConfig:
    dir: str = "runs/default"
    save_every: int = 50
    keep_last: int = 2
    log_every: int = 1
    tensorboard: bool = True
    progress: bool = True


@dataclass(frozen=True)
class Recipe:
    objective: str = "diffusion"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    noise: NoiseConfig = field(default_factory=NoiseConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    vision_aux: VisionAuxConfig = field(default_factory=VisionAuxConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    output: OutputConfig = field(default_factory=OutputConfig)

    def to_dict(self) -> dict:
        return _plain(dataclasses.asdict(self))


def _plain(obj):
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


# ------------------------------------------------------------------------ building
def _convert(value, hint, key: str):
    origin = typing.get_origin(hint)
    if origin is dict:
        if not isinstance(value, dict):
            raise RecipeError(f"recipe key '{key}' must be a mapping, got {value!r}")
        k_hint, v_hint = typing.get_args(hint)
        return {_convert(k, k_hint, key): _convert(v, v_hint, f"{key}.{k}")
                for k, v in value.items()}
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise RecipeError(f"recipe key '{key}' must be a section (mapping), got {value!r}")
        return _build(hint, value, key + ".")
    if origin is tuple:
        if isinstance(value, str):
            value = [v for v in value.split(",") if v]
        if not isinstance(value, (list, tuple)):
            raise RecipeError(f"recipe key '{key}' must be a list, got {value!r}")
        args = typing.get_args(hint)
        item = args[0]
        return tuple(_convert(v, item, key) for v in value)
    if hint is bool:
        if not isinstance(value, bool):
            raise RecipeError(f"recipe key '{key}' must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise RecipeError(f"recipe key '{key}' must be an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, str):   # YAML 1.1 reads "1e-3" (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RecipeError(f"recipe key '{key}' must be a number, got {value!r}")
        return float(value)
    if hint is str:
        if value is None:
            return ""
        return str(value)
    return value


def _build(cls, raw: dict, prefix: str = ""):
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in names:
            raise RecipeError(f"unknown recipe key '{prefix}{key}'")
    kwargs = {k: _convert(v, hints[k], prefix + k) for k, v in raw.items()}
    return cls(**kwargs)


def _check_key(key: str) -> None:
    """RecipeError naming ``key`` unless it is a dotted path to a recipe field."""
    cls = Recipe
    parts = key.split(".")
    for i, part in enumerate(parts):
        if cls is dict and i == len(parts) - 1:      # one entry of a mapping key
            return
        if cls is None or not dataclasses.is_dataclass(cls):
            raise RecipeError(f"unknown recipe key '{key}'")
        hints = typing.get_type_hints(cls)
        if part not in hints:
            raise RecipeError(f"unknown recipe key '{key}'")
        hint = hints[part]
        cls = (hint if dataclasses.is_dataclass(hint)
               else dict if typing.get_origin(hint) is dict else None)


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """``raw`` with each ``dotted.key=value`` applied (values parsed as YAML scalars)."""
    raw = _plain(raw)
    for item in overrides:
        if "=" not in item:
            raise RecipeError(f"override '{item}' is not of the form key=value")
        key, text = item.split("=", 1)
        _check_key(key)
        value = _override_value(key, text)
        node, parts = raw, key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise RecipeError(f"unknown recipe key '{key}'")
        node[parts[-1]] = value
    return raw


def _override_value(key: str, text: str):
    """The YAML scalar (or flow list/mapping) of ``key=text``, with the limits of a user
    file (no aliases, nesting and size capped)."""
    from wamdiff2_core.user_files import MAX_LINE_BYTES, parse_yaml

    if text == "":
        return ""
    if len(text) > MAX_LINE_BYTES:
        raise RecipeError(f"override {key} is longer than {MAX_LINE_BYTES} characters")
    try:
        return parse_yaml(text, key, "override")
    except ValueError as exc:
        raise RecipeError(str(exc)) from None


def build_recipe(raw: dict, overrides: list[str] = ()) -> Recipe:
    """A Recipe from a mapping plus overrides; unknown keys are a RecipeError naming them."""
    return _build(Recipe, apply_overrides(raw or {}, list(overrides)))


def load_recipe(path: str | Path, overrides: list[str] = ()) -> Recipe:
    """Read a YAML recipe file and apply ``key=value`` overrides."""
    raw = read_recipe_yaml(path, "recipe file") or {}
    if not isinstance(raw, dict):
        raise RecipeError(f"recipe file {path} must hold a mapping")
    return build_recipe(raw, overrides)


def read_recipe_yaml(path: str | Path, what: str):
    """The YAML document of a recipe or pipeline file, read within a user file's limits
    (``user_files.read_yaml``); RecipeError (one sentence naming the file) otherwise."""
    from wamdiff2_core.user_files import read_yaml

    try:
        return read_yaml(path, what)
    except ValueError as exc:
        raise RecipeError(str(exc)) from None


def recipe_dir() -> Path:
    """Where the shipped recipes live (``config/training`` of the repository)."""
    return Path(__file__).resolve().parents[2] / "config" / "training"


def find_recipe(name: str | Path) -> Path:
    """A recipe path as given, or a shipped recipe by file name (``block32.yaml``)."""
    path = Path(name)
    try:
        if path.exists() or path.is_symlink():
            return path
    except OSError:                     # a name too long for the file system names no file
        raise RecipeError(f"recipe {str(name)[:200]} does not exist") from None
    for candidate in (recipe_dir() / path.name, recipe_dir() / f"{path.name}.yaml"):
        if candidate.exists():
            return candidate
    raise RecipeError(f"recipe {name} does not exist (shipped recipes are in {recipe_dir()})")
