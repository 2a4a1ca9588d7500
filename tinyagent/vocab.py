"""The 316-word vocabulary of the one-edit gym: structure tokens, tool verbs, files, observation
words, function-kind words (what a task's functions do) and a pool of anonymous names."""
import operator


STRUCTURE = ("<pad>", "<bos>", "<task>", "</task>", "<call>", "</call>", "<obs>", "</obs>")
VERBS = ("ls", "read", "cat", "edit", "patch", "submit", "done")
FILES = ("tests", "log", "src")
OBS_WORDS = ("fail", "trace", "error", "ok", "empty", "malformed", "unknown", "edited",
             "submitted", "limit", "files", "passed")
N_KINDS = 246
N_NAMES = 40             # none to memorize; with ~120, 3,500 SFT steps do not learn to copy one
KINDS = tuple(f"kind{i:03d}" for i in range(N_KINDS))   # e.g. "parses dates", "merges lists"
NAMES = tuple(f"fn{i:03d}" for i in range(N_NAMES))     # drawn afresh for every episode

WORDS = STRUCTURE + VERBS + FILES + OBS_WORDS + KINDS + NAMES
ID = {w: i for i, w in enumerate(WORDS)}
VOCAB_SIZE = len(WORDS)
PAD = ID["<pad>"]
KIND_IDS = tuple(ID[w] for w in KINDS)
NAME_IDS = tuple(ID[w] for w in NAMES)
assert len(ID) == VOCAB_SIZE, "vocabulary words must be unique"


def encode(words):
    """Words (a list, or one space-separated string) to token ids; unknown words are an error."""
    if isinstance(words, str):
        words = words.split()
    if not isinstance(words, (list, tuple)) or not all(isinstance(w, str) for w in words):
        raise TypeError(f"encode takes words: one space-separated string or a list of strings, "
                        f"got {words!r:.80}")
    unknown = [w for w in words if w not in ID]
    if unknown:
        raise ValueError(f"not in the vocabulary: {unknown[:5]}; words are structure tokens "
                         f"{STRUCTURE}, verbs {VERBS}, files {FILES}, observation words, "
                         f"kind000-kind{N_KINDS - 1:03d} and fn000-fn{N_NAMES - 1:03d}")
    return [ID[w] for w in words]


def decode(ids):
    """Token ids (ints, or an integer tensor) to a space-separated string."""
    if isinstance(ids, (str, bytes)):
        raise TypeError(f"decode takes token ids, not text: got {ids!r:.80}; encode turns words "
                        f"into ids")
    as_ints = []
    for i in ids:
        try:
            as_ints.append(None if isinstance(i, bool) else operator.index(i))
        except TypeError:
            as_ints.append(None)
    bad = [i for i, j in zip(ids, as_ints) if j is None or not 0 <= j < VOCAB_SIZE]
    if bad:
        raise ValueError(f"token ids must lie in [0, {VOCAB_SIZE}) and be integers, got {bad[:5]}")
    return " ".join(WORDS[i] for i in as_ints)
