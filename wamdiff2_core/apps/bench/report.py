"""Plain-text layout of a decoding benchmark report (the data lives in ``bench``)."""
from __future__ import annotations

from wamdiff2_core.apps.bench.exact import exact_lines

LABELS = {"ar_optimised": "AR optimised", "diffusion_reference": "diffusion reference",
          "diffusion_fast": "diffusion fast", "exact_fast": "exact fast"}
LABELS.update({f"{k}_constrained": f"{v}, constrained" for k, v in list(LABELS.items())})
RATIO_LABELS = {"fast_vs_ar": "diffusion fast / AR optimised (tokens/s)",
                "fast_vs_reference": "diffusion fast / diffusion reference (tokens/s)",
                "reference_vs_ar": "diffusion reference / AR optimised (tokens/s)",
                "l2_fast_vs_ar": "planning L2, diffusion fast / AR (paired)",
                "exact_vs_ar": "exact fast / AR optimised (tokens/s)",
                "exact_gpu_projection": "exact, GPU projection (x AR)"}


def _f(x, fmt: str = ".2f") -> str:
    return "n/a" if x is None else format(x, fmt)


def _comparison_lines(c: dict, title: str) -> list[str]:
    """Ratios, paired L2 and fast == reference of one constraint setting."""
    lines = ["", f"{title}:"]
    for key, value in c["ratios"].items():
        lines.append(f"{RATIO_LABELS[key]:<50}{value:>8.2f}x")
        spread = c.get("fast_vs_ar_per_pass")
        if key == "fast_vs_ar" and spread and len(spread["values"]) > 1:
            each = " ".join(f"{v:.2f}" for v in spread["values"])
            lines.append(f"  each pass: {each} (median {spread['median']:.2f}x)")
    if c.get("l2_paired"):
        p = c["l2_paired"]
        lines.append(f"(paired L2: the {p['samples']} frames where both plans parse: diffusion "
                     f"fast {_f(p['l2_avg_a'])} m, AR {_f(p['l2_avg_b'])} m)")
    same = "yes" if c["fast_matches_reference"] else \
        f"NO ({100 * c['fast_token_agreement']:.0f}% of tokens)"
    lines.append(f"{'diffusion fast answers == reference answers':<50}{same:>9}")
    return lines


def format_report(r: dict) -> str:
    """The report as a few aligned tables."""
    fast = r["fast"]
    runs = (f", {r['samples']} prompts x {r['repeats']} repeat(s)" if "decoders" in r
            else ", latency only")
    lines = [f"decode benchmark: {r['device']} {r['dtype']}, {r['parameters'] / 1e6:.1f}M "
             f"parameters, block {r['block_size']}, rule {r['decode']['commit_rule']}, "
             f"batch {r['batch']}{runs}",
             f"prompts: {r.get('data') or 'synthetic (random images, no ground truth)'}",
             f"fast decoder: mode {fast['resolved_mode']}, attention "
             f"{fast['resolved_attention']}, done-check every {fast['sync_every']} step(s)",
             ""]
    if "decoders" in r:
        lines += _decoder_lines(r)
    lines += _latency_lines(r)
    settings = r.get("constraints", ["off"])
    checks = [(r, settings[0]), (r.get("constrained"), "on")]
    checks += [(c, title) for title, c in r.get("exact", {}).items()]
    for c, title in checks:
        for key, t in (c or {}).get("targets", {}).items():
            verdict = "n/a" if t["met"] is None else ("met" if t["met"] else "NOT met")
            op = "<=" if key.startswith("l2") else ">="
            why = f" ({t['why']})" if t.get("why") else ""
            lines.append(f"target (constraints {title}) {RATIO_LABELS[key]} {op} {t['want']}: "
                         f"{_f(t['got'])} -> {verdict}{why}")
    lines += [f"note: {n}" for n in r["notes"]]
    return "\n".join(lines)


def _decoder_lines(r: dict) -> list[str]:
    """The decoders' table and each constraint setting's ratios."""
    lines = []
    head = (f"{'decoder':<34}{'tokens/s':>10}{'ms/token':>10}{'ms/fwd':>9}{'fwd/block':>10}"
            f"{'tok/fwd':>9}{'prefill ms':>11}{'L2 (m)':>8}{'unparsed':>9}")
    lines += [head, "-" * len(head)]
    for name, d in r["decoders"].items():
        l2 = d.get("l2") or {}
        unparsed = f"{l2['parse_failures']}/{l2['samples']}" if l2 else "n/a"
        lines.append(f"{LABELS[name]:<34}{d['tokens_per_s']:>10.1f}{d['ms_per_token']:>10.2f}"
                     f"{d['ms_per_forward']:>9.2f}{d['forwards_per_block']:>10.2f}"
                     f"{d['tokens_per_forward']:>9.2f}{d['prefill_ms_per_call']:>11.1f}"
                     f"{_f(l2.get('l2_avg')):>8}{unparsed:>9}")
    settings = r.get("constraints", ["off"])
    if "ratios" in r:
        lines += _comparison_lines(r, f"constraints {settings[0]}")
    if "constrained" in r:
        lines += _comparison_lines(r["constrained"], "constraints on")
    for title, c in r.get("exact", {}).items():
        lines += exact_lines(c, f"constraints {title}; {r['exact_settings']}")
    return lines + [""]


def _latency_lines(r: dict) -> list[str]:
    """The per-forward latency table (and the projection)."""
    lines = ["per-forward latency (ms) of the fast decoders' steps, batch "
             f"{r['batch']}, one prompt:"]
    modes = list(r["latency_ms"])
    lines.append(f"{'':<28}" + "".join(f"{m:>10}" for m in modes))
    k = r["block_size"]
    width = r["latency_ms"][modes[0]].get("verify_width")
    for key, label in (("ar_step", "AR token step"),
                       ("block_step", f"block step ({k})"),
                       ("first_step", f"fused first step ({k}+{k})"),
                       ("commit", f"commit pass ({k})"),
                       ("block_step_constrained", f"block step ({k}), constrained"),
                       ("last_step_constrained", "  budget's last step (fill)"),
                       ("constraint_select", "  constrained selection alone"),
                       ("constraint_fill", "  left-to-right fill alone"),
                       ("exact_verify", f"exact verify step ({width})")):
        if all(key in r["latency_ms"][m] for m in modes):
            lines.append(f"{label:<28}" + "".join(f"{r['latency_ms'][m][key]:>10.2f}"
                                                  for m in modes))
    for mode, p in (r.get("projection") or {}).items():
        lines.append(f"projection ({mode}) at {p['tokens_per_forward']:.2f} tokens/forward: "
                     f"diffusion {p['diffusion_tokens_per_s']:.0f} tokens/s, AR "
                     f"{p['ar_tokens_per_s']:.0f} tokens/s")
    return lines + [""]
