"""A memory plan before booking GPUs: per-process bytes of a recipe on N devices.

Parameters, gradients and AdamW state are counted exactly: FSDP2 shards each parameter along
its first dimension as ``torch.chunk`` does (process r holds rows ``[r*c, (r+1)*c)`` of
``c = ceil(rows / N)``), the master weights, gradients and both moments are fp32, and each
parameter has a 4-byte step counter; a 2-process run measures the same bytes
(``test/training/test_fsdp.py``). The teacher is counted the same way in its storage dtype.

Activations are an estimate of what autograd keeps for the backward pass, per sample:

- a text decoder layer, per token, with ``c`` bytes per element of the compute dtype and
  hidden ``h``, query width ``q`` (heads x head_dim), key/value width ``k``, MLP width ``i``:
  ``(8 + 4c) h + (4 + 5c) q + (4 + c) k + 4c i + 8 heads + 4 kv_heads + 8 + c L`` (the two
  RMSNorms keep an fp32 copy, the q/k norms theirs; attention keeps q, the repeated k and v,
  its output and the fp32 log-sum-exp; the boolean mask becomes a float mask of ``L`` per
  token; the MLP keeps gate, up, SiLU and product). Counted against autograd's saved
  tensors of transformers' layer on this CPU: equal for fp32 and bf16 weights;
- a vision block, per patch: ``11c h + 2c i + 4c + 4 heads`` (its rotary tables are fp32
  and shared by all blocks);
- with activation checkpointing, a layer keeps only its input (``r h`` per token, ``r`` the
  residual stream's bytes) and one layer at a time is recomputed in full;
- the output layer over the answer positions: logits, their fp32 copy and log-softmax
  (``(c + 8) V`` per position; distillation adds ``16 V`` for the teacher's view).

Under autocast (fp32 weights, bf16 compute) the bf16 count is used, plus the bf16 weight
copies autocast keeps for the backward. Transient buffers (FSDP2's all-gathered units,
DDP's gradient buckets) are listed on their own lines. The activation estimate is checked
against a GPU's peak by ``scripts/gpu_check.sh`` (step ``fsdp``) where a GPU is available.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

GIB = 2 ** 30
RESERVE = 0.10          # of a device's memory: CUDA context, allocator slack, NCCL buffers
PROMPT_TEXT_TOKENS = 64
ADAM_STATES = 2


@dataclass(frozen=True)
class Shape:
    """What the plan needs of one model: its parameters and the layer dimensions."""

    name: str
    params: tuple[tuple[str, tuple[int, ...]], ...]   # unique parameters (tied: once)
    units: tuple[tuple[str, ...], ...]                # parameter names of each FSDP unit
    text: dict                                        # hidden, heads, kv_heads, head_dim,
    vision: dict                                      # intermediate, layers, vocab / depth..
    patch: int = 16
    merge: int = 2
    max_pixels: int = 0

    @property
    def numel(self) -> int:
        return sum(math.prod(s) for _, s in self.params)


def shape_of(hf, name: str, max_pixels: int = 0) -> Shape:
    """The Shape of a Qwen3-VL module (live, sharded or on the meta device)."""
    from wamdiff2_core.training.parallel import shard_units

    params = tuple((n, tuple(p.shape)) for n, p in hf.named_parameters())
    ids = {id(p): n for n, p in hf.named_parameters()}
    units = tuple(tuple(ids[id(p)] for p in u.parameters() if id(p) in ids)
                  for u in shard_units(hf))
    t, v = hf.config.text_config, hf.config.vision_config
    text = dict(hidden=t.hidden_size, heads=t.num_attention_heads,
                kv_heads=t.num_key_value_heads,
                head_dim=getattr(t, "head_dim", None) or t.hidden_size // t.num_attention_heads,
                intermediate=t.intermediate_size, layers=t.num_hidden_layers,
                vocab=t.vocab_size)
    vision = dict(hidden=v.hidden_size, heads=v.num_heads, intermediate=v.intermediate_size,
                  depth=v.depth)
    return Shape(name, params, units, text, vision, v.patch_size, v.spatial_merge_size,
                 max_pixels)


def load_shape(source: str) -> Shape:
    """The Shape of a preset (``qwen3-vl-2b``) or a checkpoint directory, built on the meta
    device (no weights are read or allocated)."""
    import torch

    from wamdiff2_core.model.modeling import Wamdiff2Model
    from wamdiff2_core.model.presets import is_preset

    if is_preset(source):
        model = Wamdiff2Model.from_preset(source, device="meta")
        return shape_of(model.hf, source, model.processor.config.max_pixels)
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    from wamdiff2_core.model.preprocess import read_processor_config

    path = Path(source)
    cfg = Qwen3VLConfig.from_pretrained(str(path), local_files_only=True)   # never a hub
    with torch.device("meta"):
        hf = Qwen3VLForConditionalGeneration(cfg)
    return shape_of(hf, str(path), read_processor_config(path)[0].max_pixels)


def shard_rows(rows: int, world: int, rank: int) -> int:
    """Rows of a ``rows``-row parameter that process ``rank`` of ``world`` holds under FSDP2
    (``torch.chunk`` along dim 0: chunks of ``ceil(rows / world)``, the last ones short or
    empty)."""
    chunk = -(-rows // world)
    return max(0, min(chunk, rows - rank * chunk))


def local_numel(shape: tuple[int, ...], world: int, rank: int, sharded: bool) -> int:
    if not sharded or not shape:
        return math.prod(shape)
    return shard_rows(shape[0], world, rank) * math.prod(shape[1:])


# ------------------------------------------------------------------------- activations
def text_layer_bytes(t: dict, tokens: int, c: int) -> int:
    """Bytes one text decoder layer keeps for the backward, for one sample of ``tokens``."""
    h, q, k = t["hidden"], t["heads"] * t["head_dim"], t["kv_heads"] * t["head_dim"]
    per_token = ((8 + 4 * c) * h + (4 + 5 * c) * q + (4 + c) * k + 4 * c * t["intermediate"]
                 + 8 * t["heads"] + 4 * t["kv_heads"] + 8 + c * tokens)
    return per_token * tokens


def vision_block_bytes(v: dict, patches: int, c: int) -> int:
    """Bytes one vision block keeps for the backward, for ``patches`` patches."""
    h = v["hidden"]
    return (11 * c * h + 2 * c * v["intermediate"] + 4 * c + 4 * v["heads"]) * patches


@dataclass(frozen=True)
class Workload:
    """One sample as the plan sees it, and how it is computed."""

    tokens: int                  # text sequence length (prompt, image tokens, answer layout)
    patches: int                 # vision patches (all images of the sample)
    answer_positions: int        # positions whose logits the loss reads
    distill: bool = False
    compute_bytes: int = 4       # c: 2 for bf16 compute, 4 for fp32
    residual_bytes: int = 4      # the residual stream between layers
    autocast: bool = False       # fp32 weights under bf16 autocast


def activation_bytes(s: Shape, w: Workload, checkpointing: bool) -> int:
    """Bytes of activations one sample keeps (peak over the backward pass)."""
    c, t, v = w.compute_bytes, s.text, s.vision
    layer = text_layer_bytes(t, w.tokens, c)
    block = vision_block_bytes(v, w.patches, c) if w.patches else 0
    logits = t["vocab"] * w.answer_positions * (c + 8 + (16 if w.distill else 0))
    mask = w.tokens * w.tokens                                     # the boolean 4-D mask
    if not checkpointing:
        return t["layers"] * layer + v["depth"] * block + logits + mask
    kept = (t["layers"] * w.residual_bytes * t["hidden"] * w.tokens
            + v["depth"] * w.residual_bytes * v["hidden"] * w.patches)
    return kept + max(layer, block) + logits + mask


# ------------------------------------------------------------------------------- plan
@dataclass(frozen=True)
class PlanSetup:
    strategy: str                 # none | ddp | fsdp
    world: int
    rank: int = 0
    gpu: bool = True
    precision: str = "bf16"
    micro_batch: int = 1
    teacher_placement: str = "replicated"     # sharded | replicated


@dataclass
class MemoryPlan:
    """Per-process bytes by item; ``activations`` holds (without, with) checkpointing."""

    setup: PlanSetup
    student: Shape
    teacher: Shape | None
    workload: Workload
    items: dict[str, int] = field(default_factory=dict)
    activations: tuple[int, int] = (0, 0)

    def total(self, checkpointing: bool) -> int:
        return sum(self.items.values()) + self.activations[int(checkpointing)]

    def fits(self, device_bytes: int, checkpointing: bool) -> bool:
        return self.total(checkpointing) <= (1 - RESERVE) * device_bytes


def _unit_sizes(s: Shape) -> tuple[int, int]:
    """(largest FSDP unit, the root's own parameters) in elements."""
    sizes = dict(s.params)
    in_units = {n for u in s.units for n in u}
    largest = max((sum(math.prod(sizes[n]) for n in u) for u in s.units), default=0)
    root = sum(math.prod(sh) for n, sh in s.params if n not in in_units)
    return largest, root


def plan(student: Shape, teacher: Shape | None, setup: PlanSetup, workload: Workload
         ) -> MemoryPlan:
    """The memory plan of process ``setup.rank``."""
    st = setup
    sharded = st.strategy == "fsdp"
    mp_bf16 = sharded and st.gpu and st.precision == "bf16"     # FSDP2's bf16 policy
    local = sum(local_numel(sh, st.world, st.rank, sharded) for _, sh in student.params)
    items = {"parameters": 4 * local, "gradients": 4 * local,
             "optimizer": ADAM_STATES * 4 * local + 4 * len(student.params)}
    largest, root = _unit_sizes(student)
    if sharded:
        items["fsdp buffers"] = (2 if mp_bf16 else 4) * (root + 2 * largest) + 4 * (
            root + largest)
    elif st.strategy == "ddp":
        items["ddp buckets"] = 4 * student.numel
    if workload.autocast:
        items["autocast copies"] = 2 * student.numel
    if teacher is not None:
        tbytes = 2 if st.precision == "bf16" else 4
        tshard = st.teacher_placement == "sharded"
        items["teacher"] = tbytes * sum(local_numel(sh, st.world, st.rank, tshard)
                                        for _, sh in teacher.params)
        if tshard:
            t_largest, t_root = _unit_sizes(teacher)
            items["teacher buffers"] = tbytes * (t_root + 2 * t_largest)
    per_sample = [activation_bytes(student, workload, ac) for ac in (False, True)]
    acts = (st.micro_batch * per_sample[0], st.micro_batch * per_sample[1])
    return MemoryPlan(setup, student, teacher, workload, items, acts)


def workload_for(recipe, student: Shape, setup: PlanSetup, tokens: int = 0,
                 images: int = 1, image_pixels: int = 0) -> Workload:
    """A sample of the recipe: ``images`` images of ``image_pixels`` (default: the model's
    budget) and ``tokens`` text tokens (default: a 64-token prompt, the images' merged
    tokens and the answer layout: ``max_answer_tokens``, twice for diffusion)."""
    pixels = image_pixels or student.max_pixels
    patches = images * (pixels // (student.patch ** 2))
    answer = recipe.data.max_answer_tokens
    layout = answer if recipe.objective == "ar" else 2 * answer
    tokens = tokens or PROMPT_TEXT_TOKENS + patches // (student.merge ** 2) + layout
    bf16 = setup.precision == "bf16"
    mp_bf16 = setup.strategy == "fsdp" and setup.gpu and bf16
    return Workload(tokens=tokens, patches=patches, answer_positions=answer + 1,
                    distill=recipe.objective == "distill", compute_bytes=2 if bf16 else 4,
                    residual_bytes=2 if mp_bf16 else 4, autocast=bf16 and not mp_bf16)


def teacher_placement(recipe, strategy: str) -> str:
    """Where the recipe's teacher lives under ``strategy`` (``auto``: with the student)."""
    p = recipe.distill.teacher_placement
    if p != "auto":
        return p
    return "sharded" if strategy == "fsdp" else "replicated"


def auto_strategy(recipe, student: Shape, teacher: Shape | None, world: int, gpu: bool,
                  device_bytes: int) -> tuple[str, MemoryPlan]:
    """``none`` for one process; DDP when a whole replica (with the recipe's micro-batch and
    activation checkpointing setting) fits ``device_bytes``; FSDP2 otherwise."""
    if world == 1:
        setup = PlanSetup("none", 1, 0, gpu, recipe.train.precision, recipe.train.micro_batch,
                          teacher_placement(recipe, "none"))
        return "none", plan(student, teacher, setup, workload_for(recipe, student, setup))
    ac = recipe.train.activation_checkpointing
    setup = PlanSetup("ddp", world, 0, gpu, recipe.train.precision, recipe.train.micro_batch,
                      teacher_placement(recipe, "ddp"))
    ddp = plan(student, teacher, setup, workload_for(recipe, student, setup))
    if ddp.fits(device_bytes, ac):
        return "ddp", ddp
    setup = replace(setup, strategy="fsdp", teacher_placement=teacher_placement(recipe, "fsdp"))
    return "fsdp", plan(student, teacher, setup, workload_for(recipe, student, setup))


# ------------------------------------------------------------------------------ report
def _gib(n: int) -> str:
    return f"{n / GIB:8.2f} GiB"


def format_plan(p: MemoryPlan, device_bytes: int) -> str:
    """The plan as a table: one column without, one with activation checkpointing."""
    st, w = p.setup, p.workload
    lines = [f"memory plan of process {st.rank} of {st.world} ({st.strategy}, "
             f"{'GPU' if st.gpu else 'CPU'}, {st.precision}, micro-batch {st.micro_batch})",
             f"student {p.student.name}: {p.student.numel / 1e9:.3f} B parameters "
             f"(fp32 weights, gradients and AdamW moments)"]
    if p.teacher is not None:
        lines.append(f"teacher {p.teacher.name}: {p.teacher.numel / 1e9:.3f} B parameters, "
                     f"{st.teacher_placement}, {'bf16' if st.precision == 'bf16' else 'fp32'}")
    lines.append(f"sample: {w.tokens} tokens, {w.patches} vision patches, "
                 f"{w.answer_positions} answer positions")
    lines.append(f"{'':28}{'no checkpointing':>18}{'checkpointing':>16}")
    for name, n in p.items.items():
        lines.append(f"{name:28}{_gib(n):>18}{_gib(n):>16}")
    lines.append(f"{'activations (micro-batch)':28}{_gib(p.activations[0]):>18}"
                 f"{_gib(p.activations[1]):>16}")
    lines.append(f"{'total':28}{_gib(p.total(False)):>18}{_gib(p.total(True)):>16}")
    usable = (1 - RESERVE) * device_bytes
    verdict = ["fits" if p.fits(device_bytes, ac) else "does not fit" for ac in (False, True)]
    lines.append(f"{f'device {device_bytes / GIB:.0f} GiB ({usable / GIB:.1f} usable)':28}"
                 f"{verdict[0]:>18}{verdict[1]:>16}")
    return "\n".join(lines)


def plan_dict(p: MemoryPlan, device_bytes: int) -> dict:
    """The plan as JSON-able numbers (bytes)."""
    return {"setup": vars(p.setup), "student": p.student.name,
            "teacher": p.teacher.name if p.teacher else None, "workload": vars(p.workload),
            "items": dict(p.items), "activations": {"no_checkpointing": p.activations[0],
                                                    "checkpointing": p.activations[1]},
            "total": {"no_checkpointing": p.total(False), "checkpointing": p.total(True)},
            "device_bytes": device_bytes,
            "fits": {"no_checkpointing": p.fits(device_bytes, False),
                     "checkpointing": p.fits(device_bytes, True)}}
