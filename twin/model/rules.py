"""Domain rules the predictors, the engine and the reports share: each written once, here.

- SLO: a request meets its SLOs when its TTFT and its TPOT are within the deployment's targets
  (a one-token answer has no TPOT); a decode batch is "within the TPOT SLO" by the same test.
- MTP: a decode step makes one token per sequence plus one draft token per MTP module of the model
  (ref 3 multi-token prediction; DeepSeek-R1 has one module), each draft accepted with the
  deployment's acceptance rate and only if the drafts before it were (assumption for more than one
  module: acceptances are independent).
- MoE all-to-all: a token is written once to each distinct remote rank holding one of its top-k
  experts (uniform routing), in dispatch and again in combine, in every MoE layer.
"""
from __future__ import annotations

import numpy as np


def tpot_within(tpot_ms, tpot_slo_ms: float):
    return tpot_ms <= tpot_slo_ms


def slo_met(ttft_ms, tpot_ms, output_tokens, ttft_slo_ms: float, tpot_slo_ms: float):
    """Per request (arrays or scalars): both latency SLOs met."""
    return (ttft_ms <= ttft_slo_ms) & (tpot_within(tpot_ms, tpot_slo_ms) | (output_tokens <= 1))


def draft_tokens(mtp_modules: int, mtp_on: bool, steps: int = 0) -> int:
    """Draft tokens a decode step proposes per sequence: `steps` when the deployment chains the
    MTP module (SGLang), else one per module."""
    return (steps or mtp_modules) if mtp_on and mtp_modules else 0


def expected_tokens_per_step(drafts: int, acceptance: float) -> float:
    """Mean tokens a sequence gains per step: 1 + acceptance + acceptance^2 + ... (drafts terms)."""
    return 1.0 + sum(acceptance ** i for i in range(1, drafts + 1))


def accepted_tokens(uniform: np.ndarray, acceptance: float) -> np.ndarray:
    """Tokens each sequence gains this step from its uniform draws (n x drafts, or n for one
    draft): 1 plus the leading run of accepted drafts."""
    if uniform.ndim == 1:
        return (uniform < acceptance) + 1
    return np.cumprod(uniform < acceptance, axis=1).sum(axis=1) + 1


def remote_ranks(ep: int, top_k: int) -> float:
    """Expected distinct remote ranks one token's top-k experts live on (EP ranks, uniform routing)."""
    return (ep - 1) * (1 - (1 - 1 / ep) ** top_k) if ep > 1 else 0.0


def a2a_step_bytes(ep: int, top_k: int, tokens_per_die: float, dies: int, moe_layers: int,
                   dispatch_bytes: float, combine_bytes: float) -> float:
    """Bytes one step's MoE dispatch and combine put on the fabric over all MoE layers."""
    per = tokens_per_die * remote_ranks(ep, top_k) * (dispatch_bytes + combine_bytes)
    return per * dies * moe_layers
