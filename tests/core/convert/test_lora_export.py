"""A LoRA run exported for Hugging Face: ``mwb convert RUN OUT --merge`` gives a model whose logits equal
mwb's LoRA model (fp32, 1e-5); ``--peft`` gives an adapter directory that ``PeftModel.from_pretrained`` loads
on the base's own export (``mwb convert BASE OUT``) with the merged export's logits. Llama (SmolLM2's shape:
rotary, RMSNorm, SwiGLU, grouped-query attention, untied head) and GPT-2 (its fused c_attn)."""
import json
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from mwb.cli.main import main  # noqa: E402
from mwb.core import checkpoint  # noqa: E402
from tests.core.checkpoint.lora_runs import GPT2, LLAMA, lora_trainer, write_base  # noqa: E402
from tests.helpers.cli import run_cli  # noqa: E402
from tests.helpers.needs import needs  # noqa: E402

pytestmark = needs("peft")

V = 96
FAMILIES = {"llama": LLAMA, "gpt2": GPT2}


def hf(path):
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


@pytest.fixture(scope="module", params=list(FAMILIES))
def exported(request, tmp_path_factory):
    """A LoRA run on a base (both mwb checkpoints), its merged and PEFT exports and the base's export."""
    tmp = tmp_path_factory.mktemp(request.param)
    base, run = str(tmp / "base"), str(tmp / "run")
    write_base(base, FAMILIES[request.param], V)
    tr = lora_trainer(base, FAMILIES[request.param], V, steps=3)
    tr.run()
    checkpoint.save(tr, os.path.join(run, "checkpoints"))
    ids = torch.randint(0, V, (2, 14), generator=torch.Generator().manual_seed(1))
    tr.model.eval()
    with torch.no_grad():
        want = tr.model(tokens=ids)[..., :V]
    for args in (["convert", run, str(tmp / "merged"), "--merge"], ["convert", run, str(tmp / "adapter"), "--peft"],
                 ["convert", base, str(tmp / "base_hf")]):
        assert main(args) is None
    return {"family": request.param, "tmp": tmp, "ids": ids, "want": want, "run": run, "trainer": tr}


def test_merged_export_has_the_lora_models_logits(exported):
    model = hf(exported["tmp"] / "merged")
    assert type(model).__name__ == {"llama": "LlamaForCausalLM", "gpt2": "GPT2LMHeadModel"}[exported["family"]]
    with torch.no_grad():
        got = model(exported["ids"]).logits
    torch.testing.assert_close(got, exported["want"], rtol=0, atol=1e-5)
    base = hf(exported["tmp"] / "base_hf")
    with torch.no_grad():
        assert (base(exported["ids"]).logits - got).abs().max() > 1e-3  # the adapters are in there


def test_peft_adapter_loads_on_the_base_export_with_the_merged_logits(exported):
    tmp = exported["tmp"]
    cfg = json.load(open(tmp / "adapter" / "adapter_config.json"))
    assert cfg["peft_type"] == "LORA" and cfg["r"] == 8 and cfg["lora_alpha"] == 16.0
    assert set(os.listdir(tmp / "adapter")) == {"adapter_config.json", "adapter_model.safetensors"}
    model = peft.PeftModel.from_pretrained(hf(tmp / "base_hf"), str(tmp / "adapter")).eval()
    n_adapted = sum(1 for _, m in model.named_modules() if type(m).__name__ == "Linear" and hasattr(m, "lora_A"))
    per_layer = {"llama": 7, "gpt2": 4}[exported["family"]]  # q,k,v,o,gate,up,down | c_attn, c_proj ×2, c_fc
    assert n_adapted == 3 * per_layer
    merged = hf(tmp / "merged")
    with torch.no_grad():
        got, want = model(exported["ids"]).logits, merged(exported["ids"]).logits
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    torch.testing.assert_close(got, exported["want"], rtol=0, atol=1e-5)


def test_plain_convert_of_a_lora_run_says_what_to_pass(exported, capsys, tmp_path):
    code, _, err = run_cli(["convert", exported["run"], str(tmp_path / "x")], capsys)
    assert code == 1 and "--merge" in err and "--peft" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(["convert", str(exported["tmp"] / "base"), str(tmp_path / "y"), "--peft"], capsys)
    assert code == 1 and "not a LoRA run" in err
