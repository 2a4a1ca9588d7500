"""The numbers the book printed, by section, so every table can show the book's figure beside ours.

These are targets to compare against, never results: a notebook prints them only in a column
labelled as the book's. Keys name the quantity; values are as printed in the chapter.
"""

CHAPTER_9 = {
    "base_reads_per_episode": (0.21, 0.24),
    "base_entropy": 0.55,
    "entropy_start": 0.57,
    "entropy_step_80": 0.08,
    "zero_advantage_share_end": 0.8,
    "clip_fraction": 0.0013,
    "heldout_pass1_step_40_three_seeds": (0.71, 0.81),
    "per_token_k3_preset": 0.17,
}

SECTION_10_1 = {
    "kl_at_beta_10": 0.001,
    "reward_at_beta_0.01": 1.0,
    "entropy_at_beta_0.01": 0.0,
    "kl_at_beta_0.01": 2.996,
    "entropy_bonus_alpha": 0.3,
    "entropy_bonus_p_action_4": 0.59,
    "entropy_bonus_reward": 1.065,
    "reward_action_4": 1.2,
    "ref_p_action_0": 0.05,
}

SECTION_10_2 = {
    "true_kls": (0.001, 0.32, 1.08),          # the second of the four distances is not printed
    "k2_mean_ratio": {0.001: 1.01, 0.32: 1.41, 1.08: 2.0},
    "k1_mean_ratio": 1.000,
    "k3_mean_ratio": 1.000,
    "k1_std_ratio_at_0.001": 44.84,
    "k3_std_ratio_at_0.001": 1.25,
}

SECTION_10_3 = {
    "k1_rel_error": 1.0,
    "k3_rel_error_vs_reverse": 0.50,
    "k3_loss_error_by_kl": {0.002: 0.034, 0.06: 0.17},
    "k3_loss_error_row_after_0.06": 0.34,
}

SECTION_10_4 = {
    "k2_loss_error_first_token": 0.68,
    "k2_loss_error_second_token": 0.0,
    "reward_placement_error": 0.0,
    "k1_loss_rel_error": 1.0,
}

SECTION_10_5 = {
    "grid_points": 121,
    "forward_std": 2.84,
    "forward_valley_mass": 0.30,
    "target_valley_mass": 0.008,
    "reverse_mean": 2.50,
    "reverse_std": 0.60,
    "reverse_kl": 0.693,
    "reverse_init_mean": 1.0,
}

SECTION_10_6 = {
    "likely_token_p": 0.647,
    "rare_token_p": 0.0044,
    "prediction_within": 0.01,
    # train_regularized vs train_rl, 3 steps with both regularizers off: max |parameter difference|
    "regularizers_off_max_param_diff": 0.0,
    # clip-higher on one batch: eps_high -> (tokens above 1 + eps_high, of which started below 0.5)
    "clip_higher_above": {0.2: (20, 15), 0.28: (15, 14)},
    "positive_advantage_tokens": 121,
    "positive_advantage_tokens_below_half": 17,
    "entropy_before": 0.547,
    "entropy_after": {0.2: 0.538, "unbounded": 0.508},
    # the sentence after the four-case table: cases (of four) that lower the entropy when the
    # policy is right more often than not
    "cases_lowering_entropy": 3,
    # the clip-higher lever's bullet: room a token has before the upper clip binds, at eps 0.2,
    # by its probability (arithmetic of the bullet's own inputs)
    "clip_room": {0.9: 0.18, 0.01: 0.002},
    # quoted in the clip-higher paragraph from Chapter 9: the share of tokens its default clipped
    "chapter9_clip_fraction": CHAPTER_9["clip_fraction"],
}

# Section 10.7: the nine 40-step runs. None means the chapter does not print that cell.
SECTION_10_7_COLUMNS = ("entropy", "pass@1", "pass@8", "distinct", "kl_to_ref", "reads",
                        "malformed")
SECTION_10_7 = {
    "none":           dict(entropy=0.12, **{"pass@1": 0.725, "pass@8": 0.80}, distinct=4.3,
                           kl_to_ref=0.237, reads=None, malformed=0.04),
    "k3+ beta=0.05":  dict(entropy=0.124, **{"pass@1": 0.80, "pass@8": 1.000}, distinct=None,
                           kl_to_ref=None, reads=None, malformed=None),
    "k3+ beta=0.3":   dict(entropy=0.284, **{"pass@1": 0.588, "pass@8": 0.99}, distinct=8.3,
                           kl_to_ref=None, reads=None, malformed=None),
    "k3+ beta=1.0":   dict(entropy=0.54, **{"pass@1": 0.23, "pass@8": 0.90}, distinct=None,
                           kl_to_ref=None, reads=0.53, malformed=None),
    "k3 beta=0.3":    dict(entropy=0.294, **{"pass@1": 0.594, "pass@8": None}, distinct=None,
                           kl_to_ref=None, reads=None, malformed=None),
    "reward beta=0.3": dict(entropy=None, **{"pass@1": 0.34, "pass@8": None}, distinct=None,
                            kl_to_ref=0.059, reads=0.48, malformed=None),
    "entropy 0.03":   dict(entropy=0.31, **{"pass@1": None, "pass@8": None}, distinct=None,
                           kl_to_ref=0.325, reads=None, malformed=0.28),
    "entropy 0.1":    dict(entropy=5.707, **{"pass@1": 0.0, "pass@8": 0.0}, distinct=None,
                           kl_to_ref=None, reads=None, malformed=6.0),
    "temperature 1.3": dict(entropy=None, **{"pass@1": None, "pass@8": None}, distinct=None,
                            kl_to_ref=0.517, reads=None, malformed=0.25),
}
# The comparisons Section 10.7's prose draws between runs of its table: (a, b, column), read as
# "a against b on column"; 10.7 pairs them by seed.
SECTION_10_7_COMPARISONS = (
    ("k3+ beta=0.05", "none", "entropy"), ("k3+ beta=0.05", "none", "pass@1"),
    ("k3+ beta=0.05", "none", "pass@8"),
    ("k3+ beta=0.3", "none", "distinct"), ("k3+ beta=0.3", "none", "pass@8"),
    ("k3+ beta=0.3", "none", "pass@1"), ("k3+ beta=0.3", "none", "entropy"),
    ("k3+ beta=0.3", "k3+ beta=0.05", "entropy"), ("k3+ beta=1.0", "k3+ beta=0.3", "entropy"),
    ("k3+ beta=0.3", "k3+ beta=0.05", "pass@1"), ("k3+ beta=1.0", "k3+ beta=0.3", "pass@1"),
    ("k3+ beta=0.3", "k3+ beta=0.05", "kl_to_ref"),
    ("k3+ beta=1.0", "k3+ beta=0.3", "kl_to_ref"),
    ("k3 beta=0.3", "k3+ beta=0.3", "entropy"), ("k3 beta=0.3", "k3+ beta=0.3", "pass@1"),
    ("k3 beta=0.3", "k3+ beta=0.3", "kl_to_ref"), ("k3 beta=0.3", "k3+ beta=0.3", "reads"),
    ("reward beta=0.3", "k3+ beta=0.3", "pass@1"), ("reward beta=0.3", "k3 beta=0.3", "pass@1"),
    ("reward beta=0.3", "k3+ beta=0.3", "kl_to_ref"),
    ("reward beta=0.3", "k3+ beta=0.3", "reads"),
    ("entropy 0.03", "none", "entropy"), ("entropy 0.03", "none", "malformed"),
    ("entropy 0.03", "none", "kl_to_ref"),
    ("temperature 1.3", "none", "malformed"), ("temperature 1.3", "none", "kl_to_ref"),
)
SECTION_10_7_EXTRA = {
    "entropy_start": 0.52,
    "temperature_1.3_training_entropy": (0.78, 0.47),
    "log_vocab": 5.756,
    # the pass@1/pass@8 bullet: held-out tasks the unregularized run never solved in 16 attempts
    "none_tasks_never_solved": 2,
    # the estimator bullet: the per-token KL of the two losses at beta 0.3 ("about 0.1") and the
    # gradient difference Section 10.3's table puts there ("near 25%")
    "loss_kl_at_beta_0.3": 0.1,
    "k3_gradient_gap_at_0.1": 0.25,
    # the placement bullet: policy tokens per episode that the reward version sums over
    "policy_tokens_per_episode": (12, 14),
    # the Evidence paragraph: the noise of a held-out pass@1 difference ("about 0.08"), and the
    # spread of the default run over three seeds it quotes from Chapter 9
    "pass1_noise": 0.08,
    "chapter9_heldout_pass1_three_seeds": CHAPTER_9["heldout_pass1_step_40_three_seeds"],
}

SECTION_10_8 = {
    # histories: run -> {step: (entropy, batch reward)}; None where not printed
    "history": {
        "none": {0: (0.56, None), 10: (0.37, 0.41), 20: (0.18, None), 39: (None, 0.86)},
        "k3+ beta=0.3": {20: (0.30, None), 39: (None, 0.73)},
        "entropy 0.03": {20: (0.30, None), 39: (None, 0.86)},
    },
    "kl_log": {"k3+ beta=0.05": {20: 0.20}, "k3+ beta=1.0": {"max": 0.03},
               "k3+ beta=0.3": {"plateau": 0.1}},
    "reference_memory_ratio": 0.125,
    "reference_gib_32b": 60,
    "reference_compute_extra": 0.25,
    "reset": {
        "anchored": dict(kl_to_reference=0.18, entropy=None, **{"pass@1": 0.731}, distinct=6.0),
        "reset": dict(kl_to_reference=0.029, entropy=0.135, **{"pass@1": 0.787}, distinct=4.6),
    },
    # Problem 2's paragraph: policy tokens per episode, the loss/reward scale factor ("about 13")
    "policy_tokens_per_episode": 13,
    # Problem 3's closing sentence: TinyAgent's parameter count ("157k")
    "parameters": 157_000,
    # numbers 10.8 prints again from Chapter 9 and 10.7 (their status is their source's)
    "quoted": {
        "chapter 9: entropy at step 80": CHAPTER_9["entropy_step_80"],
        "chapter 9: base reads per episode": CHAPTER_9["base_reads_per_episode"],
        "10.7: none kl_to_ref": SECTION_10_7["none"]["kl_to_ref"],
        "10.7: k3+ beta=1.0 reads": SECTION_10_7["k3+ beta=1.0"]["reads"],
        "10.7: k3+ beta=1.0 pass@1": SECTION_10_7["k3+ beta=1.0"]["pass@1"],
        "10.7: none tasks never solved": SECTION_10_7_EXTRA["none_tasks_never_solved"],
    },
}
