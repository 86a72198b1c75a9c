"""Stage 2, question generation: a causal LM writes the question whose answer is the candidate span.

Two ways, one prompt format (``Context: … / Answer: … / Question: …``), greedy decoding up to the first
newline:

* few-shot prompting of an instruct LM (default ``smollm2-135m``): ``shots`` demonstrations written for mwb
  (below) come before the query;
* a GPT fine-tuned on SQuAD (passage, answer) → question (``mwb finetune question-generation --data
  SQUAD.json``, the task in :mod:`.question_generation`, which uses this same format): pass its run as the
  generator with ``shots=0``.

Puri et al. condition on the whole passage; on CPU the context here is the sentence holding the answer
(``context="sentence"``, sentence-level generation as in Du et al. 2017) unless ``context="passage"``.
A generated question is kept when it is one line ending in "?" with at least three words; the text after
the first "?" is cut.
"""
from __future__ import annotations

from typing import Optional, Sequence

from mwb.evaluation.generation import SamplingParams, generate

# Demonstrations written for mwb (not from any dataset): context, answer, question.
DEMOS = (
    ("The Eiffel Tower was completed in 1889 as the entrance arch to the World's Fair in Paris.", "1889",
     "In what year was the Eiffel Tower completed?"),
    ("Marie Curie shared the Nobel Prize in Physics with Pierre Curie and Henri Becquerel.", "Pierre Curie",
     "With whom besides Henri Becquerel did Marie Curie share the Nobel Prize in Physics?"),
    ("The Danube flows through ten countries before it empties into the Black Sea.", "Black Sea",
     "Into which sea does the Danube empty?"),
)


def qg_prompt(context: str, answer: str, shots: int = 2) -> str:
    """The generation prompt: ``shots`` demonstrations, then the query with the question left open."""
    if shots > len(DEMOS):
        raise ValueError(f"at most {len(DEMOS)} question-generation demonstrations")
    demos = "".join(f"Context: {c}\nAnswer: {a}\nQuestion: {q}\n\n" for c, a, q in DEMOS[:shots])
    return f"{demos}Context: {context}\nAnswer: {answer}\nQuestion:"


def clean_question(text: str) -> Optional[str]:
    """The question in a generation (up to its first "?"), or None when it is not a usable question."""
    line = text.strip().split("\n")[0].strip()
    if "?" not in line:
        return None
    line = line[: line.index("?") + 1].strip()
    return line if len(line.split()) >= 3 else None


def generate_questions(lm, contexts: Sequence[str], answers: Sequence[str], shots: int = 2,
                       batch_size: int = 8, max_tokens: int = 32) -> list[str]:
    """Greedy raw generations, one per (context, answer)."""
    prompts = [qg_prompt(c, a, shots) for c, a in zip(contexts, answers)]
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, stop=("\n",))
    return [g.text for g in generate(lm, prompts, params, batch_size=batch_size)]
