"""Comparison helpers shared by the equivalence tests (a parallel layout against one process)."""
import torch


def rel(a, b):
    """Relative difference of ``a`` from the reference ``b``."""
    return abs(a - b) / max(abs(b), 1e-12)


def assert_losses_match(name: str, losses, ref_losses, steps: int = 5) -> None:
    """``steps`` per-step losses, each within 1e-5 (relative) of the single-process run's."""
    assert len(losses) == len(ref_losses) == steps, f"{name}: {len(losses)} / {len(ref_losses)} steps"
    for step, (a, b) in enumerate(zip(losses, ref_losses)):
        assert rel(a, b) < 1e-5, f"{name} step {step + 1}: loss {a} vs single process {b}"


def merged_grads(results: list) -> dict:
    """The full gradients every rank reported, by parameter name, in one dict."""
    out = {}
    for r in results:
        out.update(r["grads"])
    return out


def assert_grads_match(name: str, results: list, ref_grads: dict) -> None:
    """The ranks' gathered gradients cover exactly the single-process parameters and equal them."""
    grads = merged_grads(results)
    assert set(grads) == set(ref_grads)
    for k, want in ref_grads.items():
        torch.testing.assert_close(grads[k], want, rtol=1e-4, atol=1e-6, msg=f"{name}: gradient of {k}")
