"""``lm_eval --model mwb``: lm-evaluation-harness scoring and generating with an mwb model in-process.

Why a native backend: researchers run ``lm_eval --model hf --model_args pretrained=...`` in-process; through
``mwb serve`` + ``--model local-completions`` they pay HTTP for every request. This backend is lm-eval's own
:class:`~lm_eval.api.model.TemplateLM` (so contexts and continuations are split into tokens exactly as for
``--model hf``: trailing spaces move to the continuation, an empty context gets the BOS token, else the
end-of-document token) on top of mwb's pieces:

* ``loglikelihood``: the requests, longest first, in batches of ``batch_size`` right-padded rows through
  :meth:`~mwb.evaluation.lm.LanguageModel.logits` (causal attention: the pads after a row never reach its
  positions); a row longer than ``max_length + 1`` tokens keeps its last ones, as in ``--model hf``.
* ``loglikelihood_rolling``: lm-eval's own disjoint rolling windows (``context_len=1``), each scored as above
  and summed per document, so a long document gets the same number as from ``--model hf``.
* ``generate_until``: :func:`~mwb.evaluation.generation.generate` (continuous batching on a preallocated KV
  cache), greedy unless ``do_sample``; ``until`` strings and the end-of-document token stop a row, contexts
  keep their last ``max_length - max_gen_toks`` tokens.

``checkpoint`` is anything ``mwb eval --checkpoint`` takes (an mwb run or checkpoint directory, a consolidated
``.safetensors``, a Hugging Face directory, a named model such as ``smollm2-135m``, a ``.gguf`` file), loaded
by :func:`~mwb.evaluation.loading.load_language_model`.

Tensor parallelism: under ``torchrun --nproc-per-node N -m lm_eval --model mwb ...`` every process loads its
TP shard (:func:`~mwb.evaluation.serve_ranks.load_sharded_language_model`, TP = N). TP rank 0 is the only
one lm-eval sees (``rank 0, world_size 1``: it evaluates every document and writes the results); before each
batch of work it broadcasts the token ids to the other ranks, which stay inside this constructor, compute
the same batches (the vocab-parallel logits are gathered on every rank) and exit when rank 0's interpreter
exits (an ``atexit`` message).

Registration: lm-eval 0.4.13 reads no plugin entry points, so the installed ``mwb_lm_eval.pth`` runs
:mod:`mwb.lm_eval_plugin` at start-up, which registers ``mwb`` as a lazy placeholder for this class when
lm-eval's registry is imported (a bare ``lm_eval --model mwb`` then works); the ``lm_eval.models`` entry point
is declared too, for releases that read it. ``mwb-lm-eval`` (:func:`main`) is lm-eval's CLI with this module
registered first, for interpreters that skip ``.pth`` files.
"""
from __future__ import annotations

import atexit
import os
import sys
from typing import Optional

import torch
import torch.nn.functional as F

from mwb.core.config import ConfigError

try:
    import lm_eval.models  # noqa: F401  (lm-eval's own models, registered lazily: --model hf next to mwb)
    from lm_eval import utils as lm_utils
    from lm_eval.api.model import TemplateLM
    from lm_eval.api.registry import model_registry, register_model
except ImportError as e:  # an optional extra: one line, exit status 2 through the CLI
    raise ConfigError("the lm-eval backend needs lm-evaluation-harness: pip install 'mwb[lmeval]' "
                      f"(or pip install lm-eval) ({e})") from None

from mwb.core.named_models import local_checkpoint
from mwb.core.training.launch import init_distributed, under_launcher

from .generation import SamplingParams, generate
from .loading import load_language_model

DEFAULT_MAX_LENGTH = 2048  # lm-eval's own default when a model declares no context length


def score_rows(lm, rows: list[tuple[list[int], list[int]]], batch_size: int,
               max_length: int) -> list[tuple[float, bool]]:
    """``(sum log p(continuation | context), whether greedy decoding gives the continuation)`` for each
    ``(context ids, continuation ids)``: batches of right-padded rows, longest first."""
    order = sorted(range(len(rows)), key=lambda i: -(len(rows[i][0]) + len(rows[i][1])))
    out: list[Optional[tuple[float, bool]]] = [None] * len(rows)
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        inputs, conts = [], []
        for i in chunk:
            ctx, cont = rows[i]
            if not cont:
                raise ValueError("lm-eval asked for the log-likelihood of an empty continuation")
            inputs.append((ctx + cont)[-(max_length + 1):][:-1])
            conts.append(cont)
        width = max(len(x) for x in inputs)
        tokens = torch.tensor([x + [0] * (width - len(x)) for x in inputs], dtype=torch.long)
        logits = lm.logits(tokens)
        for j, i in enumerate(chunk):
            n, end = len(conts[j]), len(inputs[j])
            lp = F.log_softmax(logits[j, end - n:end], dim=-1)
            target = torch.tensor(conts[j], dtype=torch.long, device=lp.device)
            total = float(lp.gather(-1, target[:, None]).sum())
            out[i] = (total, bool((lp.argmax(-1) == target).all()))
    return out  # type: ignore[return-value]


def _parse_batch_size(value) -> int:
    """lm-eval passes ``--batch_size`` as a string ("16", "auto", "auto:4"); mwb takes a number."""
    text = str(value)
    if text.startswith("auto"):
        raise ConfigError("--model mwb needs a numeric batch_size (rows per forward pass), not 'auto'")
    try:
        size = int(text)
    except ValueError:
        raise ConfigError(f"--model mwb: batch_size must be a positive integer, got {value!r}") from None
    if size < 1:
        raise ConfigError(f"--model mwb: batch_size must be >= 1, got {size}")
    return size


class MwbLM(TemplateLM):
    """lm-eval's model ``mwb`` (see the module docstring). Model arguments: ``checkpoint`` (required),
    ``tokenizer`` (overrides the stored one), ``batch_size`` [16], ``max_length`` [the model's positions, else
    2048], ``max_gen_toks`` [256], ``device`` [cuda when available], ``pack_weights`` [on CPU]."""

    def __init__(self, checkpoint: Optional[str] = None, tokenizer: Optional[str] = None, batch_size=16,
                 max_length: Optional[int] = None, max_gen_toks: int = 256, device: Optional[str] = None,
                 pack_weights=None, max_batch_size=None, **unused) -> None:
        super().__init__()
        if not checkpoint:
            raise ConfigError("--model mwb needs --model_args checkpoint=PATH (an mwb run or checkpoint, a Hugging "
                              "Face directory, a named model such as smollm2-135m, or a .gguf file)")
        self.batch_size_per_gpu = _parse_batch_size(batch_size)
        self.max_gen_toks = int(max_gen_toks)
        pack = None if pack_weights is None else str(pack_weights).lower() in ("1", "true", "yes")
        self._tp = under_launcher() and int(os.environ.get("WORLD_SIZE", "1")) > 1
        if self._tp:
            from mwb.core.parallel import ParallelDims, build_state

            from .serve_ranks import load_sharded_language_model
            _, world, dev = init_distributed()
            state = build_state(ParallelDims(world_size=world, tp=world))
            self.lm = load_sharded_language_model(local_checkpoint(checkpoint), tokenizer, state, dev, pack)
        else:
            dev = torch.device(device) if device else None
            if dev is not None and dev.type == "cuda" and not torch.cuda.is_available():
                # lm-eval's CLI passes --device cuda unless told otherwise; as --model hf does, run where we can
                print("mwb: no CUDA device here; --model mwb runs on the CPU", file=sys.stderr)
                dev = torch.device("cpu")
            _, self.lm = load_language_model(checkpoint, tokenizer=tokenizer, device=dev, pack_weights=pack)
        cfg = getattr(self.lm.model, "cfg", None)
        model_len = getattr(cfg, "max_position_embeddings", None) if cfg is not None else None
        self._max_length = int(max_length) if max_length else int(model_len or DEFAULT_MAX_LENGTH)
        if self._tp:
            if self.lm.tp_rank != 0:
                self._follow()  # never returns
            atexit.register(self._broadcast, ("close", None))

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: Optional[dict] = None) -> "MwbLM":
        """``--model_args`` win over the CLI's own ``--batch_size``/``--device`` (lm-eval passes both, and its
        ``--batch_size`` defaults to 1): ``--model_args checkpoint=C,batch_size=16`` means batch 16."""
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None}
        return cls(**{**extra, **arg_dict})

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: Optional[dict] = None) -> "MwbLM":
        return cls.create_from_arg_obj(lm_utils.simple_parse_args_string(arg_string), additional_config)

    # ------------------------------------------------------------------------------ lm-eval's interface

    @property
    def eot_token_id(self) -> int:
        return self.lm.eod

    @property
    def prefix_token_id(self) -> int:
        bos = getattr(self.lm.tokenizer, "bos", None)  # the rule of --model hf: BOS when there is one, else EOS
        return bos if bos is not None else self.lm.eod

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def tokenizer_name(self) -> str:
        return str(getattr(self.lm.tokenizer, "path", "mwb"))

    def tok_encode(self, string: str, add_special_tokens=None, **kwargs) -> list[int]:
        return self.lm.encode(string)

    def tok_decode(self, tokens, **kwargs) -> str:
        return self.lm.decode(tokens)

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, override_bs=None, **kwargs):
        rows = [(list(ctx), list(cont)) for _, ctx, cont in requests]
        results = self._run("score", rows)
        for (key, _, _), answer in zip(requests, results):
            if key is not None:
                self.cache_hook.add_partial("loglikelihood", key, answer)
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        windows, owner = [], []
        for i, req in enumerate(requests):
            for ctx, cont in map(lm_utils.make_disjoint_window, lm_utils.get_rolling_token_windows(
                    token_list=self.tok_encode(req.args[0]), prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length, context_len=1)):
                windows.append((list(ctx), list(cont)))
                owner.append(i)
        scored = self._run("score", windows)
        totals = [0.0] * len(requests)
        for i, (lp, _) in zip(owner, scored):
            totals[i] += lp
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        results: list[Optional[str]] = [None] * len(requests)
        groups: dict[str, list[int]] = {}
        for i, req in enumerate(requests):  # one SamplingParams per distinct gen_kwargs
            groups.setdefault(repr(sorted(req.args[1].items())), []).append(i)
        for members in groups.values():
            params, until = self._sampling(requests[members[0]].args[1])
            keep = max(1, self.max_length - params.max_tokens)
            contexts = [self.tok_encode(requests[i].args[0])[-keep:] for i in members]
            for i, text in zip(members, self._run("generate", (contexts, params))):
                for stop in until:  # generate already stops there; lm-eval's rule, kept for the decoded text
                    text = text.split(stop)[0]
                results[i] = text
                self.cache_hook.add_partial("generate_until", requests[i].args, text)
        return results  # type: ignore[return-value]

    def _sampling(self, kwargs: dict) -> tuple[SamplingParams, list[str]]:
        kwargs = dict(kwargs)
        until = kwargs.pop("until", None) or []
        until = [until] if isinstance(until, str) else list(until)
        max_tokens = int(kwargs.pop("max_gen_toks", self.max_gen_toks))
        sample = bool(kwargs.pop("do_sample", False))
        temperature = float(kwargs.pop("temperature", 1.0 if sample else 0.0))
        top_p, top_k = float(kwargs.pop("top_p", 1.0)), int(kwargs.pop("top_k", 0) or 0)
        seed = kwargs.pop("seed", 1234)
        if not sample:
            temperature = 0.0
        return SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
                              stop=tuple(until), seed=int(seed), stop_at_eod=True), until

    # ------------------------------------------------------------------- the work, and TP's followers

    def _run(self, op: str, payload):
        if self._tp:
            self._broadcast((op, payload))
        return self._do(op, payload)

    def _do(self, op: str, payload):
        if op == "score":
            return score_rows(self.lm, payload, self.batch_size_per_gpu, self.max_length)
        contexts, params = payload
        return [g.text for g in generate(self.lm, contexts, params, batch_size=self.batch_size_per_gpu)]

    def _broadcast(self, message):
        import torch.distributed as dist
        box = [message]
        dist.broadcast_object_list(box, src=self.lm.state.group_ranks["tp"][0], group=self.lm.tp_group)
        return box[0]

    def _follow(self) -> None:
        """TP ranks other than 0: do what rank 0 broadcasts until it closes, then leave the process."""
        while True:
            op, payload = self._broadcast(None)
            if op == "close":
                sys.stdout.flush()
                os._exit(0)  # lm-eval's CLI must not go on to evaluate on this rank
            self._do(op, payload)


if "mwb" not in model_registry:  # once, also when this file runs as ``python -m`` and is imported again
    register_model("mwb")(MwbLM)


def main() -> None:
    """``mwb-lm-eval ARGS``: lm-eval's own command line with ``--model mwb`` registered (for lm-eval releases
    that do not discover model entry points, e.g. 0.4.13)."""
    from lm_eval.__main__ import cli_evaluate
    sys.argv[0] = "lm_eval"
    cli_evaluate()


if __name__ == "__main__":
    main()
