"""Token choice from logits without host synchronisation."""
from __future__ import annotations

import torch


def gumbel_noise(shape: torch.Size, generator: torch.Generator | None,
                 device: torch.device) -> torch.Tensor:
    """Standard Gumbel noise, finite everywhere: ``argmax(logits / T + noise)`` samples
    softmax(logits / T)."""
    u = torch.rand(shape, generator=generator, device=device)
    return -torch.log((-torch.log(u.clamp_min(1e-20))).clamp_min(1e-20))


def choose_tokens(logits: torch.Tensor, mask_id: int, temperature: float,
                  generator: torch.Generator | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Predicted tokens and their confidences (fp32) for logits (B, K, V).

    The mask token is never predicted. Greedy at temperature 0; otherwise Gumbel-max sampling
    from softmax(logits / T). The confidence is the model's own (untempered) probability of
    the chosen token, so the commit rules see the same confidences at any temperature (at a
    low T tempered ones are all near 1 and a rule would commit a whole block at once).
    """
    logits = logits.float()
    logits[..., mask_id] = float("-inf")
    probs = torch.softmax(logits, dim=-1)                                   # (B, K, V)
    if temperature > 0:
        gumbel = gumbel_noise(probs.shape, generator, probs.device)
        tokens = torch.argmax(logits / temperature + gumbel, dim=-1)
    else:
        tokens = torch.argmax(probs, dim=-1)                                # (B, K)
    conf = torch.gather(probs, -1, tokens.unsqueeze(-1)).squeeze(-1)        # (B, K)
    return tokens, conf
