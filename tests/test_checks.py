"""Tests of tinyagent.checks, the shared argument rules: each refuses bad input with an error
that names the value (or the environment variable) and what is allowed."""
import ast
import math
from pathlib import Path

import pytest
import torch

from tinyagent import checks
from tinyagent.checks import (all_finite, env_flag, env_path, env_positive_int, finite_nonempty,
                              temperature)


@pytest.mark.parametrize("value", [1.0, 1, 0.7, 1.3, 1e-3, 1e6])
def test_allowed_temperatures_pass_through(value):
    assert temperature("temperature", value) == float(value)


@pytest.mark.parametrize("value", [0.0, -1.0, 1e-310, 1e-4, math.inf, math.nan])
def test_temperatures_that_define_no_usable_distribution_are_refused(value):
    with pytest.raises(ValueError, match=r"temperature must be positive and finite, at least "
                                         r"0\.001.*got"):
        temperature("temperature", value)


@pytest.mark.parametrize("value", ["1.0", True, None, torch.tensor(1.0)])
def test_a_temperature_must_be_a_real_number(value):
    with pytest.raises(TypeError, match="temperature must be a real number"):
        temperature("temperature", value)


def test_finite_nonempty_passes_finite_values_and_refuses_nan_inf_and_empty():
    rewards = torch.tensor([0.0, 1.0, 1.0])
    assert finite_nonempty("rewards", rewards) is rewards
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match=r"rewards must be finite, got \[.*\] at 1 of 3"):
            finite_nonempty("rewards", torch.tensor([0.0, bad, 1.0]))
    with pytest.raises(ValueError, match="rewards must hold at least one value"):
        finite_nonempty("rewards", torch.tensor([]))
    with pytest.raises(TypeError, match="rewards must be a tensor"):
        finite_nonempty("rewards", [0.0, 1.0])


@pytest.mark.parametrize("raw,expected", [("1", True), ("true", True), ("YES", True),
                                          (" On ", True), ("0", False), ("false", False),
                                          ("No", False), ("OFF", False)])
def test_env_flag_accepts_the_usual_spellings(monkeypatch, raw, expected):
    monkeypatch.setenv("TINYAGENT_TEST_FLAG", raw)
    assert env_flag("TINYAGENT_TEST_FLAG", not expected) is expected


def test_env_flag_unset_or_empty_is_the_default_and_nonsense_names_the_variable(monkeypatch):
    monkeypatch.delenv("TINYAGENT_TEST_FLAG", raising=False)
    assert env_flag("TINYAGENT_TEST_FLAG", True) is True
    monkeypatch.setenv("TINYAGENT_TEST_FLAG", "")
    assert env_flag("TINYAGENT_TEST_FLAG", False) is False
    monkeypatch.setenv("TINYAGENT_TEST_FLAG", "maybe")
    with pytest.raises(ValueError, match="TINYAGENT_TEST_FLAG='maybe'.*1/true/yes/on.*0/false"):
        env_flag("TINYAGENT_TEST_FLAG", True)


@pytest.mark.parametrize("raw", ["abc", "0", "-2", "1.5", " "])
def test_env_positive_int_names_the_variable_and_what_is_allowed(monkeypatch, raw):
    monkeypatch.setenv("TINYAGENT_WORKERS", raw)
    with pytest.raises(ValueError, match="TINYAGENT_WORKERS=.*must be a positive integer"):
        env_positive_int("TINYAGENT_WORKERS")


def test_env_positive_int_reads_a_count_and_defaults_when_unset(monkeypatch):
    monkeypatch.setenv("TINYAGENT_WORKERS", " 3 ")
    assert env_positive_int("TINYAGENT_WORKERS") == 3
    monkeypatch.delenv("TINYAGENT_WORKERS")
    assert env_positive_int("TINYAGENT_WORKERS") is None
    assert env_positive_int("TINYAGENT_WORKERS", 2) == 2


def test_env_path_expands_the_home_directory_and_refuses_blanks(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TINYAGENT_RUNS", "~/x")
    assert env_path("TINYAGENT_RUNS", "/default") == tmp_path / "x"
    monkeypatch.setenv("TINYAGENT_RUNS", " ")
    with pytest.raises(ValueError, match="TINYAGENT_RUNS=' ' is blank"):
        env_path("TINYAGENT_RUNS", "/default")
    monkeypatch.delenv("TINYAGENT_RUNS")
    assert env_path("TINYAGENT_RUNS", "/default") == Path("/default")


def test_checks_stays_a_leaf():
    tree = ast.parse(Path(checks.__file__).read_text())
    relative = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level]
    assert not relative, "checks must import no package module"


def test_minus_zero_becomes_zero_so_equal_configs_key_alike():
    value = checks.real_number("kl_coef", -0.0, lambda v: v >= 0, "non-negative")
    assert value == 0.0 and math.copysign(1, value) == 1


@pytest.mark.parametrize("kind", [str, Path])
def test_every_path_expands_the_home_directory(monkeypatch, tmp_path, kind):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert checks.path("path", kind("~/x.pt")) == tmp_path / "x.pt"
    assert checks.path("path", kind("rel/x.pt")) == Path("rel/x.pt")


@pytest.mark.parametrize("value", ["", " ", None, 3, b"x.pt"])
def test_an_empty_path_or_a_non_path_is_refused(value):
    with pytest.raises((TypeError, ValueError), match="cache_dir must be a path"):
        checks.path("cache_dir", value)


def test_a_directory_may_be_missing_but_not_a_file(tmp_path):
    assert checks.directory("cache_dir", tmp_path / "new") == tmp_path / "new"
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError, match="cache_dir .*file.* is a file, not a directory"):
        checks.directory("cache_dir", tmp_path / "file")


@pytest.mark.parametrize("value", [0, 5, 1.5, True, "2", None])
def test_int_in_takes_integers_in_its_range_only(value):
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, 4\]"):
        checks.int_in("k", value, 1, 4)
    assert checks.int_in("k", 4, 1, 4) == 4


def test_a_list_argument_is_read_once_and_must_hold_something():
    assert checks.nonempty_list("tasks", (x for x in "ab")) == ("a", "b")
    with pytest.raises(ValueError, match="tasks must hold at least one item"):
        checks.nonempty_list("tasks", [])
    for bad in ("ab", None, 3):
        with pytest.raises(TypeError, match="tasks must be a list or tuple"):
            checks.nonempty_list("tasks", bad)


def test_instance_names_the_class_expected_and_what_came():
    with pytest.raises(TypeError, match="cfg must be a Path, got dict"):
        checks.instance("cfg", {"kl_coef": 0.3}, Path)


@pytest.mark.parametrize("tokens, error", [
    (torch.zeros(2, 3), TypeError),                              # float ids
    ([[1, 2]], TypeError),                                        # not a tensor
    (torch.zeros(3, dtype=torch.long), ValueError),               # one episode, 1-D
    (torch.zeros(0, 3, dtype=torch.long), ValueError),            # no episode
    (torch.tensor([[1, 316]]), ValueError),                       # past the vocabulary
    (torch.tensor([[-1, 2]]), ValueError)])
def test_token_ids_are_an_integer_batch_inside_the_vocabulary(tokens, error):
    with pytest.raises(error, match="tokens"):
        checks.token_ids("tokens", tokens, 316)
    ok = torch.tensor([[0, 315]])
    assert checks.token_ids("tokens", ok, 316) is ok



@pytest.mark.parametrize("value", ["", ".", Path(""), "./", "..", "/", "dir", Path("dir")])
def test_a_file_path_names_a_file(tmp_path, monkeypatch, value):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dir").mkdir()
    with pytest.raises((ValueError, IsADirectoryError),
                       match="path must (be a path|name a file)|path .* is a directory"):
        checks.file_path("path", value)
    assert checks.file_path("path", "dir/x.bin") == Path("dir/x.bin")


@pytest.mark.parametrize("value", [Path(""), ".", "sub"])
def test_write_atomically_writes_only_to_a_file_path(tmp_path, monkeypatch, value):
    from tinyagent.files import write_atomically
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    with pytest.raises((ValueError, IsADirectoryError), match="path"):
        write_atomically(value, b"x")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["sub"]     # nothing written


def test_all_finite_finds_any_inf_or_nan_and_no_false_alarm():
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        big = torch.full((1000,), torch.finfo(dtype).max, dtype=dtype)   # its sum overflows dtype
        assert all_finite(big, -big, torch.zeros(0, dtype=dtype))
        for bad in (math.inf, -math.inf, math.nan):
            broken = big.clone()
            broken[617] = bad
            assert not all_finite(torch.ones(3, dtype=dtype), broken), (dtype, bad)
    with_opposite_infinities = torch.tensor([math.inf, -math.inf])           # sum: NaN
    assert not all_finite(with_opposite_infinities)
