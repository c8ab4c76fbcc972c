"""Issue 24's planted-bug table: each bug is planted by monkeypatching (tests/audit/planted.py; the
real source is never edited) and must be caught: the audit's epsilon lower bound above its claim.

| planted bug                                        | caught by                                        |
|----------------------------------------------------|--------------------------------------------------|
| expert sigma halved in release.py                  | mechanism audit (joint)                          |
| expert groups not clipped in engine.py             | mechanism audit (joint)                          |
| noise sigma/1.5 while the ledger keeps sigma       | mechanism audit (joint)                          |
| PrivacyLedger.record stores 1.5 sigma              | mechanism audit (joint): its claim drops         |
| release_gradients re-seeds a fixed generator       | trainer-loop audit ("repeat" score); also        |
|                                                    | tests/mechanisms/test_noise_freshness.py         |
| shared-stream noise drawn once and reused          | trainer-loop audit ("repeat" score); also        |
|                                                    | tests/mechanisms/test_noise_freshness.py         |
| trainer.py records 1.5 sigma in its ledger         | trainer-loop audit's ledger cross-check (its     |
|                                                    | claim is the trainer's; the plan's differs)      |
| secure-mode Gaussian / 4 instead of / 2            | mechanism audit through AesCtrGenerator          |

Sizes: 10,000 releases per world and half for the mechanism audit (the bounds of these bugs are
2x to 4x their claims, far from the edge; 20,000 for the ledger row; 4,000 through AES-CTR, whose
noise is the slow part), 150 trainer-loop runs per world and half for the repeating-noise rows
(100 for the ledger row, caught by the cross-check) and the default 400 for the control.
"""

from __future__ import annotations

import planted
import pytest

from raptor.audit.mechanism import MechanismAuditConfig, run_mechanism_audit
from raptor.audit.trainer_loop import TrainerLoopAuditConfig, run_trainer_loop_audit

MECHANISM = MechanismAuditConfig(releases=10_000)

MECHANISM_ROWS = [
    ("expert sigma halved in release.py", planted.expert_sigma_halved, MECHANISM),
    ("expert groups not clipped in engine.py", planted.experts_not_clipped, MECHANISM),
    ("noise sigma/1.5 while the ledger keeps sigma", planted.noise_divided, MECHANISM),
    ("PrivacyLedger.record stores 1.5 sigma", planted.ledger_records_more_sigma,
     MechanismAuditConfig()),  # the correct release vs a claim 0.27x: 20,000 releases (bound 1.18 vs 0.458)
    ("secure-mode Gaussian / 4 instead of / 2", planted.secure_gaussian_quartered,
     MechanismAuditConfig(releases=4_000, generator="aes-ctr")),  # 3,000: bound 2.46 vs claim 1.69
]

#: runs per world and half: noise that repeats separates the worlds completely, and 150 runs already
#: give a repeat bound of 2.75 against the 2.26 asserted (1.5 x the claim 1.51; 400 runs: 4.5); the
#: ledger row is caught by the cross-check, which needs no statistics (the minimum, 100 runs)
LOOP_ROWS = [
    ("release_gradients re-seeds a fixed generator on every call", planted.release_reseeds, 150),
    ("shared-stream noise drawn once and reused", planted.shared_noise_reused, 150),
    ("trainer.py records 1.5 sigma in the ledger", planted.trainer_records_more_sigma, 100),
]


@pytest.mark.parametrize(("row", "plant", "cfg"), MECHANISM_ROWS, ids=[r[0] for r in MECHANISM_ROWS])
def test_mechanism_audit_catches(row, plant, cfg, monkeypatch):
    plant(monkeypatch)
    res = run_mechanism_audit(cfg)
    assert res.epsilon_lower_bound > res.claimed_epsilon, (row, res.epsilon_lower_bound, res.claimed_epsilon)


@pytest.mark.parametrize(("row", "plant", "runs"), LOOP_ROWS, ids=[r[0] for r in LOOP_ROWS])
def test_trainer_loop_audit_catches(row, plant, runs, monkeypatch):
    plant(monkeypatch)
    res = run_trainer_loop_audit(TrainerLoopAuditConfig(runs=runs))
    assert res.caught, (row, res.to_dict())
    if plant is planted.trainer_records_more_sigma:  # the cross-check: claim below the plan's own events
        assert res.claimed_epsilon < 0.7 * res.plan_epsilon
    else:                                             # noise that repeats: the threshold test itself
        assert res.bounds["repeat"].epsilon > 1.5 * res.claimed_epsilon


def test_the_real_noise_path_passes_both_audits():
    # The controls: the unpatched mechanism through AES-CTR, and the unpatched trainer loop. 3,000
    # releases (AES-CTR noise is the slow part, and cannot be seeded): bounds seen 0.39-1.02 vs claim
    # 1.69, so the AES path is audited for real (not a vacuous 0) and stays below the claim. (A
    # claim/4 floor failed once at 0.39: the bound of one unseeded run varies that much.)
    res = run_mechanism_audit(MechanismAuditConfig(releases=3_000, generator="aes-ctr"))
    assert 0 < res.epsilon_lower_bound <= res.claimed_epsilon
    loop = run_trainer_loop_audit(TrainerLoopAuditConfig())
    assert loop.epsilon_lower_bound <= loop.claimed_epsilon and loop.ledger_consistent and not loop.caught
    assert loop.bounds["repeat"].epsilon < 0.5 * loop.claimed_epsilon   # fresh noise: the repeat score is weak
