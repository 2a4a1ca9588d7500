from tinyagent.runs import cached, code_version, policy_digest, run_key
from tinyagent.policy import Policy


def test_cache_computes_once_then_loads(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return {"value": [1.5, 2.5]}

    first = cached({"beta": 0.3}, compute, tmp_path)
    second = cached({"beta": 0.3}, compute, tmp_path)
    assert first == second == {"value": [1.5, 2.5]} and len(calls) == 1
    cached({"beta": 1.0}, compute, tmp_path)
    assert len(calls) == 2
    assert not list(tmp_path.glob("*.tmp"))          # written atomically, no leftovers


def test_keys_depend_on_config_and_code():
    assert run_key({"a": 1, "b": 2}) == run_key({"b": 2, "a": 1})
    assert run_key({"a": 1}) != run_key({"a": 2})
    assert len(code_version()) == 64


def test_policy_digest_tells_policies_apart():
    assert policy_digest(Policy(seed=0)) == policy_digest(Policy(seed=0))
    assert policy_digest(Policy(seed=0)) != policy_digest(Policy(seed=1))
