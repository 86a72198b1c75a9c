"""``--log wandb|mlflow|tensorboard``: what the trackers hold, read back with their own readers (W&B's offline
``.wandb`` records parsed with wandb's protobuf classes, MLflow's store through ``MlflowClient``), equals
``metrics.jsonl``, ``config.yaml`` and ``energy.json`` value by value; the flag is on every training command; a
missing library or an unknown tracker is one line, exit 2."""
import glob
import json
import math
import os
import struct
import subprocess
import sys

import pytest
import yaml

from mwb.core.config import ConfigError
from mwb.core.training import tracking
from tests.helpers.cli import run_cli
from tests.helpers.needs import needs

SMALL = ["--set", "model.num_layers=2", "--set", "model.hidden_size=64", "--set", "model.num_attention_heads=4",
         "--seed", "1", "--data", "synthetic", "--seq-length", "32", "--set", "logging.progress=false"]


def read_wandb(run_dir: str) -> tuple[dict, dict[int, dict], dict]:
    """(config, {step: logged values}, summary) of the one offline run under ``run_dir/wandb``: the ``.wandb``
    file is LevelDB-log framed (32 KiB blocks, 7-byte record headers) around wandb's ``Record`` protobufs."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = glob.glob(os.path.join(run_dir, "wandb", "offline-run-*", "run-*.wandb"))
    data = open(path, "rb").read()
    assert data[:4] == b":W&B"
    pos, block, buf, records = 7, 32768, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7]) if left >= 7 else (0, 0, 0)
        if left < 7 or (length == 0 and kind == 0):
            pos += left
            continue
        buf += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            rec = pb.Record()
            rec.ParseFromString(buf)
            records.append(rec)
            buf = b""
    config, history, summary = {}, {}, {}
    for r in records:
        kind = r.WhichOneof("record_type")
        if kind == "run":
            config.update({u.key: json.loads(u.value_json) for u in r.run.config.update if u.key != "_wandb"})
        elif kind == "history":
            row = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in r.history.item}
            history.setdefault(row["_step"], {}).update(row)
        elif kind == "summary":
            summary.update({u.key: json.loads(u.value_json) for u in r.summary.update if u.key})
    return config, history, summary


def expected_rows(out: str) -> dict[int, dict]:
    """metrics.jsonl as the trackers name it: {step: {field or valid/field: number}}."""
    rows: dict[int, dict] = {}
    for rec in map(json.loads, open(os.path.join(out, "metrics.jsonl"))):
        step = rec.pop("step")
        valid = rec.pop("split", None) == "valid"
        rows.setdefault(step, {}).update({(f"valid/{k}" if valid else k): v
                                          for k, v in tracking.numeric(rec).items()})
    return rows


def same(a, b) -> bool:
    return (isinstance(a, float) and math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-12)


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("tracked") / "run")
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "MLFLOW_TRACKING_URI")}
    env.update(HF_HUB_OFFLINE="1", WANDB_SILENT="true")
    proc = subprocess.run([sys.executable, "-m", "mwb", "pretrain", "gpt", "--out", out, "--steps", "3",
                           "--eval-interval", "2", "--eval-steps", "1", "--log", "wandb", "--log", "mlflow",
                           *SMALL], capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@needs("wandb")
def test_wandb_offline_run_holds_metrics_config_and_energy(logged_run):
    config, history, summary = read_wandb(logged_run)
    want = expected_rows(logged_run)
    assert sorted(history) == sorted(want) == [1, 2, 3]
    for step, fields in want.items():
        assert fields, step
        for k, v in fields.items():
            assert same(history[step][k], v), (step, k)
    assert config == yaml.safe_load(open(os.path.join(logged_run, "config.yaml")))
    energy = json.load(open(os.path.join(logged_run, "energy.json")))
    for k, v in tracking.numeric(energy).items():
        assert same(summary[k], v), k


@needs("mlflow")
def test_mlflow_store_holds_metrics_config_and_energy(logged_run, monkeypatch):
    from mlflow.tracking import MlflowClient
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 reads its file store only when told to
    client = MlflowClient(tracking_uri="file:" + os.path.join(os.path.abspath(logged_run), "mlruns"))
    (run,) = client.search_runs([client.get_experiment_by_name("mwb").experiment_id])
    assert run.info.run_name == "run" and run.info.status == "FINISHED"
    want = expected_rows(logged_run)
    keys = {k for fields in want.values() for k in fields}
    for key in keys:
        got = {m.step: m.value for m in client.get_metric_history(run.info.run_id, key) if m.step > 0}
        assert got.keys() == {s for s, f in want.items() if key in f}, key
        for step, value in got.items():
            assert same(value, float(want[step][key])), (key, step)
    config = yaml.safe_load(open(os.path.join(logged_run, "config.yaml")))
    assert run.data.params == {k: str(v) for k, v in tracking.flatten(config).items()}
    path = client.download_artifacts(run.info.run_id, "summary.json")
    assert json.load(open(path)) == json.load(open(os.path.join(logged_run, "energy.json")))


@needs("mlflow")
def test_mlflow_tracking_uri_is_respected(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient
    store = "file:" + str(tmp_path / "elsewhere")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    t = tracking.open_trackers(["mlflow"], str(tmp_path / "out"), run_name="r", config={"a": {"b": 1}})
    t.log_metrics({"loss": 2.5, "note": "text", "ok": True}, 7)
    t.log_table("comparison", ["cell", "acc"], [["x", 0.5], ["y", 0.75]])
    t.close()
    assert not os.path.exists(tmp_path / "out" / "mlruns")
    client = MlflowClient(tracking_uri=store)
    (run,) = client.search_runs([client.get_experiment_by_name("mwb").experiment_id])
    assert run.data.params == {"a.b": "1"} and run.data.metrics == {"loss": 2.5, "ok": 1.0}
    table = json.load(open(client.download_artifacts(run.info.run_id, "comparison.json")))
    assert table == {"columns": ["cell", "acc"], "rows": [["x", 0.5], ["y", 0.75]]}


def training_commands():
    import click

    from mwb.cli.main import cli

    found = []

    def walk(cmd, path):
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, name), path + [name])
        elif any("--steps" in p.opts for p in cmd.params):
            found.append((" ".join(path), cmd))
    walk(cli, [])
    return found


def test_every_training_command_and_repro_take_log():
    from mwb.cli.main import cli
    import click
    commands = training_commands()
    names = {n for n, _ in commands}
    assert {"pretrain gpt", "pretrain bert", "pretrain t5"} <= names and any(n.startswith("finetune ") for n in names)
    for name, cmd in commands:
        opt = next((p for p in cmd.params if "--log" in p.opts), None)
        assert opt is not None and opt.multiple and list(opt.type.choices) == list(tracking.BACKENDS), name
    repro = cli.get_command(click.Context(cli), "repro")
    assert repro is not None


def test_unknown_or_missing_tracker_is_one_line(monkeypatch, capsys):
    with pytest.raises(ConfigError, match="unknown tracker"):
        tracking.check_backends(["neptune"])
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    code, out, err = run_cli(["pretrain", "gpt", "--log", "wandb", "--steps", "1", *SMALL], capsys)
    assert code == 2
    assert err.strip().splitlines()[-1] == ("mwb: error: --log wandb needs the wandb package: "
                                            "pip install 'mwb[tracking]' (or pip install wandb)")
