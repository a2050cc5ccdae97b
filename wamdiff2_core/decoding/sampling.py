"""Token choice from logits without host synchronisation."""
from __future__ import annotations

import torch


def gumbel_noise(shape: torch.Size, generator: torch.Generator | None,
                 device: torch.device) -> torch.Tensor:
    """Standard Gumbel noise, finite everywhere: ``argmax(logits / T + noise)`` samples
    softmax(logits / T)."""
    u = torch.rand(shape, generator=generator, device=device)
    return -torch.log((-torch.log(u.clamp_min(1e-20))).clamp_min(1e-20))


#: A temperature: one for the whole batch, or a (B,) tensor, one per row (0: that row greedy).
Temperature = float | torch.Tensor


def row_temperatures(temperature: Temperature, dims: int) -> torch.Tensor | None:
    """A per-row temperature tensor shaped to broadcast over a (B, ...) tensor of ``dims``
    dimensions; None for a single float."""
    if not isinstance(temperature, torch.Tensor):
        return None
    return temperature.float().reshape(-1, *([1] * (dims - 1)))


def choice_scores(logits: torch.Tensor, temperature: Temperature,
                  generator: torch.Generator | None) -> torch.Tensor:
    """What Gumbel-max sampling maximises over the last dimension of ``logits`` (B, ...,
    C): ``logits / T + noise``, or the logits themselves where T is 0 (a (B,) tensor mixes
    sampled and greedy rows in one batch)."""
    rows = row_temperatures(temperature, logits.dim())
    if rows is None and temperature <= 0:
        return logits
    noise = gumbel_noise(logits.shape, generator, logits.device)
    if rows is None:
        return logits / temperature + noise
    return torch.where(rows > 0, logits / rows.clamp_min(1e-6) + noise, logits)


def choose_tokens(logits: torch.Tensor, mask_id: int, temperature: Temperature,
                  generator: torch.Generator | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Predicted tokens and their confidences (fp32) for logits (B, K, V).

    The mask token is never predicted. Greedy at temperature 0; otherwise Gumbel-max sampling
    from softmax(logits / T) (``temperature`` may be a (B,) tensor, one per row). The
    confidence is the model's own (untempered) probability of the chosen token, so the
    commit rules see the same confidences at any temperature (at a low T tempered ones are
    all near 1 and a rule would commit a whole block at once).
    """
    logits = logits.float()
    logits[..., mask_id] = float("-inf")
    probs = torch.softmax(logits, dim=-1)                                   # (B, K, V)
    greedy = torch.argmax(probs, dim=-1)                                    # (B, K)
    rows = row_temperatures(temperature, 2)
    if rows is None:
        tokens = greedy if temperature <= 0 else \
            choice_scores(logits, temperature, generator).argmax(-1)
    else:
        tokens = torch.where(rows > 0, choice_scores(logits, temperature, generator
                                                     ).argmax(-1), greedy)
    conf = torch.gather(probs, -1, tokens.unsqueeze(-1)).squeeze(-1)        # (B, K)
    return tokens, conf
