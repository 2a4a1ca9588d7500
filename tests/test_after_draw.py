from tinyagent.science import plan, study
from tinyagent.science.claims.after_draw import DOUBLED, after_draw_claims
from tinyagent.science.experiments import COMPARISON


def _seed(changes=None):
    r = {s: {"kl_to_ref": 0.2, "pass@1": 0.5, "distinct": 4.0} for s in COMPARISON}
    for (setting, column), v in (changes or {}).items():
        r[setting][column] = v
    return r


def test_each_statement_holds_only_where_the_chapter_says():
    temp, best, doubled = after_draw_claims()
    furthest = _seed({("temperature 1.3", "kl_to_ref"): 0.5, ("entropy 0.1", "kl_to_ref"): 0.9})
    assert temp.holds(temp.measure(furthest))
    assert not temp.holds(temp.measure(_seed({("temperature 1.3", "kl_to_ref"): 0.5,
                                                 ("none", "kl_to_ref"): 0.6})))
    assert best.holds(best.measure(_seed({("k3+ beta=0.05", "pass@1"): 0.8})))
    assert not best.holds(best.measure(_seed()))                 # a tie is not the best
    ratio = _seed({("k3+ beta=0.3", "distinct"): 4.0 * DOUBLED + 0.01})
    assert doubled.holds(doubled.measure(ratio))
    assert not doubled.holds(doubled.measure(_seed({("k3+ beta=0.3", "distinct"): 6.0})))


def test_the_after_draw_table_is_labelled_and_leaves_the_plan_alone():
    before = plan.family_size()
    table = plan.after_draw_table(study.load_records(), after_draw_claims())
    assert (table["scored"] == plan.AFTER_DRAW).all()
    assert set(table.index) == {c.key for c in after_draw_claims()}
    assert not set(table.index) & set(plan.PLAN["claims"])
    assert plan.family_size() == before
    assert set(table["verdict"]) <= set(plan.VERDICTS)
