"""``--model mwb`` against ``--model hf`` (transformers loading the same GGUF file) and ``--model local-completions``
against ``mwb serve``, on tasks written here in lm-eval's YAML (offline, a handful of local JSONL documents):
per-sample log-likelihoods within 1e-4, the same accuracies, the same greedy generations, the same rolling
log-likelihoods. One module-scoped model of each kind; SmolLM2-135M on CPU, short contexts."""
import json
import os
import threading

import pytest
import torch

from mwb.core import named_models
from tests.helpers.needs import needs

pytestmark = needs("lm_eval", "gguf", "accelerate", models=["smollm2-135m"])

MC = [("The capital of France is", [" Paris", " Berlin", " Rome"], 0),
      ("Water freezes at zero degrees", [" Celsius", " Fahrenheit", " Kelvin"], 0),
      ("The largest planet in the solar system is", [" Mars", " Jupiter", " Venus"], 1),
      ("A baby cat is called a", [" puppy", " kitten", " calf"], 1),
      ("The opposite of hot is", [" warm", " loud", " cold"], 2)]
TEXTS = ["The quick brown fox jumps over the lazy dog. It was a sunny day and the fox was happy.",
         "Once upon a time there was a little girl who lived in a village near the forest.",
         "def add(a, b):\n    return a + b\n"]
QA = [("What is 2 + 2?", "4"), ("What colour is the sky on a clear day?", "blue"), ("Name a fruit.", "apple")]


def write_tasks(d: str) -> list[str]:
    def jsonl(name, rows):
        path = os.path.join(d, name)
        with open(path, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        return path

    def yaml(task, data, body):
        with open(os.path.join(d, f"{task}.yaml"), "w") as f:
            f.write(f"task: {task}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
                    f"test_split: test\n{body}")

    yaml("mwbt_mc", jsonl("mc.jsonl", [{"q": q, "choices": c, "label": a} for q, c, a in MC]),
         "output_type: multiple_choice\ndoc_to_text: \"{{q}}\"\ndoc_to_target: label\ndoc_to_choice: \"{{choices}}\"\n"
         "metric_list:\n  - metric: acc\n  - metric: acc_norm\n")
    yaml("mwbt_rolling", jsonl("text.jsonl", [{"text": t} for t in TEXTS]),
         "output_type: loglikelihood_rolling\ndoc_to_text: \"\"\ndoc_to_target: \"{{text}}\"\n"
         "metric_list:\n  - metric: word_perplexity\n  - metric: bits_per_byte\n")
    yaml("mwbt_gen", jsonl("qa.jsonl", [{"q": q, "a": a} for q, a in QA]),
         "output_type: generate_until\ndoc_to_text: \"Question: {{q}}\\nAnswer:\"\ndoc_to_target: \" {{a}}\"\n"
         "generation_kwargs:\n  until: [\"\\n\", \".\"]\n  max_gen_toks: 12\n  do_sample: false\n"
         "metric_list:\n  - metric: exact_match\n")
    return ["mwbt_mc", "mwbt_rolling", "mwbt_gen"]


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    from lm_eval.tasks import TaskManager
    d = str(tmp_path_factory.mktemp("lm_eval_tasks"))
    names = write_tasks(d)
    return names, TaskManager(include_path=d)


def run(model, tasks, names=None, **kw):
    import lm_eval
    names_, manager = tasks
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a loaded 2-core machine: OpenMP barriers cost more than they give
    try:
        out = lm_eval.simple_evaluate(model=model, tasks=names or names_, task_manager=manager, log_samples=True,
                                      batch_size=4, **kw)
    finally:
        torch.set_num_threads(threads)
    return out


def per_sample(out, task):
    return {s["doc_id"]: s for s in out["samples"][task]}


@pytest.fixture(scope="module")
def mwb_lm():
    import mwb.evaluation.lm_eval_backend  # noqa: F401  (registers "mwb" with lm-eval 0.4.13)
    from lm_eval.api.registry import get_model
    return get_model("mwb")(checkpoint="smollm2-135m", batch_size=4)


@pytest.fixture(scope="module")
def ours(mwb_lm, tasks):
    return run(mwb_lm, tasks)


@pytest.fixture(scope="module")
def theirs(tasks):
    path = named_models.installed_files(named_models.MODELS["smollm2-135m"])
    args = f"pretrained={os.path.dirname(path)},gguf_file={os.path.basename(path)},dtype=float32,device=cpu"
    return run("hf", tasks, model_args=args)


def assert_same_samples(got, want, task):
    a, b = per_sample(got, task), per_sample(want, task)
    assert sorted(a) == sorted(b)
    for doc in a:
        ra, rb = a[doc]["resps"], b[doc]["resps"]
        assert len(ra) == len(rb)
        for x, y in zip(ra, rb):
            x, y = x[0], y[0]
            if isinstance(y, str):
                assert x == y, (task, doc)
            elif isinstance(y, (list, tuple)):  # (log-likelihood, is_greedy)
                assert float(x[0]) == pytest.approx(float(y[0]), abs=1e-4), (task, doc)
                assert bool(x[1]) == bool(y[1]), (task, doc)
            else:
                assert float(x) == pytest.approx(float(y), abs=1e-4), (task, doc)


@pytest.mark.parametrize("task", ["mwbt_mc", "mwbt_rolling", "mwbt_gen"])
def test_mwb_equals_hf_per_sample(ours, theirs, task):
    assert_same_samples(ours, theirs, task)


def test_mwb_equals_hf_metrics(ours, theirs):
    for task, metric in [("mwbt_mc", "acc,none"), ("mwbt_mc", "acc_norm,none"), ("mwbt_gen", "exact_match,none"),
                         ("mwbt_rolling", "word_perplexity,none"), ("mwbt_rolling", "bits_per_byte,none")]:
        want = theirs["results"][task][metric]
        assert ours["results"][task][metric] == pytest.approx(want, rel=1e-5), (task, metric)
    assert 0 < ours["results"]["mwbt_mc"]["acc,none"]  # the model gets some right: the numbers carry information


@needs("aiohttp", "tenacity", "requests")  # lm-eval[api]: what --model local-completions imports
def test_mwb_equals_local_completions_against_mwb_serve(ours, mwb_lm, tasks):
    from mwb.evaluation.engine import EngineConfig, ServingEngine
    from mwb.evaluation.openai_requests import Limits
    from mwb.evaluation.server import make_server

    lm = mwb_lm.lm
    engine = ServingEngine(lm, EngineConfig(batch_rows=4))
    server = make_server(lm, "127.0.0.1", 0, model_name="mwb", limits=Limits(max_tokens=2048, max_prompts=8),
                         quiet=True, engine=engine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    tok = os.path.dirname(lm.tokenizer.path)
    args = (f"model=mwb,base_url=http://{host}:{port}/v1/completions,num_concurrent=1,max_retries=1,"
            f"tokenizer_backend=huggingface,tokenizer={tok},max_length=2048")
    try:
        served = run("local-completions", tasks, names=["mwbt_mc"], model_args=args)
    finally:
        server.shutdown()
        server.server_close()
    assert_same_samples(ours, served, "mwbt_mc")
    assert served["results"]["mwbt_mc"]["acc,none"] == ours["results"]["mwbt_mc"]["acc,none"]


def test_bad_model_args_are_one_line():
    import mwb.evaluation.lm_eval_backend as backend
    from mwb.core.config import ConfigError
    with pytest.raises(ConfigError, match="checkpoint=PATH"):
        backend.MwbLM()
    with pytest.raises(ConfigError, match="not 'auto'"):
        backend.MwbLM(checkpoint="smollm2-135m", batch_size="auto")


def lm_eval_cli(argv, tasks_dir, out, launcher=()):
    """lm-eval's own bare command line, ``python -m lm_eval --model mwb`` (``mwb`` registered by the installed
    ``mwb_lm_eval.pth``, tests/test_lm_eval_plugin.py); the samples of every task, by doc id."""
    import glob
    import subprocess
    import sys
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS="1")
    cmd = [sys.executable, *launcher, "-m", "lm_eval", *argv, "--include_path", tasks_dir,
           "--output_path", out, "--log_samples"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    samples = {}
    for path in glob.glob(os.path.join(out, "**", "samples_*.jsonl"), recursive=True):
        task = os.path.basename(path)[len("samples_"):].rsplit("_", 1)[0]
        samples[task] = {s["doc_id"]: s for s in map(json.loads, open(path))}
    (results,) = glob.glob(os.path.join(out, "**", "results_*.json"), recursive=True)
    return samples, json.load(open(results))["results"]


def test_lm_eval_command_line_with_model_mwb(ours, tasks, tmp_path):
    """`lm_eval --model mwb --model_args checkpoint=smollm2-135m,batch_size=16` gives what the in-process
    backend gave (batch 16 against batch 4: the same numbers)."""
    d = str(tmp_path / "tasks")
    os.makedirs(d)
    write_tasks(d)
    samples, results = lm_eval_cli(["--model", "mwb", "--model_args", "checkpoint=smollm2-135m,batch_size=16",
                                    "--tasks", "mwbt_mc"], d, str(tmp_path / "out"))
    assert results["mwbt_mc"]["acc,none"] == ours["results"]["mwbt_mc"]["acc,none"]
    want = per_sample(ours, "mwbt_mc")
    for doc, s in samples["mwbt_mc"].items():
        for x, y in zip(s["resps"], want[doc]["resps"]):
            assert float(x[0][0]) == pytest.approx(float(y[0][0]), abs=1e-4)
