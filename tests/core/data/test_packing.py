"""First-fit packing of GPT samples into rows: which documents share a row, and the row's layout (tokens, loss
mask, document ids, positions restarting per document)."""
import numpy as np
import pytest

from mwb.core.data.packing import PAD_DOCUMENT, document_length, first_fit, pack_samples, packed_row


def _sample(tokens, mask, capacity, pad=0):
    n = len(tokens)
    return {"tokens": np.array(list(tokens) + [pad] * (capacity - n)),
            "loss_mask": np.array(list(mask) + [0] * (capacity - n))}


def test_first_fit_puts_each_document_in_the_first_row_with_room():
    # rows of 10: 6 opens row 0, 5 opens row 1, 4 fills row 0, 3 and 1 go to row 1 (room 5, then 2), 10 opens
    # row 2, and the last 1 goes back to row 1 (room 1): the first row with room, not the last one opened
    assert first_fit([6, 5, 4, 3, 1, 10, 1], 10) == [[0, 2], [1, 3, 4, 6], [5]]
    assert first_fit([], 10) == []
    with pytest.raises(ValueError, match="a row holds 1 to 10"):
        first_fit([3, 11], 10)
    with pytest.raises(ValueError):
        first_fit([0], 10)


def test_document_length_ends_at_the_last_target_token():
    assert document_length(np.array([0, 0, 1, 1, 0, 1, 0, 0])) == 6
    assert document_length(np.zeros(5)) == 0


def test_packed_row_layout():
    a = (np.array([5, 6, 7]), np.array([0, 1, 1]))
    b = (np.array([8, 9]), np.array([1, 1]))  # a first token marked as a target: never one once packed
    row = packed_row([a, b], 8, pad_id=3)
    assert row["tokens"].tolist() == [5, 6, 7, 8, 9, 3, 3, 3]
    assert row["loss_mask"].tolist() == [0, 1, 1, 0, 1, 0, 0, 0]
    assert row["doc_ids"].tolist() == [0, 0, 0, 1, 1] + [PAD_DOCUMENT] * 3
    assert row["position_ids"].tolist() == [0, 1, 2, 0, 1, 0, 1, 2]
    with pytest.raises(ValueError, match="do not fit"):
        packed_row([a, b, a], 7)


def test_pack_samples_cuts_after_the_last_target_and_skips_empty_samples():
    cap = 8
    samples = [_sample([1, 2, 3, 4], [0, 1, 1, 0], cap),  # 3 tokens count (the 4th follows the last target)
               _sample([5, 6, 7, 8, 9], [0, 0, 1, 1, 1], cap),
               _sample([4, 4], [0, 0], cap),  # no target: nothing to learn, left out
               _sample([7, 7, 7, 7, 7, 7], [0, 0, 0, 0, 0, 1], cap)]
    rows, info = pack_samples(samples, cap)
    assert (info.documents, info.rows, info.empty, info.capacity) == (3, 2, 1, 8)
    assert rows[0]["tokens"].tolist() == [1, 2, 3, 5, 6, 7, 8, 9]  # 3 + 5 tokens fill row 0 exactly
    assert rows[0]["doc_ids"].tolist() == [0, 0, 0, 1, 1, 1, 1, 1]
    assert rows[0]["loss_mask"].tolist() == [0, 1, 1, 0, 0, 1, 1, 1]
    assert rows[1]["tokens"].tolist()[:6] == [7] * 6 and rows[1]["doc_ids"].tolist()[6:] == [PAD_DOCUMENT] * 2
    # every target token survives packing exactly once
    assert sum(int(r["loss_mask"].sum()) for r in rows) == sum(int(s["loss_mask"].sum()) for s in samples)
    with pytest.raises(ValueError, match="samples of that length"):
        pack_samples([_sample([1, 2], [0, 1], 4)], cap)
