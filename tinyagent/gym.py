"""The anonymized one-edit gym.

A task is a module of five functions, each described by a kind word; exactly one function is
broken, and the hidden tests pass only if that function, and no other, has been edited before
`submit`. The agent acts through tool calls written as tokens:

    <call> ls </call>                       list the files (harmless, tells nothing)
    <call> read|cat tests|log|src </call>   read a file (two equivalent verbs)
    <call> edit|patch NAME </call>          edit the function called NAME
    <call> submit|done </call>              run the hidden tests and end the episode

Names are drawn afresh for every episode from a pool of 40, so no answer can be memorized.
Reading `tests` shows the failing test, which names the broken function: without reading, an
edit is right one time in five (the blind ceiling of 0.2). In a minority of tasks the failing
test names a caller and points to the log ("fail NAME trace log"); the broken function is the
one the log names, so "edit what the test names" fails them every time. A call that does not parse is malformed: the gym answers with an error
observation, counts it, and goes on. Six calls end the episode.
"""
from dataclasses import dataclass, field

import torch

from .checks import positive_int
from .vocab import ID, KIND_IDS, NAME_IDS, encode

N_FUNCTIONS = 5
MAX_CALLS = 6            # the turn limit: a looping or babbling episode ends here
MAX_CALL_TOKENS = 4      # the longest valid call, `<call> read tests </call>`
BLIND_CEILING = 1 / N_FUNCTIONS
PROMPT_TOKENS = 3 + 2 * N_FUNCTIONS                   # <bos> <task> (name kind) x5 </task>
LONGEST_OBSERVATION = 3 + N_FUNCTIONS                 # <obs> src name x5 </obs>
MAX_EPISODE_TOKENS = (PROMPT_TOKENS + MAX_CALLS * MAX_CALL_TOKENS        # the last call has no
                      + (MAX_CALLS - 1) * LONGEST_OBSERVATION)          # observation: 77

CALL, END_CALL = ID["<call>"], ID["</call>"]
# Three actions have a second, rarer spelling with the same effect: (usual, second) per action.
SPELLINGS = {"read": ("read", "cat"), "edit": ("edit", "patch"), "submit": ("submit", "done")}
READ_VERBS, EDIT_VERBS, SUBMIT_VERBS = ({ID[word] for word in SPELLINGS[action]}
                                        for action in ("read", "edit", "submit"))
LS = ID["ls"]


def merge_spellings(tokens):
    """`tokens` (a tensor of ids) with every action's second spelling replaced by its usual one:
    what the agent did, not how it spelled it. A list or tuple of ids is taken as a tensor."""
    if isinstance(tokens, (list, tuple)):
        tokens = torch.as_tensor(tokens, dtype=torch.long)
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"merge_spellings takes token ids (a tensor or a list), got "
                        f"{type(tokens).__name__}")
    merged = tokens.clone()
    for usual, second in SPELLINGS.values():
        merged[tokens == ID[second]] = ID[usual]
    return merged
TESTS, LOG, SRC = ID["tests"], ID["log"], ID["src"]


def _is_index(value):
    """Whether `value` is an int (not a bool) in [0, N_FUNCTIONS)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < N_FUNCTIONS


@dataclass(frozen=True)
class Task:
    """One repair task. `kinds`: what each of the five functions does (kind-word ids);
    `bug`: the function whose edit fixes it; `decoy`: for the minority that needs the log,
    the caller the failing test names instead (None for the majority)."""
    kinds: tuple
    bug: int
    decoy: int | None = None

    def __post_init__(self):
        kinds, bug, decoy = self.kinds, self.bug, self.decoy
        if (not isinstance(kinds, tuple) or len(kinds) != N_FUNCTIONS
                or len(set(kinds)) != N_FUNCTIONS or not set(kinds) <= set(KIND_IDS)):
            raise ValueError(f"Task kinds must be a tuple of {N_FUNCTIONS} distinct kind-word ids "
                             f"(vocab.KIND_IDS, {KIND_IDS[0]}..{KIND_IDS[-1]}), got {kinds!r}")
        if not _is_index(bug):
            raise ValueError(f"Task bug must be a function index in [0, {N_FUNCTIONS}), "
                             f"got {bug!r}")
        if decoy is not None and (not _is_index(decoy) or decoy == bug):
            raise ValueError(f"Task decoy must be None or a function index in [0, {N_FUNCTIONS}) "
                             f"other than the bug {bug}, got {decoy!r}")

    @property
    def needs_log(self):
        return self.decoy is not None


def make_tasks(n, n_log, gen, exclude=()):
    """`n` distinct tasks, `n_log` of them of the log-reading minority, none in `exclude`."""
    positive_int("n (tasks)", n)
    if isinstance(n_log, bool) or not isinstance(n_log, int) or not 0 <= n_log <= n:
        raise ValueError(f"the number of log-reading tasks must be an integer in [0, {n}] (the "
                         f"number of tasks), got {n_log!r}")
    tasks, seen = [], set(exclude)
    while len(tasks) < n:
        kinds = tuple(KIND_IDS[i] for i in torch.randperm(len(KIND_IDS), generator=gen)[:N_FUNCTIONS])
        bug = int(torch.randint(N_FUNCTIONS, (1,), generator=gen))
        decoy = None
        if len(tasks) < n_log:
            decoy = (bug + 1 + int(torch.randint(N_FUNCTIONS - 1, (1,), generator=gen))) % N_FUNCTIONS
        task = Task(kinds, bug, decoy)
        if (kinds, bug) not in seen:
            seen.add((kinds, bug))
            tasks.append(task)
    order = torch.randperm(n, generator=gen).tolist()
    return [tasks[i] for i in order]


def make_splits(seed=0, n_train=200, n_heldout=10, n_train_log=20, n_heldout_log=2):
    """The training split and the held-out split (10 tasks), which share no task. The
    log-reading minority is a tenth of training (rare enough that an unregularized run can
    ignore it) and two of the ten held-out tasks (so evaluation can see whether it did)."""
    gen = torch.Generator().manual_seed(seed)
    heldout = make_tasks(n_heldout, n_heldout_log, gen)
    train = make_tasks(n_train, n_train_log, gen, exclude={(t.kinds, t.bug) for t in heldout})
    return train, heldout


TRAIN_TASKS, HELDOUT_TASKS = make_splits()


@dataclass
class Episode:
    """The gym's state for one attempt at a task. `names[i]` is the token of function i's
    anonymous name for this episode."""
    task: Task
    names: tuple
    edits: list = field(default_factory=list)
    calls: int = 0
    reads: int = 0
    malformed: int = 0
    done: bool = False
    reward: float = 0.0

    @classmethod
    def start(cls, task, gen):
        """A new episode with names drawn from the pool with the explicit generator `gen`."""
        pick = torch.randperm(len(NAME_IDS), generator=gen)[:N_FUNCTIONS]
        return cls(task, tuple(NAME_IDS[i] for i in pick))

    def prompt(self):
        """`<bos> <task> name kind ×5 </task>`: what the agent sees before its first call."""
        body = [t for pair in zip(self.names, self.task.kinds) for t in pair]
        return [ID["<bos>"], ID["<task>"], *body, ID["</task>"]]

    def step(self, call):
        """Execute one call (its policy tokens, `<call>` ... `</call>`); return the observation
        tokens to feed back (empty when the episode has ended)."""
        if self.done:
            raise ValueError("the episode has ended; start a new one")
        self.calls += 1
        obs = self._execute(call)
        if not self.done and self.calls >= MAX_CALLS:
            self.done = True
        return [] if self.done else [ID["<obs>"], *obs, ID["</obs>"]]

    def _execute(self, call):
        parsed = parse_call(call, self.names)
        if parsed is None:
            self.malformed += 1
            return encode("error malformed")
        verb, arg = parsed
        if verb == "ls":
            return encode("files tests log src")
        if verb == "read":
            self.reads += 1
            return self._read(arg)
        if verb == "edit":
            self.edits.append(arg)
            return [ID["edited"], self.names[arg]]
        self.done = True                                   # submit: the hidden tests run
        self.reward = float(set(self.edits) == {self.task.bug})
        return []

    def _read(self, file):
        t, names = self.task, self.names
        if file == TESTS:
            if t.needs_log:
                return [ID["fail"], names[t.decoy], ID["trace"], LOG]
            return [ID["fail"], names[t.bug]]
        if file == LOG:
            return [ID["error"], names[t.bug]] if t.needs_log else [LOG, ID["empty"]]
        return [SRC, *names]


def parse_call(call, names):
    """(verb, argument) for a well-formed call, None for a malformed one. The argument is a
    file token for `read`, a function index for `edit`, None otherwise. `call` is a list (or
    tuple, or 1-d tensor) of token ids; anything else is a TypeError, not a malformed call."""
    if isinstance(call, torch.Tensor):
        call = call.tolist()
    if not isinstance(call, (list, tuple)) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in call):
        raise TypeError(f"a call must be a list of token ids (ints), got {call!r:.80}")
    if not isinstance(names, (list, tuple)) or not all(isinstance(t, int) for t in names):
        raise TypeError(f"names must be the episode's function-name ids (a list of ints, "
                        f"Episode.names), got {names!r:.80}")
    call = list(call)
    if len(call) < 3 or call[0] != CALL or call[-1] != END_CALL:
        return None
    body = call[1:-1]
    if body == [LS]:
        return ("ls", None)
    if len(body) == 1 and body[0] in SUBMIT_VERBS:
        return ("submit", None)
    if len(body) == 2 and body[0] in READ_VERBS and body[1] in (TESTS, LOG, SRC):
        return ("read", body[1])
    if len(body) == 2 and body[0] in EDIT_VERBS and body[1] in names:
        return ("edit", names.index(body[1]))
    return None


def call_ended(call):
    """Whether the call being written (its policy tokens so far) is complete, well-formed or not:
    a call ends at `</call>` or after MAX_CALL_TOKENS tokens."""
    return len(call) >= MAX_CALL_TOKENS or (len(call) > 0 and call[-1] == END_CALL)
