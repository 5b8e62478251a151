"""The paired bootstrap that guards a measured policy against a noisy best-of-many."""

from mlgo_host.evaluation.compare import significantly_smaller


def test_a_saving_spread_over_many_modules_is_significant():
    old = {f"m{i}": 1000 for i in range(40)}
    new = {f"m{i}": 990 if i % 4 else 1003 for i in range(40)}  # 30 modules -10, 10 modules +3
    assert significantly_smaller(new, old)


def test_a_saving_one_module_carries_is_not():
    # the PPO case: one module's 1,200 bytes against small losses elsewhere
    old = {f"m{i}": 1000 for i in range(185)}
    new = dict(old, m0=1000 - 1200, **{f"m{i}": 1010 for i in range(1, 30)})
    assert sum(old[n] - new[n] for n in old) == 1200 - 290
    assert not significantly_smaller(new, old)


def test_no_saving_or_no_common_module_is_never_significant():
    old = {"a": 10, "b": 20}
    assert not significantly_smaller(dict(old), old)
    assert not significantly_smaller({"a": 11, "b": 20}, old)
    assert not significantly_smaller({"c": 1}, old)
