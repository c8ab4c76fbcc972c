"""raptor.audit: empirical privacy audits that test the released mechanism the way an attacker would.

* :mod:`raptor.audit.bounds` -- eps lower bounds from attack scores (Clopper-Pearson threshold
  tests; the one-run bound of Steinke, Nasr & Jagielski 2023);
* :mod:`raptor.audit.mechanism` -- a white-box audit of one update's real release path;
* :mod:`raptor.audit.one_run` -- a one-run audit of a whole training run with canaries;
* :mod:`raptor.audit.dirac` -- white-box Dirac gradient canaries for it (the one-run audit with power);
* :mod:`raptor.audit.trainer_loop` -- many short runs of ``Trainer.step`` against the trainer's ledger;
* :mod:`raptor.audit.power` -- the mechanism audit's power curve (noise divided by f);
* :mod:`raptor.audit.report` -- JSON and the PNG of in vs out score distributions.
"""
