"""Scratch probe of the vision_aux head (not part of the package): for the first 60 detection
records of DATA, the centre map at true centres and elsewhere, and the IoU of the box the head
writes at each true centre.  python head_maps.py TRAINING_CHECKPOINT_DIR DATA.json"""
import json, sys, torch
from pathlib import Path
from PIL import Image
from wamdiff2_core.model.modeling import Wamdiff2Model
from wamdiff2_core.training.vision_aux import VisionAuxHead, VisionTap, CHANNELS, box_targets, boxes_by_image
ckpt = Path(sys.argv[1]); data = Path(sys.argv[2]); lo = int(sys.argv[3]) if len(sys.argv) > 3 else 0
model = Wamdiff2Model.from_pretrained(ckpt / "model")
if lo: model = model.with_max_pixels(lo, lo)
sd = torch.load(ckpt / "vision_aux_head.pt")
sub = int(round((sd["proj.weight"].shape[0] / CHANNELS) ** 0.5))
head = VisionAuxHead(sd["norm.weight"].shape[0], sub); head.load_state_dict(sd); head.eval()
tap = VisionTap(model.hf.model.visual)
recs = [r for r in json.load(open(data)) if r["id"].endswith("_detection")][:60]
def iou(a, b):
    ix = max(0, min(a[2], b[2]) - max(a[0], b[0])); iy = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    u = (a[2]-a[0])*(a[3]-a[1]) + (b[2]-b[0])*(b[3]-b[1]) - ix*iy
    return ix*iy/u if u > 0 else 0
ious, pc, pn = [], [], []
for r in recs:
    img = Image.open(data.parent / r["image"][0]).convert("RGB")
    enc = model.processor.process_images([img])
    with torch.no_grad():
        model.hf.model.visual(enc["pixel_values"], grid_thw=enc["image_grid_thw"])
        t, h, w = enc["image_grid_thw"][0].tolist()
        out = head(tap.tokens, h // 2, w // 2)
    boxes = [tuple(b["bbox"]) for b in r["meta"]["boxes"]]
    g = [(x1/320*1000, y1/180*1000, x2/320*1000, y2/180*1000) for x1,y1,x2,y2 in boxes]
    tgt = box_targets(g, h//2, w//2, sub)
    cen = torch.sigmoid(out[1])
    c = tgt[1] > 0
    if c.any():
        pc += cen[c].tolist()
        for y, x in c.nonzero().tolist():
            pb = (out[2:, y, x]).tolist(); gb = (tgt[2:, y, x]).tolist()
            ious.append(iou(pb, gb))
    pn += cen[~c].flatten().tolist()
import statistics as st
print("centre prob at true centres: mean %.3f median %.3f" % (st.mean(pc), st.median(pc)))
print("centre prob elsewhere: mean %.4f, frac>0.2 %.4f" % (st.mean(pn), sum(p > 0.2 for p in pn)/len(pn)))
print("corner IoU at true centres: mean %.3f, >=0.5: %.3f (n=%d)" % (st.mean(ious), sum(i >= .5 for i in ious)/len(ious), len(ious)))
