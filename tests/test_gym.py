import torch
import pytest

from tinyagent.gym import (BLIND_CEILING, HELDOUT_TASKS, MAX_CALL_TOKENS, MAX_CALLS, TRAIN_TASKS,
                           Episode, call_ended, parse_call)
from tinyagent.vocab import ID, VOCAB_SIZE, WORDS, decode, encode


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def call(ep, text):
    """Run one call written with function indices, e.g. 'edit {2}', on an episode."""
    words = text.format(*[WORDS[n] for n in ep.names]).split()
    return decode(ep.step(encode(["<call>", *words, "</call>"])))


def test_vocabulary_size_and_round_trip():
    assert VOCAB_SIZE == 316
    assert decode(encode("<call> read tests </call>")) == "<call> read tests </call>"
    with pytest.raises(ValueError, match="not in the vocabulary"):
        encode("rm -rf")
    with pytest.raises(ValueError, match="token ids must lie in"):
        decode([VOCAB_SIZE])


def test_every_tool_call_form():
    task = next(t for t in TRAIN_TASKS if not t.needs_log)
    ep = Episode.start(task, gen())
    assert call(ep, "ls") == "<obs> files tests log src </obs>"
    assert call(ep, "read tests") == f"<obs> fail {WORDS[ep.names[task.bug]]} </obs>"
    assert call(ep, "cat log") == "<obs> log empty </obs>"
    assert call(ep, "read src").startswith("<obs> src")
    assert call(ep, "patch {%d}" % task.bug) == f"<obs> edited {WORDS[ep.names[task.bug]]} </obs>"
    assert ep.reads == 3 and ep.malformed == 0
    assert call(ep, "done") == "" and ep.done and ep.reward == 1.0


@pytest.mark.parametrize("text", ["", "read", "read kind000", "edit tests", "edit fn000 fn001",
                                  "submit tests", "tests read", "<call> ls"])
def test_malformed_calls_are_counted_not_fatal(text):
    ep = Episode.start(TRAIN_TASKS[0], gen())
    ids = encode(text)
    obs = ep.step(encode("<call>") + ids + encode("</call>"))
    assert decode(obs) == "<obs> error malformed </obs>"
    assert ep.malformed == 1 and not ep.done


def test_unterminated_call_and_foreign_name_are_malformed():
    ep = Episode.start(TRAIN_TASKS[0], gen())
    assert parse_call(encode("<call> read tests tests"), ep.names) is None
    foreign = next(n for n in range(VOCAB_SIZE) if WORDS[n].startswith("fn") and n not in ep.names)
    assert parse_call([ID["<call>"], ID["edit"], foreign, ID["</call>"]], ep.names) is None


def test_reward_only_for_the_right_edit_alone():
    task = TRAIN_TASKS[3]
    wrong = (task.bug + 1) % 5
    for edits, reward in [([task.bug], 1.0), ([wrong], 0.0), ([wrong, task.bug], 0.0), ([], 0.0)]:
        ep = Episode.start(task, gen())
        for f in edits:
            call(ep, "edit {%d}" % f)
        call(ep, "submit")
        assert ep.reward == reward, edits


def test_turn_limit_ends_a_looping_episode():
    ep = Episode.start(TRAIN_TASKS[0], gen())
    for _ in range(MAX_CALLS):
        call(ep, "ls")
    assert ep.done and ep.reward == 0.0
    with pytest.raises(ValueError, match="ended"):
        call(ep, "ls")


def test_log_tasks_name_a_caller_in_the_test_and_the_bug_in_the_log():
    task = next(t for t in TRAIN_TASKS if t.needs_log)
    ep = Episode.start(task, gen())
    assert call(ep, "read tests") == f"<obs> fail {WORDS[ep.names[task.decoy]]} trace log </obs>"
    assert call(ep, "read log") == f"<obs> error {WORDS[ep.names[task.bug]]} </obs>"
    assert task.decoy != task.bug


def test_blind_edits_succeed_one_time_in_five_and_reading_solves():
    g = gen(1)
    blind, solved = [], []
    for i in range(2000):
        task = TRAIN_TASKS[i % len(TRAIN_TASKS)]
        ep = Episode.start(task, g)
        call(ep, "edit {%d}" % int(torch.randint(5, (1,), generator=g)))
        call(ep, "submit")
        blind.append(ep.reward)
        ep = Episode.start(task, g)                      # the scripted read-then-edit solver
        obs = ep.step(encode("<call> read tests </call>"))
        if ID["trace"] in obs:
            obs = ep.step(encode("<call> read log </call>"))
        ep.step([ID["<call>"], ID["edit"], obs[2], ID["</call>"]])
        call(ep, "submit")
        solved.append(ep.reward)
    assert abs(sum(blind) / len(blind) - BLIND_CEILING) < 0.03
    assert sum(solved) == len(solved)


def test_splits_are_disjoint_and_sized():
    assert len(HELDOUT_TASKS) == 10 and len(TRAIN_TASKS) == 200
    assert not {(t.kinds, t.bug) for t in TRAIN_TASKS} & {(t.kinds, t.bug) for t in HELDOUT_TASKS}
    assert sum(t.needs_log for t in HELDOUT_TASKS) == 2


def test_names_are_redrawn_every_episode():
    g = gen()
    names = {Episode.start(TRAIN_TASKS[0], g).names for _ in range(20)}
    assert len(names) == 20


def test_a_call_ends_at_its_closing_token_or_at_the_longest_valid_call():
    assert MAX_CALL_TOKENS == len(encode("<call> read tests </call>"))
    assert not call_ended([]) and not call_ended(encode("<call> read tests"))
    assert call_ended(encode("</call>")) and call_ended(encode("<call> ls </call>"))
    assert call_ended(encode("<call> read tests tests"))          # cut there, and malformed
    assert parse_call(encode("<call> read tests tests"), ()) is None


def test_merge_spellings_maps_every_second_spelling_to_its_usual_one_and_nothing_else():
    from tinyagent.gym import SPELLINGS, merge_spellings
    from tinyagent.vocab import ID, VOCAB_SIZE
    tokens = torch.arange(VOCAB_SIZE)
    merged = merge_spellings(tokens)
    changed = (merged != tokens).nonzero()[:, 0].tolist()
    assert sorted(changed) == sorted(ID[second] for _, second in SPELLINGS.values())
    assert all(merged[ID[second]] == ID[usual] for usual, second in SPELLINGS.values())
    assert torch.equal(tokens, torch.arange(VOCAB_SIZE))          # the input is left alone


@pytest.mark.parametrize("bad", ["<call> ls </call>", [4.0, 8.0, 5.0], None, [True, 8, 5]])
def test_parse_call_refuses_what_is_not_a_list_of_token_ids(bad):
    from tinyagent.gym import parse_call
    with pytest.raises(TypeError, match="a call must be a list of token ids"):
        parse_call(bad, (ID["fn000"],))


def test_parse_call_takes_a_list_a_tuple_or_a_tensor_of_ids():
    from tinyagent.gym import parse_call
    ids = encode("<call> ls </call>")
    assert parse_call(ids, ()) == parse_call(tuple(ids), ()) == parse_call(torch.tensor(ids), ()) \
        == ("ls", None)


@pytest.mark.parametrize("ids", [[1.7], [True], [-1], [VOCAB_SIZE], torch.tensor([1.0])])
def test_decode_refuses_what_is_not_a_token_id(ids):
    with pytest.raises(ValueError, match=rf"token ids must lie in \[0, {VOCAB_SIZE}\) and be integers"):
        decode(ids)


def test_decode_refuses_text():
    with pytest.raises(TypeError, match="decode takes token ids, not text"):
        decode("<bos>")


@pytest.mark.parametrize("kinds,bug,decoy,message", [
    ((), 0, None, "kinds must be a tuple of 5 distinct kind-word ids"),
    ("TASK", 0, None, "kinds must be a tuple"),
    ((ID["ls"],) * 5, 0, None, "distinct kind-word ids"),
    (None, 5, None, "bug must be a function index in \\[0, 5\\)"),
    (None, True, None, "bug must be a function index"),
    (None, 1, 1, "decoy must be None or a function index .* other than the bug 1"),
    (None, 1, 7, "decoy must be None"),
])
def test_a_task_that_is_not_one_is_refused(kinds, bug, decoy, message):
    from tinyagent.gym import Task
    kinds = TRAIN_TASKS[0].kinds if kinds is None else kinds
    with pytest.raises(ValueError, match=message):
        Task(kinds, bug, decoy)


@pytest.mark.parametrize("n_heldout_log", [20, 11, -1, 1.5])
def test_make_splits_refuses_more_log_tasks_than_tasks(n_heldout_log):
    from tinyagent.gym import make_splits
    with pytest.raises(ValueError, match=r"log-reading tasks must be an integer in \[0, 10\]"):
        make_splits(n_heldout_log=n_heldout_log)


def test_make_splits_refuses_an_empty_split():
    from tinyagent.gym import make_splits
    with pytest.raises(ValueError, match="n \\(tasks\\) must be a positive integer"):
        make_splits(n_heldout=0)


def test_merge_spellings_takes_a_list_and_parse_call_refuses_names_that_are_not_ids():
    from tinyagent.gym import SPELLINGS, merge_spellings, parse_call
    usual, second = next(iter(SPELLINGS.values()))
    assert merge_spellings([ID[second], 4]).tolist() == [ID[usual], 4]
    with pytest.raises(TypeError, match="token ids"):
        merge_spellings("read")
    with pytest.raises(TypeError, match="names must be"):
        parse_call(encode("<call> ls </call>"), None)


@pytest.mark.parametrize("words", [None, 123, [1, 2]])
def test_encode_takes_words_only(words):
    with pytest.raises(TypeError, match="encode takes words"):
        encode(words)
