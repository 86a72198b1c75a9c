"""Closed-form formulas from the Megatron papers, kept literal so tests can check them against the text.

* Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM":
  parameter count P = 12·l·h²·(1 + 13/(12h) + (V+s)/(12·l·h)) and FLOPs per iteration
  F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) (which counts the extra forward of full activation recomputation),
  pipeline bubble (p−1)/m, interleaved (p−1)/(v·m).
* Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models": activation bytes
  per transformer layer with 16-bit activations and 1-byte dropout masks.

The planner itself uses the general counts in :mod:`.model` and :func:`activation_breakdown`; for a GPT layer
with the paper's defaults those reduce exactly to the functions here, which the tests assert.
"""
from __future__ import annotations

RECOMPUTE_MODES = ("none", "selective", "full")


# --------------------------------------------------------------------------------------------- parameters


def paper_parameter_count(layers: int, hidden: int, vocab: int, seq: int) -> float:
    """Narayanan et al. 2021, eq. in §5.1: 12·l·h²·(1 + 13/(12h) + (V+s)/(12·l·h))."""
    l, h = layers, hidden
    return 12 * l * h * h * (1 + 13 / (12 * h) + (vocab + seq) / (12 * l * h))


# ------------------------------------------------------------------------------------------------- flops


def paper_flops_per_iteration(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)): forward, backward (2×) and the recompute forward (1×) of every
    transformer layer, and forward + backward of the logit layer (6·B·s·h·V), counting only matmuls."""
    B, s, l, h, V = batch, seq, layers, hidden, vocab
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


def model_flops_per_iteration(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """The same count without recomputation: 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)).

    This is the "model FLOPs" of MFU: the logit layer is never recomputed, so its share is 6·B·s·h·V in both
    formulas, which is why its coefficient here is V/(12·l·h) and not the paper's V/(16·l·h).
    """
    B, s, l, h, V = batch, seq, layers, hidden, vocab
    return 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))


# -------------------------------------------------------------------------------------------- activations


def korthikanti_bytes_per_layer(s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False,
                                recompute: str = "none") -> float:
    """The paper's closed forms (Korthikanti et al. 2022, Table 2), bytes per layer per micro-batch:

    ========================================  =====================================
    no parallelism                            s·b·h·(34 + 5·a·s/h)
    tensor parallel                           s·b·h·(10 + 24/t + 5·a·s/(h·t))
    tensor + sequence parallel                s·b·h·(34/t + 5·a·s/(h·t))
    tensor parallel + selective recompute     s·b·h·(10 + 24/t)
    tensor + sequence + selective recompute   s·b·h·34/t
    full recompute                            2·s·b·h  (2·s·b·h/t with sequence parallelism)
    ========================================  =====================================
    """
    _check_recompute(recompute)
    base = s * b * h
    if recompute == "full":
        return 2 * base / (t if sp else 1)
    attn = 5 * a * s / (h * t) if recompute == "none" else 0.0
    if sp:
        return base * (34 / t + attn)
    return base * (10 + 24 / t + attn)


def activation_breakdown(s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False, recompute: str = "none",
                         dtype_bytes: int = 2, *, ffn_hidden_size: int | None = None,
                         query_groups: int | None = None, head_dim: int | None = None, gated: bool = False,
                         dropout: bool = True, flash: bool = False, experts_per_token: int = 1) -> dict:
    """Bytes each stored tensor of one transformer layer takes for one micro-batch, by name.

    Follows Korthikanti et al. 2022 §4.1 tensor by tensor so that other shapes (GQA, SwiGLU, MoE, no dropout,
    fused attention) are covered by the same accounting: 16-bit tensors cost ``dtype_bytes`` per element,
    dropout masks 1 byte. Tensors in the "replicated" regions (layer norms, dropouts, linear inputs) are
    split over ``t`` only with sequence parallelism; those inside the TP regions always are. ``flash=True``
    models a fused attention kernel that keeps only a float32 log-sum-exp per query instead of the a·s²
    score, mask and dropout tensors. ``experts_per_token`` scales the MLP tensors (each token is sent to k
    experts); router tensors are not counted. With the defaults the total equals
    :func:`korthikanti_bytes_per_layer`.
    """
    _check_recompute(recompute)
    f = ffn_hidden_size or 4 * h
    d = head_dim or h // a
    g = query_groups or a
    e = dtype_bytes
    rep = 1 / t if sp else 1.0  # replicated regions are split only by sequence parallelism
    sbh = s * b * h
    if recompute == "full":
        return {"layer_input": e * sbh * rep}
    out = {
        "ln1_input": e * sbh * rep,
        "qkv_input": e * sbh * rep,
        "q": e * s * b * a * d / t,
        "kv": e * 2 * s * b * g * d / t,
        "proj_input": e * s * b * a * d / t,
        "ln2_input": e * sbh * rep,
        "fc1_input": e * sbh * rep * experts_per_token,
        "act_input": e * s * b * f * (2 if gated else 1) / t * experts_per_token,
        "fc2_input": e * s * b * f / t * experts_per_token,
    }
    if dropout:
        out["attn_dropout_mask"] = sbh * rep
        out["mlp_dropout_mask"] = sbh * rep
    if flash:
        out["softmax_lse"] = 4 * s * b * a / t
    elif recompute == "none":
        scores = s * s * b * a / t
        out["softmax_output"] = e * scores
        if dropout:
            out["softmax_dropout_mask"] = scores
            out["softmax_dropout_output"] = e * scores
    return out


def activation_bytes_per_layer(s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False,
                               recompute: str = "none", dtype_bytes: int = 2, **shape) -> float:
    """Activation bytes one layer keeps for backward, per micro-batch (sum of :func:`activation_breakdown`).

    With the default GPT shape (ffn 4h, no GQA, dropout, unfused attention, 2-byte activations) this is
    Korthikanti et al.'s table; the saved-tensor-hook test of the real model calls it with the model's shape.
    """
    return float(sum(activation_breakdown(s, b, h, a, t, sp, recompute, dtype_bytes, **shape).values()))


def _check_recompute(mode: str) -> None:
    if mode not in RECOMPUTE_MODES:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE_MODES)}, got {mode!r}")


# ------------------------------------------------------------------------------------------------ pipeline


def pipeline_bubble(pp: int, microbatches: int, vpp: int = 1) -> float:
    """Bubble time as a fraction of ideal compute: (p−1)/m, or (p−1)/(v·m) with v interleaved chunks."""
    return (pp - 1) / (vpp * microbatches)


def inflight_microbatch_chunks(pp: int, microbatches: int, vpp: int = 1, rank: int = 0) -> int:
    """Model chunks whose activations pipeline rank ``rank`` holds at its peak under 1F1B.

    Non-interleaved: rank r runs p−r warm-up forwards before its first backward, so the first stage holds p
    micro-batches of its L/p layers (= L layers' worth, Korthikanti §4.2.3). Interleaved (Megatron's
    schedule): 2·(p−r−1) + (v−1)·p warm-up chunks plus the one in flight, each of L/(p·v) layers, which for
    r = 0 is L·(1 + (p−1)/(p·v)) layers' worth. Never more than the micro-batches there are.
    """
    if vpp == 1:
        return min(pp - rank, microbatches)
    return min(2 * (pp - rank - 1) + (vpp - 1) * pp + 1, microbatches * vpp)


# -------------------------------------------------------------------------------------------- state bytes

# Bytes per parameter held by a rank: (weight, gradient, optimizer state) for Adam with mixed precision as
# Megatron's distributed-optimizer guide counts it. The optimizer part (fp32 master weights, fp32 main grads
# where the model grads are 16-bit, Adam m and v) is what the distributed optimizer shards over data parallel.
STATE_BYTES = {
    "bf16": (2, 4, 12),  # bf16 weights, fp32 main grads; fp32 master + m + v          → 18, or 6 + 12/d
    "fp16": (2, 2, 16),  # fp16 weights and grads; fp32 master + fp32 grad copy + m + v → 20, or 4 + 16/d
    "fp32": (4, 4, 8),   # fp32 weights and grads; m + v                                → 16, or 8 + 8/d
}


def bytes_per_parameter(precision: str = "bf16", distributed_optimizer: bool = False, dp: int = 1) -> float:
    """18 bytes per parameter for bf16 with fp32 main grads, 6 + 12/dp with the distributed optimizer."""
    if precision not in STATE_BYTES:
        raise ValueError(f"precision must be one of {', '.join(STATE_BYTES)}, got {precision!r}")
    w, g, o = STATE_BYTES[precision]
    return w + g + (o / dp if distributed_optimizer else o)
