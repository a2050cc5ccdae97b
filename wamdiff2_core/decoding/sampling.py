"""Token choice from logits without host synchronisation."""
from __future__ import annotations

import torch


def choose_tokens(logits: torch.Tensor, mask_id: int, temperature: float,
                  generator: torch.Generator | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Predicted tokens and their confidences (fp32) for logits (B, K, V).

    The mask token is never predicted. Greedy at temperature 0; otherwise Gumbel-max sampling
    from softmax(logits / T), the confidence being that distribution's probability of the
    sampled token.
    """
    logits = logits.float()
    logits[..., mask_id] = float("-inf")
    if temperature > 0:
        logits = logits / temperature
    probs = torch.softmax(logits, dim=-1)                                   # (B, K, V)
    if temperature > 0:
        u = torch.rand(probs.shape, generator=generator, device=probs.device)
        gumbel = -torch.log(-torch.log(u.clamp_min(1e-20)).clamp_min(1e-20))
        tokens = torch.argmax(logits + gumbel, dim=-1)
    else:
        tokens = torch.argmax(probs, dim=-1)                                # (B, K)
    conf = torch.gather(probs, -1, tokens.unsqueeze(-1)).squeeze(-1)        # (B, K)
    return tokens, conf
