"""What ``bias-prompts`` says about itself: what each scale can show, what of the paper could be checked, the
paper's models for ``mwb plan``, and its picture (each metric over shots, plain and calibrated, with 95%
intervals over seeds)."""
from __future__ import annotations

from ..analysis import mean_std
from ..api import PlanSpec, Scale
from ..plot import t_interval

PAPER_NOTE = (
    "The paper's numbers: only its abstract could be checked here (arXiv 2112.07868 v2, through the search tool's "
    "stored pages): the 530B model is 'significantly more effective in detecting social bias compared to smaller "
    "models (achieving at least 13% improvement in AUC metric compared to other models)' (v1 said 20%), and 'maintains "
    "a high AUC (dropping less than 2%) when the labeled repository is reduced to as few as 100 samples'. Those are "
    "AUC differences between model sizes and repository sizes, not accuracy or macro-F1 per number of shots, and no "
    "table of the paper could be read, so this report prints no paper column rather than numbers nobody checked. The "
    "model sizes besides 530B (1.3B and 8.3B Megatron GPT are planned below) are not confirmed by the text checked.")

# Scoring, not training: each prompt is one forward pass. mwb plan plans training, so its time per iteration
# is about 3x the forward pass (forward + backward) and its memory holds gradients and optimizer states that
# inference does not; both are upper bounds for this experiment.
PROMPTS = 1_000 * 10  # 1,000 queries x 10 distinct prompts (zero shots once; 2, 4, 8 shots x 3 seeds)
PROMPT_TOKENS = 2048  # the models' context, an upper bound: the examples' prefix is computed once per prompt set


def plan_specs() -> tuple:
    label = ("Prabhumoye et al. 2021: scoring 1,000 SBIC queries x 10 prompts (shots 0 once; 2, 4, 8 x 3 seeds) "
             "as 2,048-token sequences with Megatron GPT {name}; mwb plan plans training, so read its time as ~3x "
             "the forward pass scoring needs and its memory as an upper bound (no gradients or optimizer states at "
             "inference); {where}")
    tokens = float(PROMPTS * PROMPT_TOKENS)
    return (PlanSpec(label.format(name="1.3B", where="8 A100 80 GB assumed"), "gpt-1.3b", 8, 8, PROMPT_TOKENS,
                     train_tokens=tokens),
            PlanSpec(label.format(name="8.3B", where="8 A100 80 GB assumed"), "gpt-8.3b", 8, 8, PROMPT_TOKENS,
                     train_tokens=tokens),
            PlanSpec(label.format(name="530B (MT-NLG)", where="its TP 8 x PP 35 layout on 280 A100 80 GB"),
                     "gpt-530b", 280, 8, PROMPT_TOKENS, tp=8, pp=35, train_tokens=tokens))

SEEDS_NOTE = ("Zero shots has no examples to choose: its seeds are one run, so its spread is zero. The seeds' "
              "spread at 2-8 shots is that of the exemplar choice (balanced: half of each label, seeded). Not "
              "measured: AUC, the paper's nearest-neighbour exemplar selection, other SBIC attributes. ")


def scope(scale: Scale) -> str:
    if scale.name == "paper":
        return ("This scale runs the method on the user's SBIC files with the user's checkpoint: the exemplar pool is "
                "SBIC's train split, the queries its test (or dev) split, a post is offensive when its annotators' "
                "mean offensiveYN is at least 0.5. With the paper's models it can show whether examples and "
                "calibration raise accuracy and macro-F1 on SBIC, per post and over seeds of the exemplar choice. "
                "It differs from the paper in the selection (balanced is class-balanced but random, not the "
                "paper's nearest class-balanced exemplars; --set selection=nearest is nearest but not balanced) and "
                "in the metric (the paper's AUC is not computed). " + PAPER_NOTE)
    p = scale.params
    queries = f"the first {p['limit']}" if p.get("limit") else "all 178"
    data = (f"Data: {queries} test queries of the bundled pool (178 queries, 90 offensive; 174 pool posts), which "
            "is not SBIC. Its offensive posts are RealToxicityPrompts prompts that a profanity classifier scores "
            "offensive, its clean posts BBC News and Wikipedia sentences that it scores clean: the labels are a "
            "profanity classifier's, the two sides also differ in source and style, and nothing in them is SBIC's "
            "implied, often profanity-free, social bias. ")
    if p["model"] == "tiny":
        return (data + "Model: a 2-layer GPT trained for 4 steps on the bundled corpus, whose answers mean nothing. "
                "This scale checks the pipeline (the commands, the shared runs, the per-query records of both "
                "predictions, the paired tests, the report and plot), not the claim: its verdict is noise. "
                + PAPER_NOTE)
    return (data + "Model: SmolLM2-135M-Instruct (135M parameters), the only instruction LM installed offline; the "
            "paper's models go up to 530B parameters, and its abstract's main finding is that "
            "detection improves with model size, which one small model cannot test. What this scale can show: "
            "whether examples in the prompt and content-free calibration change how often a small instruction LM "
            "answers 'yes', and whether that classifies more of these queries correctly, compared per query "
            "(paired by id over the seeds; McNemar for accuracy, a permutation test recomputing macro-F1). A "
            "small model that says 'no' to almost every post (see positive_rate) has an accuracy close to the "
            "share of clean queries (88 of 178) and the macro-F1 of a constant classifier (about 0.33); "
            "calibration moves the decision boundary but also amplifies whatever the content-free inputs happen "
            "to prefer. A 'not shown' here says the effect is not visible at this size on this set, not that the "
            "paper is wrong; a 'shown' says a small model already gains, not that the paper's SBIC numbers hold. "
            + SEEDS_NOTE + PAPER_NOTE)



def plot(results: dict, path: str, shots: tuple, cal: str) -> None:
    """One panel per metric: the mean over seeds at each number of shots, plain and calibrated, with 95%
    t-intervals over seeds as error bars."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conds = results["conditions"]
    metrics = [m for m in results["metrics"] if any(m in row for row in conds.values())]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.6), squeeze=False)
    for ax, m in zip(axes[0], metrics):
        for suffix, label, color, dx in (("", "plain", "#4c72b0", -0.08), (cal, "calibrated", "#dd8452", 0.08)):
            xs, means, errs = [], [], []
            for k in shots:
                values = conds.get(f"k{k}{suffix}", {}).get(m)
                if values:
                    xs.append(k + dx)
                    means.append(mean_std(values)[0])
                    errs.append(t_interval(values))
            ax.errorbar(xs, means, yerr=errs, marker="o", capsize=4, color=color, label=label)
        ax.set_ylim(-0.02, 1.02)  # every metric here is a share; a 2-seed t-interval can reach far beyond
        ax.set_xticks(list(shots))
        ax.set_xlabel("examples in the prompt (shots)")
        ax.set_title(m)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, title=f"mean, 95% t-interval over {len(results['seeds'])} seed(s)", title_fontsize=7)
    fig.suptitle(f"{results['experiment']} ({results['scale']} scale): verdict {results['verdict']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
