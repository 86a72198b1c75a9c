"""``mwb chat`` driven through a pseudo-terminal (pexpect): two turns, two replies equal to what the chat
session computes in-process, /knowledge shows the BM25 passages, /quit and EOF exit with status 0."""
import os
import sys

import pytest

from tests.helpers.checkpoints import tiny_checkpoint
from tests.helpers.needs import needs

pytestmark = needs("pexpect")
pexpect = pytest.importorskip("pexpect")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TURNS = ["Hello there, who are you?", "Tell me about the river"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_checkpoint(str(tmp_path_factory.mktemp("chat") / "gpt"), "gpt-tiny", num_layers=1,
                           hidden_size=32, num_attention_heads=2, ffn_hidden_size=64)


def _spawn(args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), TERM="dumb")
    return pexpect.spawn(sys.executable, ["-m", "mwb", "chat", *args], cwd=ROOT, env=env, encoding="utf-8",
                         timeout=180, dimensions=(50, 400))


def _expected(ckpt, knowledge=None):
    from mwb.evaluation.chat_format import chat_format_for
    from mwb.evaluation.loading import load_language_model
    from mwb.tasks.dialogue.chat_session import ChatSession, ChatSettings, KnowledgeBase

    _, lm = load_language_model(ckpt, device="cpu")
    session = ChatSession(lm, chat_format_for(lm.tokenizer.path), ChatSettings(max_tokens=12, temperature=0),
                          KnowledgeBase(knowledge) if knowledge else None)
    return [session.reply(t) for t in TURNS], session


def test_two_turns_through_a_pty_then_quit(ckpt):
    want, _ = _expected(ckpt)
    child = _spawn(["--checkpoint", ckpt, "--temperature", "0", "--max-tokens", "12"])
    for turn, reply in zip(TURNS, want):
        child.expect_exact("you> ")
        child.sendline(turn)
        child.expect(r"bot> (.*?)\r\n")
        assert child.match.group(1).strip() == reply
    child.expect_exact("you> ")
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_knowledge_command_and_eof_exit(ckpt):
    want, session = _expected(ckpt, knowledge="bundled")
    assert session.last_knowledge and "Knowledge:" in session.system_message()
    child = _spawn(["--checkpoint", ckpt, "--temperature", "0", "--max-tokens", "12", "--knowledge", "bundled"])
    for turn, reply in zip(TURNS, want):
        child.expect_exact("you> ")
        child.sendline(turn)
        child.expect(r"bot> (.*?)\r\n")
        assert child.match.group(1).strip() == reply
    child.expect_exact("you> ")
    child.sendline("/knowledge")
    first = session.last_knowledge[0]
    child.expect_exact(f"[1] {first['title'] or first['id']}: ")
    child.expect_exact("you> ")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_bad_knowledge_file_is_one_line(ckpt, tmp_path):
    child = _spawn(["--checkpoint", ckpt, "--knowledge", str(tmp_path / "missing.tsv")])
    child.expect(pexpect.EOF)
    child.close()
    out = child.before.strip().splitlines()
    assert child.exitstatus == 1 and out[-1].startswith("mwb: error: file not found")
